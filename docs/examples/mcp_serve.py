"""agentfsm as an MCP server: `AgentServer` offers the tool `run_agent`, and a call that needs a
person's approval is asked of the MCP client as an elicitation (here client and server share a
process; `agentfsm mcp-serve` serves the same over stdio or streamable HTTP)."""

import asyncio
from typing import Any

from mcp.client import Client
from mcp.types import ElicitResult, TextContent

from agentfsm import Terminate, ToolCallAgent, tool
from agentfsm.mcp.serve import AgentServer
from agentfsm.testing import ScriptedLLM, reply


@tool
def send(to: str) -> str:
    """Send the report."""
    return f"sent to {to}"


def build(agent: str, max_steps: int | None) -> ToolCallAgent:
    """A new agent for each call (`agentfsm mcp-serve` builds them from its flags and configuration)."""
    llm = ScriptedLLM(
        [
            reply(tool_calls=[("send", {"to": "ops"})]),
            reply("Sent.", tool_calls=[("terminate", {"status": "success"})]),
        ]
    )
    return ToolCallAgent(
        llm=llm, tools=[send, Terminate()], require_approval=["send"], max_steps=max_steps or 10
    )


async def approve(context: Any, params: Any) -> ElicitResult:
    """The client's answer to an approval: the form has `approve` (and an optional `reason`)."""
    print("the client is asked:", params.message.splitlines()[0])
    return ElicitResult(action="accept", content={"approve": True})


async def main() -> None:
    server = AgentServer(build, agents=["toolcall"], default_agent="toolcall")
    async with Client(server.server, elicitation_callback=approve) as client:  # in process
        (listed,) = (await client.list_tools()).tools
        print("tool:", listed.name, sorted(listed.input_schema["properties"]))
        result = await client.call_tool("run_agent", {"task": "send the report", "max_steps": 5})
        print("text:", *[part.text for part in result.content if isinstance(part, TextContent)])
        run = result.structured_content
        print("structured:", run["state"], run["stop_reason"], run["steps"], repr(run["output"]))
    await server.aclose()


asyncio.run(main())
