"""A tool of your own, a scripted model (no key, no network), and each edge as the run takes it."""

import asyncio

from agentfsm import Terminate, ToolCallAgent, tool
from agentfsm.testing import ScriptedLLM, reply


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


replies = [  # what the model answers, in order: call add, then end the run
    reply(tool_calls=[("add", {"a": 2, "b": 3})]),
    reply(tool_calls=[("terminate", {"status": "success"})]),
]
agent = ToolCallAgent(llm=ScriptedLLM(replies), tools=[add, Terminate()])
agent.on_transition(lambda t: print(t.source, "->", t.dest, [g.name for g in t.guards if g.held]))
result = asyncio.run(agent.run("What is 2 + 3?"))
print(result.state, result.stop_reason, result.usage.tool_calls, "tool calls")
