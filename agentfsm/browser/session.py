"""One agent's browser: Playwright driving the system's Chromium, started on first use, closed by rule.

This is the one module that talks to Playwright. A `BrowserSession` starts
its browser (a Playwright driver and a persistent Chromium context whose
profile, home, caches and temporary files all live in one work directory of
its own) on the first action, keeps it between runs, and closes it on
`close()`, removing that directory. A browser that dies under an action (it
crashed, or was killed) is discarded there and then, and the action fails
with a `BrowserError`; the next action starts a new one.

What the page may reach is held at two layers of the network. Every request
the page makes goes through `BrowserContext.route` (navigations,
subresources, fetches; WebSockets through `route_web_socket`): one to a host
outside `allowed_hosts` is aborted before it is sent, and an allowed request
is fetched without following redirects, so a redirect to a host outside the
list is refused too. Playwright does not route the later hops of a redirect
it follows, so Chromium also resolves only the allowed names (its
``--host-resolver-rules``): any other name or address, whatever asks for it,
does not resolve. Every answer the route hands Chromium carries a policy
(`content_policy`) whose ``connect-src`` lists the allowed hosts, so Chromium
itself refuses the connections no route sees: a worker's WebSockets and
WebTransport sessions. The launch flags add what keeps Chromium from sending
anything the page did not ask for (no background networking, updates,
safe-browsing, translation, sign-in, QUIC or pings).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import html
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urljoin, urlsplit

from ..errors import BrowserError, MissingExtraError
from ..log import event
from ..sandbox.base import finish_despite_cancellation
from .policy import content_policy, with_policy
from .settings import BrowserSettings, host_of, redirect_target
from .state import PageState, Tab, find_lines, refs_in

if TYPE_CHECKING:
    from playwright.async_api import (
        APIResponse,
        BrowserContext,
        ConsoleMessage,
        Locator,
        Page,
        Playwright,
        Request,
        Route,
        WebSocketRoute,
    )

__all__ = ["WORKDIR_PREFIX", "BrowserSession", "launch_args"]

WORKDIR_PREFIX = "agentfsm-browser-"
"""The prefix of each browser's work directory (in the system's temporary directory)."""

_T = TypeVar("_T")

# Playwright 1.65's own `--disable-features` list (chromiumSwitches.ts): Chromium reads only the
# last `--disable-features`, so ours repeats it before adding the services it would still contact.
_PLAYWRIGHT_DISABLED_FEATURES = (
    "AvoidUnnecessaryBeforeUnloadCheckSync",
    "DestroyProfileOnBrowserClose",
    "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable",
    "LensOverlay",
    "MediaRouter",
    "PaintHolding",
    "ThirdPartyStoragePartitioning",
    "AvoidCorsURLLoaderRestartOnRedirect",
    "OptimizationHints",
    "NetworkTimeServiceQuerying",
    "AimEnabled",
    "PreconnectToSearch",
)
_DISABLED_FEATURES = (
    *_PLAYWRIGHT_DISABLED_FEATURES,
    "Translate",
    "AutofillServerCommunication",
    "CertificateTransparencyComponentUpdater",
)
_PREFERENCES = {"net": {"network_prediction_options": 2}}
"""The profile's preferences: network prediction off (2 is Chromium's "never")."""
_MAX_REDIRECTS = 20
"""Redirect hops one request may take (Chromium's own limit)."""
_BLOCKED_KEPT = 50
"""Refused requests remembered until the next state reads them."""
_STATE_ATTEMPTS = 4
"""Reads of a page that is navigating meanwhile (a key press that loads another page) before giving up."""
_POLICY_REFUSAL = re.compile(r"^Connecting to '([^']+)' violates the following Content Security Policy")
"""Chromium's console line for a connection `content_policy` refused (the address in quotes)."""


def launch_args(settings: BrowserSettings, workdir: Path, resolve: Mapping[str, str]) -> list[str]:
    """Chromium's flags: nothing sent but what pages ask for, and only the allowed names resolved."""
    rules = [f"MAP {name} {address}" for name, address in resolve.items()]
    if not settings.any_host:
        rules.append("MAP * ~NOTFOUND")
        rules += [f"EXCLUDE {f'[{h}]' if ':' in h else h}" for h in settings.allowed_hosts]
    features: tuple[str, ...] = _DISABLED_FEATURES
    if not settings.any_host:
        # Chromium takes a page the route answered for one on a public address, so its checks
        # would refuse every WebSocket to an allowed loopback or private host. With a list, the
        # route and the page's policy decide what a socket may reach; with "*", the checks stay.
        features = (*features, "LocalNetworkAccessChecksWebSockets")
    args = [
        "--disable-gpu",
        "--disable-quic",
        "--no-pings",
        "--disable-domain-reliability",
        "--disable-client-side-phishing-detection",
        f"--optimization-guide-manifest-override={workdir / 'empty'}",
        "--gaia-url=http://127.0.0.1:9",
        f"--disable-features={','.join(features)}",
        # WebRTC's STUN/TURN/ICE packets leave from the network service straight to any address a
        # page names (no route sees them, and an address needs no resolving): with no proxy, this
        # policy gives WebRTC no UDP at all and no address of its own to offer.
        "--webrtc-ip-handling-policy=disable_non_proxied_udp",
        # A shared worker is a target of its own that Playwright does not route (as a service
        # worker is): its fetches would leave unchecked. No page gets one.
        "--disable-blink-features=SharedWorker",
    ]
    if rules:
        args.append(f"--host-resolver-rules={', '.join(rules)}")
    return args


class BrowserSession:
    """The browser of one agent, made on demand from `settings`.

    `resolve` maps host names to addresses whatever DNS says (``{"app.test": "127.0.0.1"}``), for a
    development server with a name of its own; the allowlist still decides what may be reached.
    """

    def __init__(
        self, settings: BrowserSettings | None = None, *, resolve: Mapping[str, str] | None = None
    ) -> None:
        self.settings = settings or BrowserSettings()
        self.resolve = dict(resolve or {})
        self._playwright: Playwright | None = None
        self._context: BrowserContext | None = None
        self._workdir: Path | None = None
        self._artifacts: Path | None = None
        """Playwright's own folder for this browser (in the system's temp folder, not the work
        directory): its driver removes it when the browser closes, but not always when the
        browser was killed and the driver is stopped soon after, so the teardown removes it too."""
        self._tabs: list[Page] = []
        self._current: Page | None = None
        self._lost = False
        self._closing = False
        self._blocked: list[str] = []
        self._refused_navigation: str | None = None
        self._landed: dict[str, str] = {}
        self._cut: dict[str, str] = {}
        """Addresses of top-level documents cut at `max_page_bytes`: the note the state shows."""
        """Top-level navigations the guard followed through redirects: where each ended."""
        self._refs: dict[int, frozenset[str]] = {}
        """Per page (by id): the refs of its latest snapshot, which the actions accept."""
        self._lock = asyncio.Lock()
        self._busy = asyncio.Lock()

    @property
    def active(self) -> bool:
        """Whether a browser is running now."""
        return self._context is not None

    @property
    def workdir(self) -> Path | None:
        """The running browser's work directory (profile, home, temporary files), removed on close."""
        return self._workdir

    # -- lifetime -------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the browser unless it runs (the actions call this; exactly one start however many ask)."""
        if self._context is not None:
            return
        async with self._lock:
            if self._context is None:
                starting = asyncio.ensure_future(self._start())
                try:
                    await asyncio.shield(starting)
                except BaseException:
                    # Cancelled or failed half-way: whatever started is stopped before this returns.
                    await finish_despite_cancellation(asyncio.ensure_future(self._stop_started(starting)))
                    raise

    async def _stop_started(self, starting: asyncio.Future[None]) -> None:
        with contextlib.suppress(BaseException):
            await starting
        await self._teardown()

    async def _start(self) -> None:
        settings = self.settings
        if not os.access(settings.executable_path, os.X_OK):
            raise BrowserError(
                f"no Chromium at {settings.executable_path!r}: install it (apt-get install chromium) "
                "or set [browser] executable_path"
            )
        try:
            from playwright.async_api import async_playwright
        except ImportError:
            raise MissingExtraError(
                "the browser tool needs Playwright: pip install 'agentfsm[browser]'"
            ) from None
        self._lost = self._closing = False
        self._workdir = workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
        for sub in ("home", "tmp", "cache", "config", "data", "empty", "profile/Default"):
            (workdir / sub).mkdir(parents=True)
        # No preconnects, prefetches or DNS pre-resolution of hosts a page merely names: only a
        # request the route let through opens a connection.
        (workdir / "profile" / "Default" / "Preferences").write_text(json.dumps(_PREFERENCES))
        self._playwright = playwright = await async_playwright().start()
        before = _artifact_folders()
        context = await playwright.chromium.launch_persistent_context(
            str(workdir / "profile"),
            executable_path=settings.executable_path,
            headless=settings.headless,
            args=launch_args(settings, workdir, self.resolve),
            env=self._environment(workdir),
            viewport={"width": settings.viewport_width, "height": settings.viewport_height},
            service_workers="block",  # a service worker's requests would bypass the route
            accept_downloads=False,
            timeout=settings.navigation_timeout * 1000,
        )
        self._context = context
        # The launch made one; with two, another browser launched meanwhile and neither is known ours.
        made = _artifact_folders() - before
        self._artifacts = made.pop() if len(made) == 1 else None
        context.set_default_timeout(settings.action_timeout * 1000)
        context.set_default_navigation_timeout(settings.navigation_timeout * 1000)
        context.on("close", self._on_context_closed)
        context.on("page", self._on_page)
        context.on("console", self._on_console)
        await context.route("**/*", self._guard)  # every host: a document is cut at max_page_bytes
        if not settings.any_host or self.resolve:
            await context.route_web_socket("**/*", self._guard_socket)
        for page in context.pages:
            self._on_page(page)
        event(
            "browser_started", level=logging.DEBUG, workdir=str(workdir), hosts=list(settings.allowed_hosts)
        )

    def _environment(self, workdir: Path) -> dict[str, str | float | bool]:
        """The browser's whole environment: its own home and temporary files, nothing of this
        process's but where programs and the display are (no keys reach it)."""
        env: dict[str, str | float | bool] = {
            "HOME": str(workdir / "home"),
            "TMPDIR": str(workdir / "tmp"),
            "XDG_CACHE_HOME": str(workdir / "cache"),
            "XDG_CONFIG_HOME": str(workdir / "config"),
            "XDG_DATA_HOME": str(workdir / "data"),
            "AGENTFSM_BROWSER_DIR": str(workdir),
        }
        for name in ("PATH", "LANG", "LC_ALL", "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY"):
            if name in os.environ:
                env[name] = os.environ[name]
        return env

    async def close(self) -> None:
        """Close the browser and remove its work directory, if it runs (idempotent).

        It runs to its end even when the caller is cancelled meanwhile (the cancellation is
        delivered afterwards): a browser forgotten half closed would leave its processes and
        its profile behind.
        """
        async with self._lock:
            if self._context is None and self._playwright is None and self._workdir is None:
                return
            await finish_despite_cancellation(asyncio.ensure_future(self._teardown()))

    async def _teardown(self) -> None:
        context, playwright, workdir = self._context, self._playwright, self._workdir
        artifacts, self._artifacts = self._artifacts, None
        self._context = self._playwright = self._workdir = self._current = None
        self._closing = True
        self._tabs, self._refs, self._blocked, self._landed, self._cut = [], {}, [], {}, {}
        try:
            if context is not None:
                with contextlib.suppress(Exception):
                    await context.close()
            if playwright is not None:
                with contextlib.suppress(Exception):
                    await playwright.stop()
        finally:
            for folder in (workdir, artifacts):
                if folder is not None:
                    shutil.rmtree(folder, ignore_errors=True)
        event("browser_closed", level=logging.DEBUG, workdir=str(workdir))

    async def __aenter__(self) -> BrowserSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _on_context_closed(self, _context: object) -> None:
        if not self._closing:
            self._lost = True

    def _on_console(self, message: ConsoleMessage) -> None:
        """Note a connection the page's policy refused (Chromium says so on the console only, and
        the route never sees it) among the refused requests, when the allowlist refused it."""
        found = _POLICY_REFUSAL.match(message.text)
        if found is not None and not self.settings.allows(found.group(1)):
            self._blocked = [*self._blocked[-(_BLOCKED_KEPT - 1) :], found.group(1)]

    def _on_page(self, page: Page) -> None:
        """A new tab (a link opening one, `window.open`, `open_tab`) becomes the current tab."""
        if page in self._tabs:
            return
        self._tabs.append(page)
        self._current = page
        page.on("close", self._on_page_closed)

    def _on_page_closed(self, page: Page) -> None:
        if page in self._tabs:
            self._tabs.remove(page)
        self._refs.pop(id(page), None)
        if self._current is page:
            self._current = self._tabs[-1] if self._tabs else None

    # -- the network guard ------------------------------------------------------------------

    async def _guard(self, route: Route) -> None:
        """Refuse a request to a host outside the list, and an allowed one that redirects to one.

        Playwright does not route the hops of a redirect Chromium follows, so Chromium is never
        given one to follow: the guard fetches each hop itself (at most `_MAX_REDIRECTS`), checks
        where its Location leads as Chromium would read it (`redirect_target`) before asking for
        it, and hands Chromium the last answer only. A refused hop is never requested.
        """
        request = route.request
        url = request.url
        if not self.settings.allows(url):
            await self._refuse(route, url)
            return
        document = request.is_navigation_request()
        if self.settings.any_host and not document:
            await route.continue_()
            return
        hop, method, body = url, request.method, request.post_data_buffer
        headers = dict(request.headers)
        try:
            for _ in range(_MAX_REDIRECTS + 1):
                response = await self._fetch(route, hop, method, headers, body)
                location = response.headers.get("location")
                if not (300 <= response.status < 400 and location):
                    break
                target = redirect_target(hop, location)
                if target is None or not self.settings.allows(target):
                    await response.dispose()
                    await self._refuse(route, target or urljoin(hop, location))
                    return
                if response.status == 303 or (response.status in (301, 302) and method == "POST"):
                    method, body = "GET", None
                    headers = {k: v for k, v in headers.items() if not k.lower().startswith("content-")}
                await response.dispose()
                hop = target
            else:
                await response.dispose()
                raise BrowserError(f"{url!r} redirects more than {_MAX_REDIRECTS} times")
        except Exception:  # refused, reset, unresolvable, the browser closing: a failed request
            with contextlib.suppress(Exception):
                await route.abort("failed")
            return
        with contextlib.suppress(Exception):  # the page went away meanwhile
            top = document and _top_level(request)
            body = await response.body() if document else None
            limit = self.settings.max_page_bytes
            policy = content_policy(self.settings, document=document)
            if hop == url and (body is None or len(body) <= limit):
                own = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
                await route.fulfill(response=response, headers=with_policy(own, policy))
                return
            # Its cookies are in the context already (the fetch kept them for their own address).
            kept = {
                k: v for k, v in response.headers.items() if k.lower() not in ("set-cookie", "content-length")
            }
            kept = with_policy(kept, policy)
            if body is None:
                body = await response.body()
            elif len(body) > limit:
                if top:
                    note = (
                        f"Page cut: the browser was given the first {limit} of its {len(body)} bytes "
                        "([browser] max_page_bytes); what lies past them is not on the page"
                    )
                    kept_notes = list(self._cut.items())[-(_BLOCKED_KEPT - 2) :]
                    self._cut = {**dict(kept_notes), url: note, hop: note}
                body = body[:limit]
            await route.fulfill(status=response.status, headers=kept, body=body)
            if top and hop != url:
                self._landed[url] = hop

    async def _fetch(
        self, route: Route, url: str, method: str, headers: dict[str, str], body: bytes | None
    ) -> APIResponse:
        """One hop, not followed, fetched on Playwright's side of the browser.

        That side resolves names with the system's resolver, not Chromium's rules, so a host
        that `resolve` maps is fetched at its address, with its name in the Host header and
        its own cookies (the ones the context keeps for the address would be the wrong ones).
        """
        parts = urlsplit(url)
        address = self.resolve.get((parts.hostname or "").lower())
        if address is not None:
            mapped = f"[{address}]" if ":" in address else address
            netloc = f"{mapped}:{parts.port}" if parts.port is not None else mapped
            headers = {k: v for k, v in headers.items() if k.lower() not in ("host", "cookie")}
            headers["host"] = parts.netloc.rpartition("@")[2]
            assert self._context is not None
            cookies = await self._context.cookies(url)
            headers["cookie"] = "; ".join(f"{c['name']}={c['value']}" for c in cookies)
            url = parts._replace(netloc=netloc).geturl()
        return await route.fetch(
            url=url,
            method=method,
            headers=headers,
            post_data=body,
            max_redirects=0,
            timeout=self.settings.navigation_timeout * 1000,
        )

    async def _refuse(self, route: Route, url: str) -> None:
        """Abort the request; a navigation instead gets a page saying why (an aborted one would
        load Chromium's error page a moment later, cutting short the navigation after it)."""
        self._blocked = [*self._blocked[-(_BLOCKED_KEPT - 1) :], url]
        event("browser_request_refused", level=logging.INFO, url=url, host=host_of(url))
        with contextlib.suppress(Exception):  # the page went away meanwhile
            request = route.request
            if request.is_navigation_request():
                if request.frame.parent_frame is None:
                    self._refused_navigation = url
                text = html.escape(self._refusal(url))
                body = f"<!doctype html><title>Refused</title><p>{text}</p>"
                await route.fulfill(status=403, content_type="text/html", body=body)
            else:
                await route.abort("blockedbyclient")

    async def _guard_socket(self, socket: WebSocketRoute) -> None:
        if self.settings.allows(socket.url):
            socket.connect_to_server()
        else:
            self._blocked = [*self._blocked[-(_BLOCKED_KEPT - 1) :], socket.url]
            await socket.close()

    # -- the page -------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _page(self) -> AsyncIterator[Page]:
        """The current tab (a new blank one if none is open), for one action at a time.

        A browser lost meanwhile (crashed, killed) is discarded here, and the action's error
        becomes a `BrowserError` saying so: the next action starts a new browser.
        """
        await self.start()
        async with self._busy:
            try:
                page = self._current
                if page is None or page.is_closed():
                    assert self._context is not None
                    page = await self._context.new_page()
                    self._on_page(page)
                yield page
            except BrowserError:
                raise
            except Exception as exc:
                if self._lost or not await self._alive():
                    await self.close()
                    raise BrowserError(
                        "the browser closed unexpectedly (it crashed or was killed); it was discarded, "
                        "and the next browser_use call starts a new one"
                    ) from exc
                raise BrowserError(_first_line(exc)) from exc

    async def _alive(self) -> bool:
        """Whether the browser still answers (an action failed: was it the browser that went away?)."""
        context = self._context
        if context is None:
            return False
        try:
            await asyncio.wait_for(context.cookies(), timeout=self.settings.action_timeout)
        except Exception:
            return False
        return not self._lost

    async def run(self, action: Callable[[Page], Awaitable[_T]], *, settle: bool = True) -> _T:
        """`action(page)` on the current tab, then (with `settle`) wait for any load it started."""
        async with self._page() as page:
            self._refused_navigation = None
            try:
                result = await action(page)
            finally:
                if settle:
                    await self._settle(self._current or page)
            refused, self._refused_navigation = self._refused_navigation, None
            if refused is not None and settle:  # an action's navigation; a read only reports it
                raise BrowserError(self._refusal(refused))
            return result

    async def _settle(self, page: Page) -> None:
        """Wait, within `settle_timeout`, for the load an action started (a link, a submit, a key)."""
        if page.is_closed():
            return
        with contextlib.suppress(Exception):  # still loading, or gone: read as it is
            await page.wait_for_load_state("load", timeout=self.settings.settle_timeout * 1000)
        await self._show_landed(page)

    async def _show_landed(self, page: Page) -> None:
        """Give a page the guard reached through redirects the address it ended at.

        Chromium got the last hop's answer for the address it asked for, so that is the page's
        address until it is replaced; the history API can replace it within the origin only, so a
        redirect to another origin leaves the page at the address it was asked for.
        """
        landed, self._landed = self._landed, {}
        final = landed.get(page.url)
        if final is None or page.is_closed():
            return
        with contextlib.suppress(Exception):  # another origin, or the page went away meanwhile
            await page.evaluate("(url) => history.replaceState(history.state, '', url)", final)

    async def snapshot(self, page: Page) -> str:
        """The page's AI-mode snapshot (the only mode: a plain one would make its refs stop resolving)."""
        for attempt in range(_STATE_ATTEMPTS):
            try:
                text = await page.aria_snapshot(mode="ai")
                break
            except Exception as exc:
                if attempt == _STATE_ATTEMPTS - 1 or not _navigating(exc):
                    raise
                await self._settle(page)
        self._refs[id(page)] = refs_in(text)
        return text

    async def state(self, *, screenshot: bool = True) -> PageState:
        """The current tab's state: address, title, tabs, snapshot, scroll position, screenshot."""

        async def read(page: Page) -> PageState:
            snapshot = await self.snapshot(page)
            for attempt in range(_STATE_ATTEMPTS):
                try:
                    above, height, total = await page.evaluate(
                        "() => [Math.round(window.scrollY), window.innerHeight,"
                        " document.documentElement.scrollHeight]"
                    )
                    title = await page.title()
                    break
                except Exception as exc:
                    if attempt == _STATE_ATTEMPTS - 1 or not _navigating(exc):
                        raise
                    await self._settle(page)
                    snapshot = await self.snapshot(page)
            image = None
            if screenshot:
                image = await self.screenshot(page)
            blocked, self._blocked = tuple(self._blocked), []
            return PageState(
                url=page.url,
                title=title,
                tabs=tuple(await self.tabs()),
                current_tab=self._tabs.index(page) if page in self._tabs else 0,
                snapshot=snapshot,
                pixels_above=max(0, int(above)),
                pixels_below=max(0, int(total) - int(above) - int(height)),
                screenshot=image,
                blocked=blocked,
                refs=self._refs[id(page)],
                cut=self._cut.get(page.url),
            )

        return await self.run(read, settle=False)

    async def screenshot(self, page: Page) -> str:
        """The viewport as a base64 JPEG (taken again once loaded when a navigation got in the way:
        a key press can start one after it returns)."""
        for attempt in range(_STATE_ATTEMPTS):
            try:
                data = await page.screenshot(type="jpeg", quality=self.settings.screenshot_quality)
                break
            except Exception:
                if attempt == _STATE_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(0.05 * (attempt + 1))
                await self._settle(page)
        return base64.b64encode(data).decode("ascii")

    async def tabs(self) -> list[Tab]:
        out = []
        for number, page in enumerate(self._tabs):
            try:
                title = await page.title()
            except Exception:  # a tab still navigating has no title yet
                title = ""
            out.append(Tab(tab_id=number, url=page.url, title=title))
        return out

    # -- actions (each on the current tab, then waiting for the page to settle) ------------------

    async def goto(self, url: str) -> str:
        """Load `url` in the current tab; the address it ends at."""
        self.check_url(url)

        async def go(page: Page) -> None:
            await page.goto(url)

        await self.run(go)
        return self._current.url if self._current is not None else url

    def check_url(self, url: str) -> None:
        """A `BrowserError` unless `url` is an http(s) address on an allowed host."""
        if url.partition(":")[0].lower() not in ("http", "https") or not host_of(url):
            raise BrowserError(
                f"{url!r} is not an http(s) address: give the whole URL, e.g. 'https://{url}/'"
            )
        if not self.settings.allows(url):
            raise BrowserError(self._refusal(url))

    def _refusal(self, url: str) -> str:
        hosts = ", ".join(self.settings.allowed_hosts)
        return (
            f"refused {url!r}: its host {host_of(url)!r} is not in [browser] allowed_hosts ({hosts}); "
            "add it there to allow it"
        )

    async def click(self, ref: str) -> None:
        async def do(page: Page) -> None:
            await (await self._element(page, ref)).click()

        await self.run(do)

    async def fill(self, ref: str, text: str) -> None:
        async def do(page: Page) -> None:
            await (await self._element(page, ref)).fill(text)

        await self.run(do)

    async def scroll(self, pixels: int) -> int:
        """Scroll by `pixels` (negative: up); how far down the page is now."""

        async def do(page: Page) -> int:
            done = await page.evaluate(
                "(by) => { window.scrollBy(0, by); return Math.round(window.scrollY); }", pixels
            )
            return int(done)

        return await self.run(do)

    async def scroll_to_text(self, text: str) -> None:
        async def do(page: Page) -> None:
            found = page.get_by_text(text)
            if await found.count() == 0:
                raise BrowserError(f"no text {text!r} on this page: check the page state, or use `find`")
            await found.first.scroll_into_view_if_needed()

        await self.run(do)

    async def press(self, keys: str) -> None:
        """Press `keys` (``Enter``, ``Control+a``, ``ArrowDown``) where the focus is."""

        async def do(page: Page) -> None:
            await page.keyboard.press(keys)

        await self.run(do)

    async def dropdown_options(self, ref: str) -> list[tuple[int, str, str, bool]]:
        """A ``<select>``'s options: index, text, value, selected."""

        async def do(page: Page) -> list[tuple[int, str, str, bool]]:
            return await self._options(await self._element(page, ref), ref)

        return await self.run(do, settle=False)

    async def select_option(self, ref: str, text: str) -> str:
        """Choose the option of ``<select>`` `ref` whose text (else value) is `text`; its text."""

        async def do(page: Page) -> str:
            element = await self._element(page, ref)
            options = await self._options(element, ref)
            match = next((o for o in options if o[1].strip() == text.strip()), None)
            match = match or next((o for o in options if o[2] == text), None)
            if match is None:
                shown = ", ".join(repr(o[1]) for o in options)
                raise BrowserError(f"dropdown {ref!r} has no option {text!r}; its options are {shown}")
            await element.select_option(index=match[0])
            return match[1]

        return await self.run(do)

    async def _options(self, element: Locator, ref: str) -> list[tuple[int, str, str, bool]]:
        found = await element.evaluate(
            "el => el.options ? Array.from(el.options)"
            ".map(o => [o.index, o.text, o.value, o.selected]) : null"
        )
        if found is None:
            raise BrowserError(
                f"element {ref!r} is not a dropdown (a <select>); the page state shows its role"
            )
        return [(int(i), str(t), str(v), bool(s)) for i, t, v, s in found]

    async def go_back(self) -> str:
        """Back in the current tab's history; the address it is at now."""

        async def do(page: Page) -> str:
            before = page.url
            await page.go_back()
            if page.url == before:
                raise BrowserError("there is no earlier page in this tab's history")
            return page.url

        return await self.run(do)

    async def find(self, text: str) -> list[str]:
        """The lines of the current page's snapshot that contain `text` (a state read: refs stay valid)."""
        return await self.run(lambda page: self._find(page, text), settle=False)

    async def _find(self, page: Page, text: str) -> list[str]:
        return find_lines(await self.snapshot(page), text)

    async def text(self) -> str:
        """The current page's visible text."""

        async def do(page: Page) -> str:
            text = await page.inner_text("body")
            cut = self._cut.get(page.url)
            return f"{text}\n... [{cut}]" if cut else text

        return await self.run(do, settle=False)

    async def _element(self, page: Page, ref: str) -> Locator:
        """The element `ref` of the page's latest snapshot (one is taken when `ref` is not in it)."""
        ref = ref.strip().removeprefix("[").removesuffix("]").removeprefix("ref=")
        if ref not in self._refs.get(id(page), frozenset()):
            await self.snapshot(page)
            if ref not in self._refs[id(page)]:
                raise BrowserError(
                    f"no element {ref!r} on this page: use a ref of the last page state "
                    "([ref=e5] gives 'e5'), or `find` the element by its text"
                )
        return page.get_by_ref(ref)

    # -- tabs -----------------------------------------------------------------------------

    async def open_tab(self, url: str) -> None:
        """A new tab, made current, loading `url`."""
        await self.start()
        async with self._busy:
            assert self._context is not None
            page = await self._context.new_page()
            self._on_page(page)
        await self.run(lambda p: p.goto(url))

    async def switch_tab(self, tab_id: int) -> Tab:
        async with self._page():
            page = self._tab(tab_id)
            self._current = page
            await page.bring_to_front()
            return Tab(tab_id=tab_id, url=page.url, title=await page.title())

    async def close_tab(self, tab_id: int) -> None:
        async with self._page():
            await self._tab(tab_id).close()

    def _tab(self, tab_id: int) -> Page:
        if not 0 <= tab_id < len(self._tabs):
            raise BrowserError(
                f"no tab {tab_id}: the tabs are 0 to {len(self._tabs) - 1}; the page state lists them"
            )
        return self._tabs[tab_id]


def _top_level(request: Request) -> bool:
    """Whether `request` loads a tab's own document (a popup's first one has no frame to ask yet)."""
    try:
        return request.frame.parent_frame is None
    except Exception:  # Playwright: "Frame for this navigation request is not available"
        return True


def _navigating(exc: Exception) -> bool:
    """Whether `exc` says the page navigated away while it was read (read again once it loads)."""
    text = str(exc)
    return "Execution context was destroyed" in text or "navigation" in text.lower()


def _first_line(exc: Exception) -> str:
    """Playwright's message without its call log (the lines after the first)."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _artifact_folders() -> set[Path]:
    """The folders Playwright's drivers made for their browsers (``playwright-artifacts-*``)."""
    return set(Path(tempfile.gettempdir()).glob("playwright-artifacts-*"))
