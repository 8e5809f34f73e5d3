"""An MCP server for the MCP client's tests, built with the SDK's own server API.

Run as ``python tests/mcp_test_server.py REVISION TRANSPORT [PORT]``: REVISION is ``modern``
(answers `server/discover`, so the client speaks 2026-07-28) or ``legacy`` (advertises only
the handshake-era revisions on `server/discover`, so the client falls back to `initialize`);
TRANSPORT is ``stdio``, ``http`` (streamable HTTP on 127.0.0.1:PORT, path ``/mcp``) or ``sse``
(the legacy HTTP+SSE transport, path ``/sse``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from typing import Any

import anyio
import mcp_types as types
import uvicorn
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server
from pydantic import BaseModel

PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
"""A 1x1 PNG."""


class Weather(BaseModel):
    city: str
    celsius: float


def build() -> MCPServer:
    server = MCPServer("agentfsm-test", instructions="A server for tests.", log_level="WARNING")

    @server.tool()
    def echo(text: str) -> str:
        """Return the text."""
        return f"echo: {text}"

    @server.tool()
    def picture() -> Image:
        """A one-pixel PNG."""
        return Image(data=PIXEL, format="png")

    @server.tool()
    def weather(city: str) -> Weather:
        """Structured weather."""
        return Weather(city=city, celsius=21.5)

    @server.tool()
    def fail(reason: str) -> str:
        """Always fails."""
        raise ToolError(f"failed on purpose: {reason}")

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep, then answer."""
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool()
    def meta(ctx: Context) -> str:
        """The request's `_meta`, as JSON."""
        return json.dumps(dict(ctx.request_context.meta or {}), sort_keys=True)

    @server.tool()
    def pid() -> str:
        """The server's process id."""
        return str(os.getpid())

    @server.tool()
    def terminate(status: str) -> str:
        """A server tool that happens to be named like the agent's own."""
        return f"server terminate {status}"

    @server.tool()
    def resources() -> types.CallToolResult:
        """An embedded resource and a resource link."""
        return types.CallToolResult(
            content=[
                types.EmbeddedResource(
                    type="resource",
                    resource=types.TextResourceContents(
                        uri="file:///notes.txt", mimeType="text/plain", text="the notes"
                    ),
                ),
                types.ResourceLink(
                    type="resource_link",
                    uri="file:///big.bin",
                    name="big.bin",
                    mimeType="application/octet-stream",
                ),
            ]
        )

    return server


async def _legacy_stdio(server: MCPServer) -> None:
    """The handshake-only loop: `server/discover` is an unknown method, as on a 2025 server."""
    lowlevel = server._lowlevel_server
    async with stdio_server() as (read, write), lowlevel.lifespan(lowlevel) as state:
        await serve_loop(
            lowlevel, read, write, lifespan_state=state, init_options=lowlevel.create_initialization_options()
        )


def _legacy_http(app: Any) -> Any:
    """Streamable HTTP that answers a 2026-07-28 request as a 2025 server does: unknown method."""

    async def legacy(scope: Any, receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or [])
        if scope["type"] == "http" and headers.get(b"mcp-method") == b"server/discover":
            body = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32601,"message":"Method not found"}}'
            await send(
                {
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return legacy


def serve(server: MCPServer, revision: str, transport: str, port: str | None) -> None:
    """Serve `server` as REVISION over TRANSPORT (the command line of every test server here)."""
    if transport == "stdio":
        anyio.run(
            _legacy_stdio if revision == "legacy" else server.run_stdio_async,
            *([server] if revision == "legacy" else []),
        )
        return
    if transport == "sse":
        app = server.sse_app(host="127.0.0.1")  # the legacy HTTP+SSE transport, on /sse
    else:
        app = server.streamable_http_app(host="127.0.0.1")
    if revision == "legacy":
        app = _legacy_http(app)
    assert port is not None, "an HTTP test server needs its PORT"
    uvicorn.run(app, host="127.0.0.1", port=int(port), log_level="warning")


def main() -> None:
    serve(build(), sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)


if __name__ == "__main__":
    main()
