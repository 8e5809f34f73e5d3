"""Stepping with breakpoints: the run pauses in OBSERVING, before the results reach memory."""

import asyncio

from agentfsm import Terminate, ToolCallAgent, tool
from agentfsm.agent.stepping import Breakpoint, Stepper
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
    stepper = Stepper(agent, "what is 2 + 3?", breakpoints=[Breakpoint(state="OBSERVING")])
    while await stepper.resume():  # paused in OBSERVING, results not yet in memory
        print(agent.phase, [o.content.splitlines()[-1] for o in agent.run_state.turn.observations])
    assert stepper.result is not None
    print(stepper.result.stop_reason, stepper.result.output)


asyncio.run(main())
