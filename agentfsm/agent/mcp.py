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
from typing import TYPE_CHECKING, Any, Self

from ..mcp.settings import MCPServerSettings
from ..mcp.tools import MCPServers
from ..toolbox.terminate import Terminate
from .awaiting_input import with_input
from .toolcall import ToolCallAgent, ToolCallOptions

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..memory import Memory
    from ..model.base import ChatModel, ToolChoice
    from ..questions import InputHandler
    from ..toolbox.tool import Tool
    from .approval import Approver

__all__ = ["SYSTEM_PROMPT", "MCPAgent"]

SYSTEM_PROMPT = (
    "You are an AI assistant with access to the tools of MCP servers (named mcp_<server>_<tool>). "
    "Use them to complete the task, and call `terminate` when it is done or cannot be done."
)


class MCPAgent(ToolCallAgent):
    """An agent whose tools are those of its MCP servers, plus `terminate` and `tools`."""

    table = with_input(ToolCallAgent.table)
    """With AWAITING_INPUT from the start: a server may ask for input, and a run paused there
    resumes from its checkpoint before the servers are connected again."""

    def __init__(
        self,
        *,
        llm: ChatModel,
        servers: MCPServers | Mapping[str, MCPServerSettings | str],
        tools: Iterable[Tool] = (),
        system_prompt: str | None = SYSTEM_PROMPT,
        next_step_prompt: str | None = ToolCallOptions.next_step_prompt,
        max_steps: int = ToolCallOptions.max_steps,
        tool_choice: ToolChoice = ToolCallOptions.tool_choice,
        max_observe: int | None = ToolCallOptions.max_observe,
        duplicate_threshold: int = ToolCallOptions.duplicate_threshold,
        stuck_limit: int | None = ToolCallOptions.stuck_limit,
        finish_on_answer: bool = ToolCallOptions.finish_on_answer,
        memory: Memory | None = None,
        special_tool_names: Iterable[str] = ToolCallOptions.special_tool_names,
        parallel_tool_calls: bool = ToolCallOptions.parallel_tool_calls,
        max_images: int | None = ToolCallOptions.max_images,
        require_approval: Iterable[str] = ToolCallOptions.require_approval,
        max_input_rounds: int = ToolCallOptions.max_input_rounds,
        output_type: type[BaseModel] | None = None,
        output_retries: int = ToolCallOptions.output_retries,
        approver: Approver | None = None,
        input_handler: InputHandler | None = None,
        name: str | None = "mcp",
    ) -> None:
        """The options are `ToolCallOptions`' (documented and checked there). `servers`: an
        `MCPServers` (shared: the caller closes it), or settings by server id (owned: the
        agent's `aclose()` closes them). `tools` join `terminate` as the agent's own tools.
        `output_type`: as `ToolCallAgent`'s (`final_result` joins them)."""
        options = ToolCallOptions(
            max_steps=max_steps,
            stuck_limit=stuck_limit,
            duplicate_threshold=duplicate_threshold,
            finish_on_answer=finish_on_answer,
            system_prompt=system_prompt,
            next_step_prompt=next_step_prompt,
            tool_choice=tool_choice,
            max_observe=max_observe,
            special_tool_names=frozenset(special_tool_names),
            parallel_tool_calls=parallel_tool_calls,
            max_images=max_images,
            require_approval=frozenset(require_approval),
            max_input_rounds=max_input_rounds,
            output_retries=output_retries,
        )
        self._owns_servers = not isinstance(servers, MCPServers)
        self.servers = servers if isinstance(servers, MCPServers) else MCPServers(servers)
        own = [Terminate(), *tools]
        self._init_tool_agent(
            options,
            llm=llm,
            tools=own,
            memory=memory,
            approver=approver,
            input_handler=input_handler,
            name=name,
            output_type=output_type,
        )

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
