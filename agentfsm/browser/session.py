"""One agent's browser: Playwright driving the system's Chromium, started on first use, closed by rule.

This is the one module that talks to Playwright. A `BrowserSession` starts
its browser (a Playwright driver and a persistent Chromium context whose
profile, home, caches and temporary files all live in one work directory of
its own) on the first action, keeps it between runs, and closes it on
`close()`, removing that directory. A browser that dies under an action (it
crashed, or was killed) is discarded there and then, and the action fails
with a `BrowserError`; the next action starts a new one.

What the page may reach is held at two layers of the network. Every request
the page makes goes through the route guard (`agentfsm.browser.route`, given
to `BrowserContext.route` and `route_web_socket`): one to a host outside
`allowed_hosts` is aborted before it is sent, and an allowed request is
fetched without following redirects, so a redirect to a host outside the list
is refused too. Playwright does not route the later hops of a redirect
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
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import BrowserError, MissingExtraError
from ..log import event
from ..sandbox.base import finish_despite_cancellation
from .route import RouteGuard
from .settings import BrowserSettings, host_of
from .state import PageState, Tab, find_lines, refs_in

if TYPE_CHECKING:
    from playwright.async_api import (
        BrowserContext,
        ConsoleMessage,
        Locator,
        Page,
        Playwright,
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
        self.guard = RouteGuard(self.settings, self.resolve, self._cookies)
        """What the page may reach, decided for each of its requests (`agentfsm.browser.route`)."""
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
        await context.route("**/*", self.guard.request)  # every host: a document is cut at max_page_bytes
        if not settings.any_host or self.resolve:
            await context.route_web_socket("**/*", self.guard.socket)
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
        self._tabs, self._refs = [], {}
        self.guard.forget()
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
            self.guard.note_blocked(found.group(1))

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

    async def _cookies(self, url: str) -> list[Any]:
        """The cookies the browser keeps for `url` (what the guard sends to a mapped host)."""
        assert self._context is not None
        return list(await self._context.cookies(url))

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
            self.guard.refused_navigation = None
            try:
                result = await action(page)
            finally:
                if settle:
                    await self._settle(self._current or page)
            refused, self.guard.refused_navigation = self.guard.refused_navigation, None
            if refused is not None and settle:  # an action's navigation; a read only reports it
                raise BrowserError(self.guard.refusal(refused))
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
        landed, self.guard.landed = self.guard.landed, {}
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
            blocked, self.guard.blocked = tuple(self.guard.blocked), []
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
                cut=self.guard.cut.get(page.url),
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
            raise BrowserError(self.guard.refusal(url))

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
            cut = self.guard.cut.get(page.url)
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
