"""`MCPAgent`: a tool-calling agent over the tools of MCP servers, plus its own `terminate`.

The servers' tools are named ``mcp_{server}_{tool}`` (`agentfsm.mcp.names`), around the
agent's own tool names, so a server tool called ``terminate`` becomes
``mcp_{server}_terminate`` and never stands in for the agent's: the run finishes through the
same guarded ``terminated`` edge as every agent's. (Upstream's MCP agent renamed the server
tools and then waited for a ``terminate`` that no longer existed.)

The servers connect on the first think (or `connect()`, or ``async with``), once; they stay
connected across runs and close on `aclose()`. Before each request the tools follow the servers
(`MCPServers.attach`): tools a server adds, drops or changes are added, removed or replaced,
those of a server that died are withdrawn, and the run goes on; the request that first offers
the new set says what changed, at the end of its system prompt, which also carries the
instructions of the servers configured to give theirs. This module does not import the MCP
SDK: `agentfsm.mcp.client` does, when a connection opens.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self

from ..mcp.settings import MCPServerSettings
from ..mcp.tools import MCPServers
from ..toolbox.terminate import Terminate
from .awaiting_input import with_input
from .toolcall import ToolCallAgent, ToolCallOptions

if TYPE_CHECKING:
    from ..model.base import ChatModel
    from ..toolbox.tool import Tool

__all__ = ["SYSTEM_PROMPT", "MCPAgent", "MCPOptions"]

SYSTEM_PROMPT = (
    "You are an AI assistant with access to the tools of MCP servers (named mcp_<server>_<tool>). "
    "Use them to complete the task, and call `terminate` when it is done or cannot be done."
)


@dataclass(frozen=True, kw_only=True)
class MCPOptions(ToolCallOptions):
    """`MCPAgent`'s options: `ToolCallOptions` (types, bounds and docs), with its own prompt."""

    system_prompt: str | None = SYSTEM_PROMPT


class MCPAgent(ToolCallAgent):
    """An agent whose tools are those of its MCP servers, plus `terminate` and `tools`."""

    options: MCPOptions
    options_class: ClassVar[type[MCPOptions]] = MCPOptions

    table = with_input(ToolCallAgent.table)
    """With AWAITING_INPUT from the start: a server may ask for input, and a run paused there
    resumes from its checkpoint before the servers are connected again."""

    def __init__(
        self,
        *,
        llm: ChatModel,
        servers: MCPServers | Mapping[str, MCPServerSettings | str],
        tools: Iterable[Tool] = (),
        name: str | None = "mcp",
        **kwargs: Any,
    ) -> None:
        """`ToolCallAgent`'s arguments (`kwargs`: the options, `MCPOptions`, and `memory`,
        `output_type`, `approver`, `input_handler`, `options`), and `servers`: an `MCPServers`
        (shared: the caller closes it), or settings by server id (owned: the agent's `aclose()`
        closes them). `tools` join `terminate` as the agent's own tools. `output_type`: as
        `ToolCallAgent`'s (`final_result` joins them)."""
        self._owns_servers = not isinstance(servers, MCPServers)
        self.servers = servers if isinstance(servers, MCPServers) else MCPServers(servers)
        super().__init__(llm=llm, tools=[Terminate(), *tools], name=name, **kwargs)

    @classmethod
    async def create(cls, **kwargs: Any) -> MCPAgent:
        """Build the agent and connect its servers (takes the constructor's arguments)."""
        agent = cls(**kwargs)
        await agent.connect()
        return agent

    async def connect(self) -> None:
        """Connect the servers and add their tools (once; the first think does it otherwise)."""
        await self.servers.attach(self.tools, agent=self.name)

    async def think(self) -> None:
        changes = await self.servers.attach(self.tools, agent=self.name)  # before each request: what can run
        self.system_prompt = self.servers.system_prompt(self.options.system_prompt, changes)
        await super().think()

    def trace_config(self) -> dict[str, Any]:
        return self.servers.recorded(super().trace_config())

    async def act(self) -> None:
        if not self.servers.connected:  # a run resumed in ACTING: its calls need the servers' tools
            await self.servers.attach(self.tools, agent=self.name)
        await super().act()

    async def aclose(self) -> None:
        """Close the servers the agent owns (a shared `MCPServers` is its owner's to close), and
        its model's connections."""
        try:
            if self._owns_servers:
                await self.servers.aclose()
        finally:
            await super().aclose()

    async def __aenter__(self) -> Self:
        await self.connect()
        return self
