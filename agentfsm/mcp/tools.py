"""Server tools as agent tools, and the set of servers an agent holds.

`MCPTool` is a `Tool` whose schema is the server's input schema and whose `execute` calls the
server. `MCPServers` connects a set of servers (concurrently; each once), names their tools
(`agentfsm.mcp.names`), keeps the connections across runs and closes them on `aclose()` or
at the end of ``async with``.

`attach`, called before each request, keeps an agent's `ToolCollection` true to the servers:
it re-reads the lists that are due (`MCPConnection.list_due`), adds the tools a server
gained, removes those it dropped, replaces those whose description or schema changed, and
withdraws the tools of servers that died; the `ToolChanges` it returns are what the model is
told (`agentfsm.mcp.prompt`). A tool keeps its agent name for as long as it stays, and gets the
same one back if it returns: a trace, a checkpoint and the model's history stay valid.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..log import event
from ..questions import Answer, InputRequired
from ..toolbox.call_context import current_call
from ..toolbox.tool import Tool, ToolCollection, ToolResult
from .client import MCPConnection, ServerTool
from .names import agent_tool_names
from .prompt import ToolChanges, with_servers
from .settings import MCPServerSettings

if TYPE_CHECKING:
    from typing import Self

__all__ = ["MCPServers", "MCPTool"]


class MCPTool(Tool):
    """One tool of an MCP server, under the agent's name for it."""

    def __init__(self, connection: MCPConnection, listed: ServerTool, *, name: str) -> None:
        self.connection = connection
        self.listed = listed
        """The tool as its server lists it."""
        self.remote_name = listed.name
        """The tool's name on its server."""
        self.output_schema = listed.output_schema
        description = (
            listed.description or f"The tool {listed.name!r} of the MCP server {connection.server_id!r}."
        )
        super().__init__(name=name, description=description, parameters=listed.input_schema)

    asks_for_input = True  # a server may elicit during a call (see `agentfsm.mcp.client`)
    tool_type = "extension"  # run by its server, not by the agent

    async def execute(self, **kwargs: Any) -> ToolResult:
        return await self.connection.call(self.remote_name, kwargs, meta=_meta())

    async def resume(self, asked: InputRequired, answers: Mapping[str, Answer], **kwargs: Any) -> ToolResult:
        return await self.connection.call(
            self.remote_name, kwargs, meta=_meta(), asked=asked, answers=answers
        )

    def abandon(self, asked: InputRequired) -> None:
        self.connection.abandon(asked)


