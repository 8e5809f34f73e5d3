"""An MCP server whose tool list changes while it runs, built with the SDK's server API.

Run as ``python tests/mcp_lists_server.py REVISION TRANSPORT [PORT]``, with REVISION and TRANSPORT
as for `mcp_test_server.py` (whose legacy wrappers it reuses). Its tools: `echo`; `grow` adds a tool
(answering ``{name}: {text}``), `shrink` removes one, `redescribe` gives one a new description. Each
announces the change unless told ``notify=false``: the legacy ``notifications/tools/list_changed``
on a 2025 connection, a ``subscriptions/listen`` event on 2026-07-28. ``MCP_LISTS_TTL_MS``
sets the ``ttlMs`` of its ``tools/list`` results on 2026-07-28 (default 0: immediately stale).
"""

from __future__ import annotations

import os
import sys

import anyio
from mcp.server.caching import CacheHint
from mcp.server.mcpserver import Context, MCPServer
from mcp_test_server import serve


def build(revision: str) -> MCPServer:
    ttl = int(os.environ.get("MCP_LISTS_TTL_MS", "0"))
    server = MCPServer(
        "agentfsm-lists",
        instructions="Tools come and go on this server.",
        log_level="WARNING",
        cache_hints={"tools/list": CacheHint(ttl_ms=ttl)},
    )

    def added(name: str, description: str) -> None:
        def tool(text: str) -> str:
            return f"{name}: {text}"

        server.add_tool(tool, name=name, description=description)

    async def announce(ctx: Context, notify: bool) -> None:
        if not notify:
            return
        if revision == "legacy":
            await ctx.request_context.session.send_tool_list_changed()
        else:
            await ctx.notify_tools_changed()
        await anyio.sleep(0.2)  # the announcement (on the listen stream: another stream) lands first

    @server.tool()
    def echo(text: str) -> str:
        """Return the text."""
        return f"echo: {text}"

    @server.tool()
    async def grow(name: str, ctx: Context, notify: bool = True) -> str:
        """Add a tool `name` that answers with its argument."""
        added(name, f"The grown tool {name}.")
        await announce(ctx, notify)
        return f"added {name}"

    @server.tool()
    async def shrink(name: str, ctx: Context, notify: bool = True) -> str:
        """Remove the tool `name`."""
        server.remove_tool(name)
        await announce(ctx, notify)
        return f"removed {name}"

    @server.tool()
    async def redescribe(name: str, description: str, ctx: Context, notify: bool = True) -> str:
        """Give the tool `name` another description."""
        server.remove_tool(name)
        added(name, description)
        await announce(ctx, notify)
        return f"redescribed {name}"

    return server


def main() -> None:
    revision, transport = sys.argv[1], sys.argv[2]
    serve(build(revision), revision, transport, sys.argv[3] if len(sys.argv) > 3 else None)


if __name__ == "__main__":
    main()
