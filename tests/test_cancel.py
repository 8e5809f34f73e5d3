"""`cancel()`: one verb for a running and a paused run, returning the ended result, and ended for good.

A run ended by `cancel()` stays ended through every resume from its checkpoint; a run stopped by its
task's cancellation (Ctrl-C, a shutdown) goes on from where it was, as after a kill.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentfsm import AgentState, StopReason, Terminate, ToolCallAgent, tool
from agentfsm.errors import AgentBusyError
from agentfsm.testing import ScriptedLLM, reply

TERMINATE = reply(tool_calls=[("terminate", {"status": "success"})])


class Slow:
    """A tool that waits until released, and a record of the calls that ended."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.ended: list[str] = []

        @tool
        async def slow(name: str) -> str:
            """Wait a long time."""
            self.started.set()
            await asyncio.sleep(30)
            self.ended.append(name)
            return f"done {name}"

        @tool(needs_approval=True)
        def delete(path: str) -> str:
            """Delete a file (needs approval)."""
            self.ended.append(f"deleted {path}")
            return f"deleted {path}"

        self.tools = [slow, delete, Terminate()]


def agent_of(slow: Slow, *script: object) -> ToolCallAgent:
    return ToolCallAgent(llm=ScriptedLLM(list(script)), tools=slow.tools)  # type: ignore[arg-type]


async def test_cancelling_a_running_run_ends_it_and_both_sides_get_the_cancelled_result() -> None:
    slow = Slow()
    agent = agent_of(slow, reply("waiting", [("slow", {"name": "a"})]), TERMINATE)
    running = asyncio.create_task(agent.run("task"))
    await slow.started.wait()

    ended = await agent.cancel()

    result = await running  # the run's own caller gets the result, not a CancelledError
    assert result is ended
    assert (result.state, result.stop_reason) == (AgentState.ERROR, StopReason.CANCELLED)
    assert agent.fsm_state == "ERROR" and slow.ended == []
    assert agent.memory.messages[-1].content == "Error: the run ended before this tool call produced a result"


async def test_a_run_cancelled_while_it_ran_stays_ended_through_a_resume_of_its_checkpoint(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run.checkpoint"
    slow = Slow()
    agent = agent_of(slow, reply("waiting", [("slow", {"name": "a"})]), TERMINATE)
    running = asyncio.create_task(agent.run("task", checkpoint=path))
    await slow.started.wait()
    ended = await agent.cancel()
    await running

    again_model = ScriptedLLM([TERMINATE])
    again = ToolCallAgent(llm=again_model, tools=Slow().tools)
    resumed = await again.resume(path)

    assert (resumed.state, resumed.stop_reason, resumed.run_id) == (
        AgentState.ERROR,
        StopReason.CANCELLED,
        ended.run_id,
    )
    assert again_model.requests == []  # nothing ran: the model was not asked


async def test_a_run_stopped_by_its_task_s_cancellation_goes_on_when_resumed(tmp_path: Path) -> None:
    """The contrast: a shutdown is not a decision, so the run continues from where it was."""
    path = tmp_path / "run.checkpoint"
    slow = Slow()
    agent = agent_of(slow, reply("waiting", [("slow", {"name": "a"})]))
    running = asyncio.create_task(agent.run("task", checkpoint=path))
    await slow.started.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running

    again = ToolCallAgent(llm=ScriptedLLM([TERMINATE]), tools=Slow().tools)
    resumed = await again.resume(path)
    assert (resumed.state, resumed.stop_reason) == (AgentState.FINISHED, StopReason.TERMINATED)


async def test_a_paused_run_cancelled_stays_ended_and_its_call_never_runs(tmp_path: Path) -> None:
    path = tmp_path / "run.checkpoint"
    slow = Slow()
    agent = agent_of(slow, reply("deleting", [("delete", {"path": "a"})]))
    paused = await agent.run("task", checkpoint=path)
    assert paused.paused and [c.name for c in agent.pending_approval] == ["delete"]

    ended = await agent.cancel()
    assert (ended.state, ended.stop_reason) == (AgentState.ERROR, StopReason.CANCELLED)

    later = Slow()
    again = ToolCallAgent(llm=ScriptedLLM([TERMINATE]), tools=later.tools)
    resumed = await again.resume(path)
    assert resumed.stop_reason == StopReason.CANCELLED and not resumed.paused
    assert again.pending_approval == [] and slow.ended == later.ended == []


async def test_a_paused_run_cancelled_with_its_trace_ends_there_too_and_replays(tmp_path: Path) -> None:
    from agentfsm.agent.replay import replay
    from agentfsm.recording.trace import read_trace

    trace = tmp_path / "run.jsonl"
    slow = Slow()
    agent = agent_of(slow, reply("deleting", [("delete", {"path": "a"})]))
    await agent.run("task", trace=trace)
    ended = await agent.cancel(trace=trace)
    _, records = read_trace(trace)
    last, result = [r for r in records if r["kind"] == "transition"][-1], records[-1]
    assert (last["source"], last["trigger"], last["dest"]) == ("AWAITING_APPROVAL", "cancel", "ERROR")
    assert result["kind"] == "result" and result["result"]["stop_reason"] == "cancelled"
    replayed = await replay(trace)
    assert replayed.result.stop_reason == ended.stop_reason == StopReason.CANCELLED


async def test_cancel_refuses_with_a_line_saying_why_when_there_is_nothing_it_can_cancel() -> None:
    agent = ToolCallAgent(llm=ScriptedLLM([TERMINATE]))
    with pytest.raises(AgentBusyError, match=r"agent 'toolcall' has no run to cancel \(it is IDLE\)"):
        await agent.cancel()

    stepped = ToolCallAgent(llm=ScriptedLLM([TERMINATE]))
    steps = stepped.iter("task")
    await anext(steps)
    with pytest.raises(AgentBusyError, match=r"stop iterating \(`aclose\(\)`\)"):
        await stepped.cancel()
    await steps.aclose()
    assert stepped.last_result is not None and stepped.last_result.stop_reason == StopReason.CANCELLED


async def test_a_run_whose_caller_is_cancelled_too_still_raises_in_its_caller() -> None:
    """`cancel()` hands its own cancellation back as the result; someone else's goes on up."""
    slow = Slow()
    agent = agent_of(slow, reply("waiting", [("slow", {"name": "a"})]))
    running = asyncio.create_task(agent.run("task"))
    await slow.started.wait()
    running.cancel()  # the application's own cancellation, first
    ended = await agent.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert ended.stop_reason == StopReason.CANCELLED
