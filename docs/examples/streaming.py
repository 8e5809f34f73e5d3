"""A run as a stream: every event as it happens, the model's words piece by piece, the result last."""

import asyncio

from agentfsm import RunResult, Terminate, TextDelta, ToolCallAgent, ToolCallDelta, Transition, tool
from agentfsm.run.events import ToolCallCompleted
from agentfsm.testing import ScriptedLLM, reply


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def build() -> ToolCallAgent:
    # stream=True: the test model hands each reply on in pieces, as a streaming provider does.
    llm = ScriptedLLM(
        [
            reply("Adding them.", tool_calls=[("add", {"a": 2, "b": 3})]),
            reply("2 + 3 is 5."),  # text and no call: the final answer
        ],
        stream=True,
    )
    return ToolCallAgent(llm=llm, tools=[add, Terminate()])


async def main() -> None:
    async for event in build().run_stream("what is 2 + 3?"):
        if isinstance(event, TextDelta):
            print(f"  text {event.text!r}")
        elif isinstance(event, ToolCallDelta):
            print(f"  call #{event.index} id={event.call_id} name={event.name} arguments={event.arguments!r}")
        elif isinstance(event, ToolCallCompleted):
            print(f"  tool {event.observation.call.name} done")
        elif isinstance(event, Transition):
            print(f"{event.source} -> {event.dest} [{event.trigger}]")
        elif isinstance(event, RunResult):
            print("result:", event.stop_reason, repr(event.output))

    # Only the words of the turn that ends the run, held until the machine has decided it is the last.
    words = [
        e.text
        async for e in build().run_stream("what is 2 + 3?", final_only=True)
        if isinstance(e, TextDelta)
    ]
    print("final only:", words)


asyncio.run(main())
