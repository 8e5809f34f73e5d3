"""One connection to one MCP server: the only module that imports the MCP SDK.

The SDK's `Client` runs in ``mode="auto"``: it asks ``server/discover`` and speaks the
stateless 2026-07-28 revision to a server that answers, and falls back to the 2025
``initialize`` handshake for the others.

Why the connection lives in a task of its own: the SDK's transports are anyio task groups and
cancel scopes, which must be left by the task that entered them. Entered in a run's task,
cancelling the run (or a streamable-HTTP server dropping, which cancels the entering task)
would tear them down from the wrong task ("cancel scope in a different task") or cancel the
run itself. So a connection task enters the `Client`, lists the tools, and waits to be
closed; calls are made from any task and only wait on the answer. The connection is opened
once, kept across runs, and closed by `aclose()`, which the connection task does itself (a
stdio server's process is stopped and reaped there). A call races the server's answer against
its `timeout` and against the connection's end, so a server that dies mid-call is an answer,
never a hang, and one failing call leaves its siblings alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from dataclasses import dataclass
from typing import Any

from ..errors import MCPServerError, MCPTimeoutError, MissingExtraError
from ..log import event
from ..toolbox.tool import ToolResult
from .results import to_tool_result
from .settings import MCPServerSettings

__all__ = ["MCPConnection", "ServerTool"]

_INSTALL = "the MCP client needs the MCP SDK 2.x: pip install 'mcp>=2.3,<3'"


@dataclass(frozen=True, slots=True)
class ServerTool:
    """A tool as the server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None


