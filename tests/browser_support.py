"""Servers for the browser tests, all on loopback: pages, a server that counts what reaches it, UDP listeners.

`Site` serves the pages (links, a form, a dropdown, a long page, a link opening a new tab, a page
that navigates on a key press, a 7 MB one, one loading subresources from the blocked host, redirects out and
in). `Pages` is a site a test fills in itself (pages, headers, redirects, a WebSocket). `Counter` stands
for a host outside the allowlist: the tests map the name `BLOCKED_HOST` to it through the session's own
`resolve`, so a request that got past the allowlist would reach it and be counted (nothing else could: it
binds loopback and the name exists nowhere else). `Listener` counts the UDP datagrams sent to an address.

`require_chromium()` skips a test without Chromium or Playwright, or fails it under
AGENTFSM_REQUIRE_BROWSER=1 (CI). `browser_leftovers()` lists the browser processes and the
temporary directories of browsers still present (for the suite's final check).
"""

from __future__ import annotations

import base64
import hashlib
import html
import os
import socket
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from agentfsm.browser.session import WORKDIR_PREFIX
from agentfsm.browser.settings import DEFAULT_EXECUTABLE

REQUIRE_BROWSER = os.environ.get("AGENTFSM_REQUIRE_BROWSER") == "1"
"""Set by CI: a browser test that would skip fails instead."""

BLOCKED_HOST = "blocked.test"


def require_chromium() -> None:
    """Skip (or, with AGENTFSM_REQUIRE_BROWSER=1, fail) unless Chromium and Playwright are here."""
    why = None
    if not os.access(DEFAULT_EXECUTABLE, os.X_OK):
        why = f"no Chromium at {DEFAULT_EXECUTABLE}; run tools/browser-env"
    else:
        try:
            import playwright  # noqa: F401
        except ImportError:
            why = "Playwright is not installed; run tools/dev-env"
    if why is not None:
        if REQUIRE_BROWSER:
            pytest.fail(f"AGENTFSM_REQUIRE_BROWSER=1 but the browser cannot run: {why}", pytrace=False)
        pytest.skip(why)


