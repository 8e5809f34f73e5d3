"""A checkpointed run paused for approval, then resumed by a new agent (as after a restart)."""

import asyncio

from agentfsm import Terminate, ToolCallAgent, tool
from agentfsm.testing import ScriptedLLM, reply


@tool(needs_approval=True)
def send(to: str) -> str:
    """Send the report."""
    return f"sent to {to}"


def build(llm: ScriptedLLM) -> ToolCallAgent:
    """The same agent each time: the checkpoint holds the run, not the code."""
    return ToolCallAgent(llm=llm, tools=[send, Terminate()])


async def main() -> None:
    first = build(ScriptedLLM([reply(tool_calls=[("send", {"to": "ops"})])]))
    paused = await first.run("send the report", checkpoint="run.checkpoint.jsonl")
    print("first process:", paused.stop_reason, "at step", first.run_state.step)
    first.suspend()  # let go of the paused run, as a process that stopped at the pause would

    # A new process: the agent is built again, and the run goes on from its checkpoint.
    second = build(ScriptedLLM([reply("Sent.", tool_calls=[("terminate", {"status": "success"})])]))
    again = await second.resume("run.checkpoint.jsonl")  # stops at the same pause
    print("resumed at the pause:", again.stop_reason, [call.name for call in again.pending_approval])
    second.approve(again.pending_approval[0].id)
    done = await second.resume()
    print("second process:", done.stop_reason, "-", done.output)


asyncio.run(main())