class MCPConnection:
    """A connection to the server `server_id`, described by `settings`. `open()` connects."""

    def __init__(self, server_id: str, settings: MCPServerSettings) -> None:
        self.server_id = server_id
        self.settings = settings
        self.tools: tuple[ServerTool, ...] = ()
        """The server's tools, as listed when the connection opened."""
        self.protocol_version: str | None = None
        """The revision spoken: ``2026-07-28``, or the handshake's (``2025-11-25``, ...)."""
        self.instructions: str | None = None
        self.gone: str | None = None
        """Why the server stopped answering (None while it does): set once, logged once."""
        self._client: Any = None
        self._task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()

    async def connect(self) -> None:
        """Start the connection task and wait until the tools are listed (at most `connect_timeout`)."""
        if self._task is not None:
            return
        try:
            import mcp  # noqa: F401  (checked here, so a missing SDK is one clear line)
        except ImportError:
            raise MissingExtraError(_INSTALL) from None
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._hold(ready), name=f"mcp-{self.server_id}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.settings.connect_timeout)
        except TimeoutError:
            await self._stop()
            raise MCPTimeoutError(
                f"MCP server {self.server_id!r} did not answer within {self.settings.connect_timeout:g} s "
                f"({self._target()}): check that it starts, or raise its `connect_timeout`"
            ) from None
        except BaseException:
            await self._stop()
            raise

    async def _hold(self, ready: asyncio.Future[None]) -> None:
        """The connection task: enter the client, list the tools, wait to be closed."""
        from mcp.client import Client

        try:
            async with contextlib.AsyncExitStack() as stack:
                client = Client(
                    await self._transport(stack), mode="auto", read_timeout_seconds=self.settings.timeout
                )
                await stack.enter_async_context(client)
                self.tools = await _list_tools(client)
                self.protocol_version = client.protocol_version
                self.instructions = client.instructions
                self._client = client
                ready.set_result(None)
                await self._closing.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(
                    MCPServerError(
                        f"cannot connect to MCP server {self.server_id!r} ({self._target()}): "
                        f"{_describe(exc)}; check its command or URL"
                    )
                )
            else:
                self._lost(_describe(exc))
        finally:
            self._client = None
            if not ready.done():
                ready.cancel()

    async def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        settings = self.settings
        if settings.type == "stdio":
            from mcp import StdioServerParameters
            from mcp.client.stdio import stdio_client

            assert settings.command is not None  # checked by the settings
            params = StdioServerParameters(
                command=settings.command, args=list(settings.args), env=dict(settings.env)
            )
            return stdio_client(params, errlog=_errlog())
        assert settings.url is not None
        if settings.type == "sse":
            from mcp.client.sse import sse_client

            return sse_client(settings.url, headers=dict(settings.headers) or None, timeout=settings.timeout)
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        http = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=dict(settings.headers), timeout=httpx2.Timeout(settings.timeout, read=300.0)
            )
        )
        return streamable_http_client(settings.url, http_client=http)

    async def call(
        self, name: str, arguments: dict[str, Any], *, meta: dict[str, Any] | None = None
    ) -> ToolResult:
        """Call the server's tool `name`: its result, or an error result saying what went wrong
        (a timeout, a refusal, a server gone). Never raises but for cancellation. `meta` goes in
        the request's ``_meta`` (the run's trace context, `agentfsm.toolbox.call_context`)."""
        client = self._client
        if self.gone is not None or client is None:
            why = self.gone or "the connection is closed"
            return ToolResult(error=f"MCP server {self.server_id!r} is not available ({why})")
        timeout = self.settings.timeout
        request = client.call_tool(name, arguments, read_timeout_seconds=timeout, meta=meta)
        call = asyncio.ensure_future(request)
        held = self._task
        assert held is not None
        try:
            await asyncio.wait({call, held}, timeout=timeout + 1.0, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not call.done():
                call.cancel()
                await asyncio.wait({call})
        if not call.cancelled() and call.exception() is None:
            return to_tool_result(call.result())
        if held.done() or self.gone is not None:
            return self._gone_result(name)
        problem = None if call.cancelled() else call.exception()
        if problem is None or "timed out" in str(problem):
            return ToolResult(
                error=f"MCP server {self.server_id!r} did not answer `{name}` within {timeout:g} s "
                "(the server's `timeout`); the call may still finish there"
            )
        if _is_disconnect(problem):
            self._lost(_describe(problem))
            return self._gone_result(name)
        return ToolResult(error=f"MCP server {self.server_id!r} refused `{name}`: {_describe(problem)}")

    def _gone_result(self, name: str) -> ToolResult:
        why = self.gone or "the connection was closed"
        return ToolResult(
            error=f"MCP server {self.server_id!r} stopped while `{name}` ran ({why}); "
            "its tools are withdrawn: go on without them"
        )

    def _lost(self, why: str) -> None:
        """The server is gone: say so once, and let the connection task clean up."""
        if self.gone is not None:
            return
        self.gone = why or "the connection ended"
        event(
            "mcp_server_gone",
            level=logging.WARNING,
            server=self.server_id,
            message=f"MCP server {self.server_id!r} stopped answering ({self.gone}); its tools are withdrawn",
        )
        self._closing.set()

    async def aclose(self) -> None:
        """Close the connection (a stdio server's process is stopped); safe to call twice."""
        await self._stop()

    async def _stop(self) -> None:
        self._closing.set()
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait({task})
        self._client = None

    def _target(self) -> str:
        settings = self.settings
        if settings.type == "stdio":
            return " ".join([settings.command or "", *settings.args])
        return f"{settings.type} {settings.url}"


async def _list_tools(client: Any) -> tuple[ServerTool, ...]:
    """Every page of the server's tool list."""
    tools: list[ServerTool] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        for tool in page.tools:
            schema = dict(tool.input_schema or {})
            schema.setdefault("type", "object")
            tools.append(ServerTool(tool.name, tool.description or "", schema, tool.output_schema))
        cursor = page.next_cursor
        if not cursor:
            return tuple(tools)


def _errlog() -> Any:
    """Where a stdio server's stderr goes: this process's stderr as it is now. (The SDK's
    default is the `sys.stderr` of when it was imported, which may have been closed since.)"""
    try:
        sys.stderr.fileno()
    except (AttributeError, ValueError, OSError):  # replaced by something without a descriptor
        return sys.__stderr__
    return sys.stderr


def _is_disconnect(exc: BaseException) -> bool:
    """Whether `exc` says the connection itself ended (not a refusal of one call, nor a result
    that does not parse): the SDK's "Connection closed" (a stdio server's process ended) or
    "SSE stream ended" (an HTTP server went away mid-answer), or the transport's own error."""
    import anyio
    import httpx2

    text = str(exc)
    if "Connection closed" in text or "stream ended" in text:
        return True
    transport = (OSError, httpx2.TransportError, anyio.ClosedResourceError, anyio.BrokenResourceError)
    return isinstance(exc, (*transport, anyio.EndOfStream))


def _describe(exc: BaseException) -> str:
    """One line for `exc`, looking inside the exception groups anyio raises."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text