def browser_leftovers() -> list[str]:
    """Chromium processes started for a browser session, Playwright drivers, and browser work
    directories, that still exist."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            environ = (Path("/proc") / pid / "environ").read_bytes()
            cmdline = (Path("/proc") / pid / "cmdline").read_bytes()
        except OSError:
            continue
        program = cmdline.split(b"\0")[0].decode(errors="replace")
        if b"AGENTFSM_BROWSER_DIR=" in environ or WORKDIR_PREFIX.encode() in cmdline:
            found.append(f"process {pid} ({program})")
        elif b"run-driver" in cmdline and _parent(pid) == os.getpid():
            found.append(f"Playwright driver {pid} ({program})")
    temp = Path(tempfile.gettempdir())
    for prefix in (WORKDIR_PREFIX, "playwright-artifacts-", "playwright_chromiumdev_profile-"):
        found += [f"directory {p}" for p in temp.glob(f"{prefix}*")]
    return found


def _parent(pid: str) -> int:
    try:
        return int((Path("/proc") / pid / "stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def chromium_pid(workdir: Path) -> int:
    """The main Chromium process of the browser whose work directory is `workdir`."""
    marker = f"--user-data-dir={workdir / 'profile'}".encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            args = (Path("/proc") / pid / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in args and not any(a.startswith(b"--type=") for a in args):
            return int(pid)
    raise AssertionError(f"no Chromium process runs with {marker!r}")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False


@contextmanager
def _serving(handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1") -> Iterator[_Server]:
    server = _Server((host, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


_OUTSIDE = b"<title>Outside</title><p>you reached the blocked host</p>"


class Counter:
    """A server standing for a host outside the allowlist: it counts every connection and request
    that reaches it, and answers each with `body`."""

    def __init__(self, body: bytes = _OUTSIDE, host: str = "127.0.0.1") -> None:
        self.body = body
        self.host = host
        self.requests: list[str] = []
        self.connections = 0
        self.port = 0

    @contextmanager
    def serving(self) -> Iterator[Counter]:
        counter = self

        class Handler(BaseHTTPRequestHandler):
            def setup(self) -> None:
                counter.connections += 1
                super().setup()

            def do_GET(self) -> None:
                counter.requests.append(self.path)
                self.send_response(200)
                self.send_header("content-type", "text/html")
                self.send_header("content-length", str(len(counter.body)))
                self.end_headers()
                self.wfile.write(counter.body)

            do_POST = do_GET

            def log_message(self, *args: object) -> None:
                pass

        with _serving(Handler, self.host) as server:
            self.port = server.server_address[1]
            yield self


class Listener:
    """A UDP socket on `host` that counts the datagrams it receives."""

    def __init__(self, host: str) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        self.sock.bind((host, 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.packets = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._count, daemon=True)
        self._thread.start()

    def _count(self) -> None:
        while not self._stop.is_set():
            try:
                self.sock.recvfrom(65536)
            except OSError:
                continue
            self.packets += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@contextmanager
def listeners(*hosts: str) -> Iterator[list[Listener]]:
    """One `Listener` on each of `hosts`, closed on leaving."""
    opened: list[Listener] = []
    try:
        for host in hosts:
            opened.append(Listener(host))
        yield opened
    finally:
        for listener in opened:
            listener.close()


_WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Pages:
    """An allowed site the test fills in: pages by path (with extra headers by path), redirects by
    path (``path -> Location``), and a WebSocket at ``/socket`` that says ``hello`` and closes."""

    def __init__(self) -> None:
        self.pages: dict[str, str] = {"/": "<title>Start</title><p>start</p>"}
        self.headers: dict[str, dict[str, str]] = {}
        self.redirects: dict[str, str] = {}
        self.sockets = 0
        self.port = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @contextmanager
    def serving(self) -> Iterator[Pages]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/socket" and self.headers.get("upgrade", "").lower() == "websocket":
                    return self._socket()
                location = site.redirects.get(self.path)
                if location is not None:
                    self.send_response(302)
                    self.send_header("location", location)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                body = site.pages.get(self.path, "<title>Missing</title>").encode()
                self.send_response(200 if self.path in site.pages else 404)
                kind = "text/javascript" if self.path.endswith(".js") else "text/html"
                self.send_header("content-type", kind)
                for name, value in site.headers.get(self.path, {}).items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _socket(self) -> None:
                site.sockets += 1
                self.protocol_version = "HTTP/1.1"  # a 101 answer in HTTP/1.0 is no handshake
                key = self.headers.get("sec-websocket-key", "") + _WEBSOCKET_GUID
                self.send_response(101)
                self.send_header("upgrade", "websocket")
                self.send_header("connection", "Upgrade")
                accept = base64.b64encode(hashlib.sha1(key.encode()).digest()).decode()
                self.send_header("sec-websocket-accept", accept)
                self.end_headers()
                self.wfile.write(b"\x81\x05hello\x88\x02\x03\xe8")  # a text frame, then close (1000)
                self.wfile.flush()
                self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        with _serving(Handler) as server:
            self.port = server.server_address[1]
            yield self


def _page(title: str, body: str) -> bytes:
    return f"<!doctype html><html><head><title>{title}</title></head><body>{body}</body></html>".encode()


class Site:
    """The test pages, on 127.0.0.1; `url(path)` is where one is."""

    def __init__(self, blocked_port: int) -> None:
        self.blocked = f"http://{BLOCKED_HOST}:{blocked_port}"
        self.port = 0
        self.requests: list[str] = []

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def pages(self) -> dict[str, bytes]:
        long_body = "".join(f"<p>Paragraph {n} of the long page.</p>" for n in range(200))
        return {
            "/": _page(
                "Index",
                '<h1>Index</h1><a href="/form">The form</a> <a href="/long">A long page</a> '
                '<a href="/tabs">Tabs</a>',
            ),
            "/form": _page(
                "Form",
                '<h1>Order</h1><form action="/result" method="get">'
                '<label>Name <input name="name"></label>'
                '<label>Colour <select name="colour"><option value="r">Red</option>'
                '<option value="g">Green</option><option value="b">Blue</option></select></label>'
                '<button type="submit">Send</button></form>',
            ),
            "/long": _page("Long", f"<h1>Top of the long page</h1>{long_body}<h2>Bottom marker</h2>"),
            "/tabs": _page("Tabs", '<a href="/form" target="_blank">Form in a new tab</a>'),
            "/keys": _page(
                "Keys",
                "<p>Press Enter to go on</p><script>document.addEventListener('keydown', e => "
                "{ if (e.key === 'Enter') location.href = '/arrived'; });</script>",
            ),
            "/arrived": _page("Arrived", "<h1>You arrived</h1>"),
            "/huge": _page(  # about 7 MB, 200,000 paragraphs
                "Huge",
                "<h1>Top of the huge page</h1>"
                + "".join(f"<p>Line {n} of the huge page.</p>" for n in range(200_000)),
            ),
            "/outside": _page(
                "Outside things",
                f'<h1>Loads from outside</h1><img src="{self.blocked}/pixel.png" alt="pixel">'
                f'<link rel="stylesheet" href="{self.blocked}/style.css">'
                f"<script>fetch('{self.blocked}/api').catch(() => {{}});"
                f"new Image().src = '{self.blocked}/beacon';"
                f"new WebSocket('{self.blocked.replace('http:', 'ws:')}/socket');</script>",
            ),
        }

    @contextmanager
    def serving(self) -> Iterator[Site]:
        site = self
        pages = self.pages()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = urlsplit(self.path).path
                site.requests.append(self.path)
                if path == "/redirect-out":
                    return self._redirect(f"{site.blocked}/landing")
                if path == "/redirect-in":
                    return self._redirect("/form")
                if path == "/result":
                    query = parse_qs(urlsplit(self.path).query)
                    name = html.escape(query.get("name", [""])[0])
                    colour = {"r": "Red", "g": "Green", "b": "Blue"}.get(query.get("colour", [""])[0], "?")
                    body = _page(
                        "Result", f"<h1>Thank you</h1><p id=out>Hello {name}, you chose {colour}</p>"
                    )
                    return self._send(200, body)
                body = pages.get(path)
                return self._send(200, body) if body is not None else self._send(404, _page("Missing", ""))

            def _redirect(self, location: str) -> None:
                self.send_response(302)
                self.send_header("location", location)
                self.send_header("content-length", "0")
                self.end_headers()

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        with _serving(Handler) as server:
            self.port = server.server_address[1]
            yield self
