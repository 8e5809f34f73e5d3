"""A run, step by step: `iter()` yields each transition; `on_event` hears every event of `run()`."""

import asyncio

from agentfsm import Terminate, ToolCallAgent, tool
from agentfsm.run.events import AgentEvent, ToolCallCompleted, Transition
from agentfsm.testing import ScriptedLLM, reply


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def script() -> ScriptedLLM:
    return ScriptedLLM(
        [
            reply(tool_calls=[("add", {"a": 2, "b": 3})]),
            reply("5", tool_calls=[("terminate", {"status": "success"})]),
        ]
    )


def on_event(event: AgentEvent) -> None:
    if isinstance(event, ToolCallCompleted):
        print("tool", event.observation.call.name, "->", repr(event.observation.content))
    elif isinstance(event, Transition) and event.dest in ("FINISHED", "ERROR"):
        print("ended by", event.trigger, "with", event.stop_reason)


async def main() -> None:
    agent = ToolCallAgent(llm=script(), tools=[add, Terminate()])
    async for t in agent.iter("what is 2 + 3?"):  # the run advances when you ask for the next edge
        print(f"{t.source} -> {t.dest} [{t.trigger}] step {t.step}", {g.name: g.held for g in t.guards})

    agent.llm = script()
    agent.on_event(on_event)  # the same stream the trace writer and the checkpointer listen to
    result = await agent.run("what is 2 + 3?")
    print(result.stop_reason, result.output)


asyncio.run(main())
