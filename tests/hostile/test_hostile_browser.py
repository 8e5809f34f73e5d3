"""A page on an allowed host that tries to reach addresses outside the list by ways other than a request.

Each test serves its hostile page on 127.0.0.1 (allowed) and puts a listener where the page aims:
UDP sockets on 127.0.0.2 and ::1 for WebRTC (any packet is a failure), and a server behind
`BLOCKED_HOST` for redirects. That name resolves to its server through the session's own
`resolve`, so Chromium's resolver would let the request through: only the route check stands
between the page and the secret the server holds, and the server must see no connection.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

import pytest
import pytest_asyncio
from browser_support import BLOCKED_HOST, _serving, require_chromium

from agentfsm.browser import BrowserSession, BrowserUseTool

pytestmark = [pytest.mark.http, pytest.mark.asyncio(loop_scope="module")]

SECRET = "the-secret-only-the-blocked-server-knows"
_LISTEN = 3.0
"""Seconds the UDP listeners wait for a packet after the page has loaded (ICE retries within 1 s)."""


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
def listeners() -> Iterator[tuple[Listener, Listener]]:
    v4, v6 = Listener("127.0.0.2"), Listener("::1")
    try:
        yield v4, v6
    finally:
        v4.close()
        v6.close()


class Secret:
    """The server behind `BLOCKED_HOST`: it answers every request with the secret, and counts."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[str] = []
        self.port = 0

    @contextmanager
    def serving(self) -> Iterator[Secret]:
        secret = self

        class Handler(BaseHTTPRequestHandler):
            def setup(self) -> None:
                secret.connections += 1
                super().setup()

            def do_GET(self) -> None:
                secret.requests.append(self.path)
                body = f"<title>Secret</title><p>{SECRET}</p>".encode()
                self.send_response(200)
                self.send_header("content-type", "text/html")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        with _serving(Handler) as server:
            self.port = server.server_address[1]
            yield self


class Hostile:
    """The allowed site: pages by path, and redirects by path (``path -> Location``)."""

    def __init__(self) -> None:
        self.pages: dict[str, str] = {"/": "<title>Start</title><p>start</p>"}
        self.redirects: dict[str, str] = {}
        self.port = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @contextmanager
    def serving(self) -> Iterator[Hostile]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                location = site.redirects.get(self.path)
                if location is not None:
                    self.send_response(302)
                    self.send_header("location", location)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                body = site.pages.get(self.path, "<title>Missing</title>").encode()
                self.send_response(200 if self.path in site.pages else 404)
                self.send_header("content-type", "text/html")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        with _serving(Handler) as server:
            self.port = server.server_address[1]
            yield self


@pytest.fixture(scope="module")
def secret() -> Iterator[Secret]:
    require_chromium()
    with Secret().serving() as served:
        yield served


@pytest.fixture(scope="module")
def site() -> Iterator[Hostile]:
    with Hostile().serving() as served:
        yield served


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session(secret: Secret, site: Hostile) -> AsyncIterator[BrowserSession]:
    async with BrowserSession(resolve={BLOCKED_HOST: "127.0.0.1"}) as opened:
        yield opened


@pytest.fixture
def tool(session: BrowserSession) -> BrowserUseTool:
    return BrowserUseTool(session)


@pytest.fixture(autouse=True)
def _the_secret_server_is_never_reached(secret: Secret) -> Iterator[None]:
    yield
    assert (secret.connections, secret.requests) == (0, [])


async def _packets_after(tool: BrowserUseTool, url: str, v4: Listener, v6: Listener) -> tuple[int, int]:
    result = await tool(action="go_to_url", url=url)
    assert result.error is None, result.error
    await asyncio.sleep(_LISTEN)
    return v4.packets, v6.packets


async def test_webrtc_ice_servers_on_loopback_get_no_packet(tool: BrowserUseTool, site: Hostile) -> None:
    with listeners() as (v4, v6):
        site.pages["/stun"] = (
            "<title>Call</title><script>"
            "const pc = new RTCPeerConnection({iceServers: ["
            f"{{urls: 'stun:127.0.0.2:{v4.port}'}},"
            f"{{urls: 'turn:[::1]:{v6.port}', username: 'u', credential: 'p'}}]}});"
            "pc.createDataChannel('d'); pc.createOffer().then(o => pc.setLocalDescription(o));"
            "</script>"
        )
        assert await _packets_after(tool, site.url("/stun"), v4, v6) == (0, 0)


