"""Server tools as agent tools, and the set of servers an agent holds.

`MCPTool` is a `Tool` whose schema is the server's input schema and whose `execute` calls the
server. `MCPServers` connects a set of servers (concurrently; each once), names their tools
(`agentfsm.mcp.names`), keeps the connections across runs and closes them on `aclose()` or
at the end of ``async with``. A server that died has its tools withdrawn from a
`ToolCollection` by `withdraw_gone`, so the next request offers the model only what can run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..log import event
from ..questions import Answer, InputRequired
from ..toolbox.tool import Tool, ToolCollection, ToolResult
from .client import MCPConnection, ServerTool
from .names import agent_tool_names
from .settings import MCPServerSettings

if TYPE_CHECKING:
    from typing import Self

__all__ = ["MCPServers", "MCPTool"]


class MCPTool(Tool):
    """One tool of an MCP server, under the agent's name for it."""

    def __init__(self, connection: MCPConnection, listed: ServerTool, *, name: str) -> None:
        self.connection = connection
        self.remote_name = listed.name
        """The tool's name on its server."""
        self.output_schema = listed.output_schema
        description = (
            listed.description or f"The tool {listed.name!r} of the MCP server {connection.server_id!r}."
        )
        super().__init__(name=name, description=description, parameters=listed.input_schema)

    asks_for_input = True  # a server may elicit during a call (see `agentfsm.mcp.client`)

    async def execute(self, **kwargs: Any) -> ToolResult:
        return await self.connection.call(self.remote_name, kwargs)

    async def resume(self, asked: InputRequired, answers: Mapping[str, Answer], **kwargs: Any) -> ToolResult:
        return await self.connection.call(self.remote_name, kwargs, asked=asked, answers=answers)

    def abandon(self, asked: InputRequired) -> None:
        self.connection.abandon(asked)


class MCPServers:
    """The MCP servers of one agent (or shared explicitly between agents), by id."""

    def __init__(self, servers: Mapping[str, MCPServerSettings | str]) -> None:
        """`servers`: an id per server, with its settings or a URL or command line
        (`MCPServerSettings.parse`). Nothing connects before `connect()`."""
        self.connections: dict[str, MCPConnection] = {}
        for server_id, settings in servers.items():
            if not isinstance(server_id, str) or not server_id:
                raise ConfigError(f"an MCP server needs a non-empty id, got {server_id!r}")
            record = MCPServerSettings.parse(settings) if isinstance(settings, str) else settings
            self.connections[server_id] = MCPConnection(server_id, record)
        self.tools: list[MCPTool] = []
        """Every server's tools, once connected (the ones withdrawn included)."""
        self._connected = False

    async def connect(self, *, reserved: Iterable[str] = ()) -> list[MCPTool]:
        """Connect every server (concurrently) and make their tools, named around `reserved`
        (the agent's own tool names). A server that fails to connect is an error naming it;
        the others are closed again then, so nothing is left running."""
        if self._connected:
            return self.tools
        pending = [c for c in self.connections.values() if c.protocol_version is None]
        outcomes = await asyncio.gather(*(c.connect() for c in pending), return_exceptions=True)
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        if failures:
            await self.aclose()
            raise failures[0]
        taken = set(reserved)
        tools: list[MCPTool] = []
        for server_id in sorted(self.connections):
            connection = self.connections[server_id]
            names = agent_tool_names(server_id, [t.name for t in connection.tools], taken=taken)
            taken.update(names.values())
            tools += [MCPTool(connection, listed, name=names[listed.name]) for listed in connection.tools]
        self.tools = tools
        self._connected = True
        return tools

    async def attach(self, tools: ToolCollection, *, agent: str | None = None) -> list[str]:
        """Connect (once) and add the live servers' tools that `tools` lacks, named around the
        names it has; then withdraw those of servers that stopped answering. The names withdrawn.

        An agent calls this before each request: it is how the model is offered what can run.
        """
        for item in await self.connect(reserved=tools.names):
            if item.connection.gone is None and item.name not in tools:
                tools.add(item)
        withdrawn = self.withdraw_gone(tools)
        if withdrawn:
            event(
                "mcp_tools_withdrawn",
                level=logging.WARNING,
                agent=agent,
                tools=withdrawn,
                message=f"withdrew the tools of MCP servers that stopped answering: {', '.join(withdrawn)}",
            )
        return withdrawn

    def withdraw_gone(self, tools: ToolCollection) -> list[str]:
        """Remove from `tools` the tools of servers that stopped answering; their names."""
        gone = [t.name for t in self.tools if t.connection.gone is not None and tools.get(t.name) is t]
        for name in gone:
            tools.remove(name)
        return gone

    async def aclose(self) -> None:
        """Close every connection, for good (stdio servers' processes are stopped); their tools
        answer with an error from then on."""
        await asyncio.gather(*(c.aclose() for c in self.connections.values()))

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
