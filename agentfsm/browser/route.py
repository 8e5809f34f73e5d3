"""The route guard: what the page of an agent's browser may reach, decided for each request.

Every request the page makes goes through it (`BrowserContext.route`: navigations,
subresources, fetches; WebSockets through `route_web_socket`): one to a host outside
`allowed_hosts` is aborted before it is sent, and an allowed request is fetched without
following redirects, each hop checked where Chromium would go, so a redirect to a host outside
the list is refused too. A mapped name (`resolve`) is fetched at its address, with its name
in the Host header. Every answer it hands Chromium carries the content policy
(`agentfsm.browser.policy`), and a top-level document past `max_page_bytes` is cut, with a
note the page state shows. What it refused, where redirects landed and what it cut are kept
for the page state to read (`agentfsm.browser.session` reads and clears them).

Playwright's objects come in as arguments (a `Route`, a `WebSocketRoute`, an `APIResponse`);
the session is the one module that imports Playwright.
"""

from __future__ import annotations

import contextlib
import html
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urljoin, urlsplit

from ..errors import BrowserError
from ..log import event
from .policy import content_policy, with_policy
from .settings import BrowserSettings, host_of, redirect_target

__all__ = ["KEPT", "MAX_REDIRECTS", "RouteGuard"]

MAX_REDIRECTS = 20
"""Redirect hops one request may take (Chromium's own limit)."""
KEPT = 50
"""Refused requests (and cut pages) remembered until the next state reads them."""


class RouteGuard:
    """The route of one browser's requests, by `settings` (the allowlist, the page cap) and
    `resolve` (names mapped to addresses); `cookies(url)` gives the browser's cookies for a URL."""

    def __init__(
        self,
        settings: BrowserSettings,
        resolve: Mapping[str, str],
        cookies: Callable[[str], Awaitable[list[Any]]],
    ) -> None:
        self.settings = settings
        self.resolve = resolve
        self._cookies = cookies
        self.blocked: list[str] = []
        """Addresses refused since the page state last read them."""
        self.refused_navigation: str | None = None
        """A tab's own navigation the guard refused, for the action that asked to say so."""
        self.landed: dict[str, str] = {}
        """Top-level navigations the guard followed through redirects: where each ended."""
        self.cut: dict[str, str] = {}
        """Addresses of top-level documents cut at `max_page_bytes`: the note the state shows."""

    def forget(self) -> None:
        """The browser closed: nothing it refused, followed or cut is kept."""
        self.blocked, self.landed, self.cut = [], {}, {}

    def note_blocked(self, url: str) -> None:
        """`url` was refused (by the route, or by the content policy inside Chromium)."""
        self.blocked = [*self.blocked[-(KEPT - 1) :], url]

    def refusal(self, url: str) -> str:
        """Why `url` is refused, and the fix."""
        hosts = ", ".join(self.settings.allowed_hosts)
        return (
            f"refused {url!r}: its host {host_of(url)!r} is not in [browser] allowed_hosts ({hosts}); "
            "add it there to allow it"
        )

    async def request(self, route: Any) -> None:
        """Refuse a request to a host outside the list, and an allowed one that redirects to one.

        Playwright does not route the hops of a redirect Chromium follows, so Chromium is never
        given one to follow: the guard fetches each hop itself (at most `MAX_REDIRECTS`), checks
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
            for _ in range(MAX_REDIRECTS + 1):
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
                raise BrowserError(f"{url!r} redirects more than {MAX_REDIRECTS} times")
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
                    kept_notes = list(self.cut.items())[-(KEPT - 2) :]
                    self.cut = {**dict(kept_notes), url: note, hop: note}
                body = body[:limit]
            await route.fulfill(status=response.status, headers=kept, body=body)
            if top and hop != url:
                self.landed[url] = hop

    async def _fetch(
        self, route: Any, url: str, method: str, headers: dict[str, str], body: bytes | None
    ) -> Any:
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
            cookies = await self._cookies(url)
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

    async def _refuse(self, route: Any, url: str) -> None:
        """Abort the request; a navigation instead gets a page saying why (an aborted one would
        load Chromium's error page a moment later, cutting short the navigation after it)."""
        self.note_blocked(url)
        event("browser_request_refused", level=logging.INFO, url=url, host=host_of(url))
        with contextlib.suppress(Exception):  # the page went away meanwhile
            request = route.request
            if request.is_navigation_request():
                if request.frame.parent_frame is None:
                    self.refused_navigation = url
                text = html.escape(self.refusal(url))
                body = f"<!doctype html><title>Refused</title><p>{text}</p>"
                await route.fulfill(status=403, content_type="text/html", body=body)
            else:
                await route.abort("blockedbyclient")

    async def socket(self, socket: Any) -> None:
        """A page's WebSocket (a Playwright `WebSocketRoute`): connected to an allowed host, else
        closed and noted among the refused."""
        if self.settings.allows(socket.url):
            socket.connect_to_server()
        else:
            self.note_blocked(socket.url)
            await socket.close()


def _top_level(request: Any) -> bool:
    """Whether `request` loads a tab's own document (a popup's first one has no frame to ask yet)."""
    try:
        return request.frame.parent_frame is None
    except Exception:  # Playwright: "Frame for this navigation request is not available"
        return True