async def test_webrtc_remote_candidates_on_loopback_get_no_connectivity_check(
    tool: BrowserUseTool, site: Hostile
) -> None:
    """No ICE server at all: the page hands its connection a made-up answer whose candidates are
    the loopback addresses, and ICE would send its connectivity checks there."""
    with listeners() as (v4, v6):
        site.pages["/candidates"] = (
            "<title>Peer</title><script>(async () => {"
            "const pc = new RTCPeerConnection(); pc.createDataChannel('d');"
            "const offer = await pc.createOffer(); await pc.setLocalDescription(offer);"
            "await pc.setRemoteDescription({type: 'answer',"
            " sdp: offer.sdp.replace('a=setup:actpass', 'a=setup:active')});"
            f"for (const [n, address, port] of [[1, '127.0.0.2', {v4.port}], [2, '::1', {v6.port}]])"
            "  await pc.addIceCandidate({sdpMid: '0', candidate:"
            "    `candidate:${n} 1 udp 2122260223 ${address} ${port} typ host`});"
            "})().catch(() => {});</script>"
        )
        assert await _packets_after(tool, site.url("/candidates"), v4, v6) == (0, 0)


def _blocked(secret: Secret, path: str = "/secret") -> str:
    return f"http://{BLOCKED_HOST}:{secret.port}{path}"


async def _refused_navigation(tool: BrowserUseTool, url: str) -> str:
    result = await tool(action="go_to_url", url=url)
    assert result.error is not None and "is not in [browser] allowed_hosts" in result.error, result
    assert SECRET not in (result.output or "") + result.error
    text = await tool.session.text()
    assert SECRET not in text
    assert SECRET not in await tool.state_prompt()
    return result.error


async def test_the_second_hop_of_a_redirect_is_checked(
    tool: BrowserUseTool, site: Hostile, secret: Secret
) -> None:
    site.redirects["/one"] = "/two"
    site.redirects["/two"] = _blocked(secret)
    error = await _refused_navigation(tool, site.url("/one"))
    assert f"refused '{_blocked(secret)}'" in error


async def test_a_location_chromium_reads_as_another_host_is_checked_as_that_host(
    tool: BrowserUseTool, site: Hostile, secret: Secret
) -> None:
    site.redirects["/backslash"] = f"/\\{BLOCKED_HOST}:{secret.port}/secret"
    error = await _refused_navigation(tool, site.url("/backslash"))
    assert f"refused '{_blocked(secret)}'" in error
    site.redirects["/slashes"] = f"///{BLOCKED_HOST}:{secret.port}/secret"  # also an authority to Chromium
    await _refused_navigation(tool, site.url("/slashes"))
    site.redirects["/tabbed"] = f" /\t/{BLOCKED_HOST}:{secret.port}/secret"  # Chromium drops spaces and tabs
    await _refused_navigation(tool, site.url("/tabbed"))


async def test_a_scripts_fetch_through_a_redirect_chain_is_checked_at_every_hop(
    tool: BrowserUseTool, site: Hostile, secret: Secret
) -> None:
    """Not a navigation: a fetch from the page, whose answer the page would read and show."""
    site.redirects["/api"] = "/api-2"
    site.redirects["/api-2"] = f"/\\{BLOCKED_HOST}:{secret.port}/secret"
    site.pages["/reader"] = (
        "<title>Reader</title><p id=out>waiting</p><script>fetch('/api').then(r => r.text())"
        ".then(t => { document.getElementById('out').textContent = 'got ' + t; })"
        ".catch(e => { document.getElementById('out').textContent = 'failed'; });</script>"
    )
    result = await tool(action="go_to_url", url=site.url("/reader"))
    assert result.error is None, result.error
    for _ in range(50):
        text = await tool.session.text()
        if "waiting" not in text:
            break
        await asyncio.sleep(0.1)
    assert text == "failed"


async def test_an_allowed_redirect_chain_is_followed_to_its_end(tool: BrowserUseTool, site: Hostile) -> None:
    site.pages["/end"] = "<title>End</title><p>the end of the chain</p>"
    site.redirects["/start-1"] = "/start-2"
    site.redirects["/start-2"] = "\\end"
    result = await tool(action="go_to_url", url=site.url("/start-1"))
    assert result.output == f"Navigated to {site.url('/end')}"
    assert await tool.session.text() == "the end of the chain"


async def test_a_shared_workers_requests_never_leave(
    tool: BrowserUseTool, site: Hostile, secret: Secret
) -> None:
    """A shared worker is not routed: Chromium gives pages none, so its fetch cannot be made."""
    script = f"fetch('{_blocked(secret)}').catch(() => {{}});"
    site.pages["/shared"] = (
        "<title>Shared</title><p id=out>none</p><script>try {"
        f"new SharedWorker(URL.createObjectURL(new Blob([{script!r}]))); out.textContent = 'started';"
        "} catch (e) { out.textContent = 'no shared worker'; }</script>"
    )
    await tool(action="go_to_url", url=site.url("/shared"))
    await asyncio.sleep(1.5)
    assert await tool.session.text() == "no shared worker"
