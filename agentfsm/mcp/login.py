"""`agentfsm mcp login SERVER`: authorize agentfsm at an MCP server behind OAuth, once.

The login connects to the server as a run would, but with a person at hand (`TerminalLogin`)
and without the stored tokens, so the server's 401 starts the SDK's authorization flow
(`agentfsm.mcp.oauth`). The authorization URL is printed (and opened in a browser only when
asked); the authorization server sends the browser back to ``http://127.0.0.1:PORT/callback``,
where a one-shot HTTP server bound to 127.0.0.1 takes the first request to that path and stops.
The SDK then exchanges the code (with its PKCE verifier) for tokens, which land in the server's
token file; the tools are listed, as the proof that the token works.

A server of the client-credentials grant has no login (no person signs in): the command says
so, and a run gets the token itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import webbrowser
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..errors import ConfigError, MCPLoginError, MCPServerError
from .auth_store import AuthFile
from .client import MCPConnection
from .settings import MCPServerSettings

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["LOGIN_TIMEOUT", "TerminalLogin", "login"]

LOGIN_TIMEOUT = 300.0
"""Seconds the login waits for the person to come back from the authorization server."""

_PAGE = (
    "<!doctype html><title>agentfsm</title><p>agentfsm is {what}. You can close this page "
    "and go back to the terminal.</p>"
)


class TerminalLogin:
    """The person at the terminal: the URL is printed to `out` (and opened when `open_browser`);
    the redirect is received on 127.0.0.1:`port`."""

    def __init__(
        self, port: int, *, out: TextIO, open_browser: bool = False, timeout: float = LOGIN_TIMEOUT
    ) -> None:
        self.port = port
        self.out = out
        self.open_browser = open_browser
        self.timeout = timeout
        """Seconds to wait for the redirect after the URL is shown."""
        self._query: asyncio.Future[dict[str, str]] | None = None
        self._runner: web.AppRunner | None = None
        self.shown = False
        """Whether the server wanted an authorization (the URL was shown)."""

    async def show(self, url: str) -> None:
        self.shown = True
        await self._listen()
        print(f"Open this URL to authorize agentfsm:\n{url}", file=self.out, flush=True)
        if self.open_browser:
            await asyncio.to_thread(webbrowser.open, url)

    async def redirected(self) -> Mapping[str, str]:
        assert self._query is not None  # `show` came first
        try:
            return await asyncio.wait_for(self._query, self.timeout)
        except TimeoutError:
            raise MCPLoginError(
                f"no redirect came back to 127.0.0.1:{self.port} within {self.timeout:g} s: open the "
                "printed URL in a browser on this machine, and run the login again"
            ) from None
        finally:
            await self.close()

    async def _listen(self) -> None:
        from aiohttp import web

        if self._runner is not None:
            await self.close()
        self._query = asyncio.get_running_loop().create_future()

        async def callback(request: web.Request) -> web.Response:
            query = dict(request.query)
            if self._query is not None and not self._query.done():
                self._query.set_result(query)
            what = "authorized" if "code" in query else "not authorized"
            return web.Response(text=_PAGE.format(what=what), content_type="text/html")

        app = web.Application()
        app.router.add_get("/callback", callback)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, "127.0.0.1", self.port).start()
        except OSError as exc:
            await runner.cleanup()
            raise MCPLoginError(
                f"cannot receive the login's redirect on 127.0.0.1:{self.port} ({exc.strerror or exc}): "
                "free the port, or set another `redirect_port` in the server's `auth`"
            ) from None
        self._runner = runner

    async def close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()


async def login(
    server_id: str,
    settings: MCPServerSettings,
    *,
    out: TextIO,
    open_browser: bool = False,
    timeout: float = LOGIN_TIMEOUT,
) -> Path:
    """Authorize agentfsm at the server `server_id` and store its tokens: the token file's path.
    Raises `MCPLoginError` (`MCPServerError` when the server cannot be reached)."""
    if settings.auth is None or settings.url is None:
        raise ConfigError(
            f'MCP server {server_id!r} has no `auth`: add auth = "oauth" to [mcp.servers.{server_id}]'
        )
    if settings.auth.grant == "client_credentials":
        raise MCPLoginError(
            f'MCP server {server_id!r} uses grant = "client_credentials": agentfsm gets its tokens '
            "with its own credentials, without a person, so there is no login; runs authorize themselves"
        )
    person = TerminalLogin(settings.auth.redirect_port, out=out, open_browser=open_browser, timeout=timeout)
    # the person's time, and then the server's own for the token and the tool list
    waits = dataclasses.replace(settings, connect_timeout=timeout + settings.connect_timeout)
    connection = MCPConnection(server_id, waits, login=person)
    try:
        await connection.connect()
    except MCPLoginError:
        raise
    except MCPServerError as exc:
        raise MCPLoginError(f"login to MCP server {server_id!r} failed: {exc}") from None
    finally:
        await connection.aclose()
        await person.close()
    file = AuthFile(server_id, settings.url)
    if not person.shown or file.tokens() is None:
        raise MCPLoginError(
            f"MCP server {server_id!r} let agentfsm in without a token: it needs no login, so "
            "remove its `auth`"
        )
    return file.path