def _meta() -> dict[str, str] | None:
    """The run's trace context for the server, in the request's `_meta` (None outside a run)."""
    context = current_call()
    return None if context is None else context.meta()


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
        """Every server's tools as last listed (those of servers gone included)."""
        self._connected = False
        self._names: dict[tuple[str, str], str] = {}
        """(server id, tool name) -> agent name: kept after a tool goes, so it comes back under it."""
        self._made: dict[str, tuple[tuple[ServerTool, ...], list[MCPTool]]] = {}
        """Per server: the listing its tools were made from, and those tools."""
        self._attached: weakref.WeakSet[ToolCollection] = weakref.WeakSet()
        """The collections `attach` filled once: what it adds to them later is news to the model."""

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
        self._make(reserved)
        self._connected = True
        return self.tools

    def _make(self, reserved: Iterable[str]) -> None:
        """`tools` from each server's current listing: a tool listed as before stays the same
        object; a new one is named around every name in use, in sorted order of servers."""
        taken = set(reserved) | set(self._names.values())
        tools: list[MCPTool] = []
        for server_id in sorted(self.connections):
            connection = self.connections[server_id]
            listing = connection.tools
            made = self._made.get(server_id)
            if made is not None and made[0] is listing:
                tools += made[1]
                continue
            new = [t.name for t in listing if (server_id, t.name) not in self._names]
            for remote, name in agent_tool_names(server_id, new, taken=taken).items():
                self._names[server_id, remote] = name
                taken.add(name)
            before = {t.remote_name: t for t in made[1]} if made is not None else {}
            mine: list[MCPTool] = []
            for listed in listing:
                item = before.get(listed.name)
                if item is None or item.listed != listed:
                    item = self._tool(connection, listed)
                mine.append(item)
            self._made[server_id] = (listing, mine)
            tools += mine
        self.tools = tools

    @property
    def connected(self) -> bool:
        """Whether `connect()` has run (and the servers' tools are made)."""
        return self._connected

    def _tool(self, connection: MCPConnection, listed: ServerTool) -> MCPTool:
        return MCPTool(connection, listed, name=self._names[connection.server_id, listed.name])

    async def attach(self, tools: ToolCollection, *, agent: str | None = None) -> ToolChanges:
        """Connect (once), read again the tool lists that are due, and make `tools` offer what
        the live servers list now: their new tools added, the tools they dropped removed, the
        changed ones replaced, those of servers that stopped answering withdrawn. What changed
        (nothing, the first time `tools` is filled).

        An agent calls this before each request: it is how the model is offered what can run.
        """
        first = not self._connected
        await self.connect(reserved=tools.names)
        if not first:
            due = [c for c in self.connections.values() if c.list_due() is not None]
            await asyncio.gather(*(c.relist() for c in due))
            self._make(tools.names)
        for connection in self.connections.values():
            connection.count_request()
        changes = self._sync(tools)
        if tools not in self._attached:
            self._attached.add(tools)
            return ToolChanges()
        if changes.withdrawn:
            event(
                "mcp_tools_withdrawn",
                level=logging.WARNING,
                agent=agent,
                tools=list(changes.withdrawn),
                message="withdrew the tools of MCP servers that stopped answering: "
                + ", ".join(changes.withdrawn),
            )
        if changes.added or changes.removed or changes.changed:
            event(
                "mcp_tools_changed",
                agent=agent,
                added=list(changes.added),
                removed=list(changes.removed),
                changed=list(changes.changed),
                message=changes.note(),
            )
        return changes

    def _sync(self, tools: ToolCollection) -> ToolChanges:
        """Make the MCP tools of `tools` those of `self.tools` whose server answers."""
        connections = set(self.connections.values())
        held = {t.name: t for t in tools if isinstance(t, MCPTool) and t.connection in connections}
        current = {t.name: t for t in self.tools}
        added: list[str] = []
        changed: list[str] = []
        for name, item in current.items():
            if item.connection.gone is not None:
                continue
            old = held.get(name)
            if old is None:
                if name not in tools:  # an own tool of the agent's by that name wins
                    tools.add(item)
                    added.append(name)
            elif old is not item:
                tools.replace(item)
                if old.listed != item.listed:
                    changed.append(name)
        removed: list[str] = []
        withdrawn: list[str] = []
        for name, old in held.items():
            now = current.get(name)
            if now is not None and now.connection.gone is None:
                continue
            tools.remove(name)
            (withdrawn if old.connection.gone is not None else removed).append(name)
        return ToolChanges(
            added=tuple(added), removed=tuple(removed), changed=tuple(changed), withdrawn=tuple(withdrawn)
        )

    def system_prompt(self, prompt: str | None, changes: ToolChanges | None = None) -> str | None:
        """`prompt` with the instructions of the live servers configured to give theirs
        (`MCPServerSettings.instructions`), and the note on `changes`: the system prompt of the
        request `changes` were found for."""
        given = [
            (server_id, c.instructions)
            for server_id, c in sorted(self.connections.items())
            if c.settings.instructions and c.instructions and c.gone is None
        ]
        return with_servers(prompt, given, changes)

    def recorded(self, config: dict[str, Any]) -> dict[str, Any]:
        """An agent's `trace_config()` with these servers' tools taken out of ``tools``: what a
        trace and a checkpoint record of the agent. The servers' ids (``mcp_servers``) are part
        of what the agent is, so a resume without them is refused; the tools they offer
        (``mcp_tools``) are what the servers offer now, which changes while a run waits, and are
        recorded, not checked. Each request's tools are in the trace whole, for replay."""
        served = set(self._names.values())  # every name a server tool was given
        own = [p for p in config.get("tools", ()) if p.get("function", {}).get("name") not in served]
        offered = sorted(p["function"]["name"] for p in config.get("tools", ()) if p not in own)
        return {**config, "tools": own, "mcp_servers": sorted(self.connections), "mcp_tools": offered}

    async def aclose(self) -> None:
        """Close every connection, for good (stdio servers' processes are stopped); their tools
        answer with an error from then on."""
        await asyncio.gather(*(c.aclose() for c in self.connections.values()))

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
