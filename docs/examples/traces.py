"""A run traced as JSON Lines, read back, and replayed offline (no model, no tool runs)."""

import asyncio
from pathlib import Path

from agentfsm import Terminate, ToolCallAgent, tool
from agentfsm.agent.replay import replay
from agentfsm.recording.trace import read_trace
from agentfsm.testing import ScriptedLLM, reply


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def main() -> None:
    llm = ScriptedLLM(
        [
            reply(tool_calls=[("add", {"a": 2, "b": 3})]),
            reply("5", tool_calls=[("terminate", {"status": "success"})]),
        ]
    )
    agent = ToolCallAgent(llm=llm, tools=[add, Terminate()])
    result = await agent.run("what is 2 + 3?", trace="run.jsonl")
    print("ran:", result.stop_reason, result.output)

    header, records = read_trace(Path("run.jsonl"))
    print("header:", header["kind"], "schema", header["schema"], "request", repr(header["request"]))
    print("records:", " ".join(record["kind"] for record in records))

    replayed = await replay("run.jsonl")  # the recorded replies and results stand in
    assert replayed.result is not None  # None only when the trace was cut before its end
    print("replayed:", replayed.result.stop_reason, replayed.result.output)


asyncio.run(main())
