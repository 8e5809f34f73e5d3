"""`Runs` drives a `PlanningFlow` as it drives an agent: submitted, followed, decided, reviewed,
held at breakpoints, cancelled, and taken up again after a restart."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from flow_runs_support import FlowWorld
from runs_support import until

from agentfsm import AgentState, Runs, StopReason
from agentfsm.agent.stepping import Breakpoint
from agentfsm.errors import WrongPhaseError, WrongValueError
from agentfsm.flow.replay import replay_flow
from agentfsm.runs import AgentSpec

pytestmark = pytest.mark.usefixtures("clean_env")


async def _replays_whole(runs: Runs, run_id: str) -> None:
    """The flow's trace replays as one run, to the result the run ended with."""
    result = await runs.result(run_id)
    assert result is not None
    replayed = await replay_flow(Path(runs.directory, run_id, "trace.jsonl"))
    assert replayed.ended_early is None and replayed.result is not None
    assert (replayed.result.state, replayed.result.stop_reason) == (result.state, result.stop_reason)


async def test_a_flow_is_submitted_followed_and_ended_with_its_trace_and_events(tmp_path: Path) -> None:
    world = FlowWorld()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        run_id = await runs.submit("note a; note b", "flow")
        result = await runs.result(run_id, wait=True, timeout=10)
        assert result is not None and (result.state, result.stop_reason) == (AgentState.FINISHED, "completed")
        assert result.output == "summary: all done"
        status = await runs.status(run_id)
        assert (status.state, status.plan, status.pending_approval) == ("finished", None, ())
        trace = await runs.trace(run_id)
        assert trace is not None and json.loads(trace.splitlines()[0])["agent_class"].endswith("PlanningFlow")
        kinds = [(e.kind, e.data.get("agent")) for e in [e async for e in runs.events(run_id)]]
        assert ("transition", "planning") in kinds and ("transition", "worker") in kinds
        await _replays_whole(runs, run_id)
    assert world.done == ["a", "b"]


async def test_a_step_agent_s_call_is_decided_bound_to_the_flow_s_pause(tmp_path: Path) -> None:
    world = FlowWorld()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        run_id = await runs.submit("delete a; delete b", "flow")
        status = await until(runs, run_id, "paused")
        assert status.pause == 1 and [c.name for c in status.pending_approval] == ["delete"]
        call = status.pending_approval[0].id
        with pytest.raises(WrongPhaseError, match=f"was for pause 2 of run '{run_id}', which is over"):
            await runs.approve(run_id, call, pause=2)
        await runs.approve(run_id, call, pause=1)
        status = await until(runs, run_id, "paused", lambda: world.done == ["deleted a"])
        assert status.pause == 2
        await runs.reject(run_id, status.pending_approval[0].id, "not b", pause=2)
        result = await runs.result(run_id, wait=True, timeout=10)
        assert result is not None and result.state is AgentState.FINISHED
        await _replays_whole(runs, run_id)
    assert world.done == ["deleted a"]


async def test_a_flow_is_cancelled_running_or_paused_and_stays_cancelled(tmp_path: Path) -> None:
    world = FlowWorld()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        running = await runs.submit("wait", "flow")
        paused = await runs.submit("delete a", "flow")
        await until(runs, running, "running", lambda: world.waiting == 1)
        await until(runs, paused, "paused")
        await runs.cancel(running)
        await runs.cancel(paused)
        for run_id in (running, paused):
            status = await runs.status(run_id)
            assert status.state == "cancelled" and status.result is not None
            assert status.result.stop_reason == StopReason.CANCELLED
    world.gate.set()
    async with Runs(tmp_path, agents=world.factories()) as again:
        assert {s.state for s in await again.list()} == {"cancelled"}
    assert world.done == [] and world.waiting == 1


async def test_a_restart_takes_running_and_paused_flows_up_from_their_checkpoints(tmp_path: Path) -> None:
    world = FlowWorld()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        running = await runs.submit("note first; wait", "flow")
        paused = await runs.submit("delete a", "flow")
        await until(runs, paused, "paused")
        await until(runs, running, "running", lambda: world.waiting == 1)
    # closed: the running flow stopped in its step, the paused one let go of
    world.gate.set()
    async with Runs(tmp_path, agents=world.factories()) as again:
        result = await again.result(running, wait=True, timeout=10)
        assert result is not None and result.state is AgentState.FINISHED
        assert world.done == ["first"]  # the completed step did not run again
        await _replays_whole(again, running)
        status = await until(again, paused, "paused")
        assert status.pause == 1 and [c.name for c in status.pending_approval] == ["delete"]
        await again.approve(paused, status.pending_approval[0].id, pause=1)
        result = await again.result(paused, wait=True, timeout=10)
        assert (
            result is not None
            and result.state is AgentState.FINISHED
            and world.done == ["first", "deleted a"]
        )
        await _replays_whole(again, paused)


async def test_a_reviewed_plan_is_approved_edited_or_cancelled_bound_to_its_pause(tmp_path: Path) -> None:
    world = FlowWorld()
    reviewed = AgentSpec(agent="flow", options={"review": True})
    async with Runs(tmp_path, agents=world.factories()) as runs:
        approved = await runs.submit("note a", reviewed)
        edited = await runs.submit("note b", reviewed)
        cancelled = await runs.submit("note c", reviewed)
        solo = await runs.submit("note d", "solo")
        for run_id in (approved, edited, cancelled):
            status = await until(runs, run_id, "paused")
            assert status.pause == 1 and status.plan is not None and "note" in status.plan
        with pytest.raises(WrongValueError, match="a plan is edited with its new `steps`"):
            await runs.review(edited, "edit")
        with pytest.raises(WrongPhaseError, match="was for pause 3 of run"):
            await runs.review(approved, "approve", pause=3)
        await runs.review(approved, "approve", pause=1)
        await runs.review(edited, "edit", ["[worker] note edited"])
        await runs.review(cancelled, "cancel")
        for run_id, reason in ((approved, "completed"), (edited, "completed"), (cancelled, "plan_cancelled")):
            result = await runs.result(run_id, wait=True, timeout=10)
            assert result is not None and result.stop_reason == reason
        await runs.result(solo, wait=True, timeout=10)
        with pytest.raises(WrongPhaseError, match=f"run '{solo}' is finished, not paused"):
            await runs.review(solo, "approve")
    assert sorted(world.done) == ["a", "d", "edited"]


async def test_a_flow_waits_at_its_breakpoints_and_refuses_a_tool_s(tmp_path: Path) -> None:
    world = FlowWorld()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        run_id = await runs.submit("note a; note b", "flow", breakpoints=[Breakpoint(state="EXECUTING")])
        status = await until(runs, run_id, "running", lambda: world.done == [])
        status = await until(runs, run_id, "running", lambda: world.planner_calls == 1)
        while (status := await runs.status(run_id)).held is None:
            await asyncio.sleep(0.01)
        assert status.held == "EXECUTING: PLANNING -> EXECUTING on planned" and world.done == []
        with pytest.raises(WrongValueError, match="never at a tool's call"):
            await runs.set_breakpoints(run_id, [Breakpoint(tool="note")])
        with pytest.raises(WrongValueError, match="no state 'THINKING'"):
            await runs.set_breakpoints(run_id, [Breakpoint(state="THINKING")])
        await runs.step(run_id)
        while (status := await runs.status(run_id)).held is None:
            await asyncio.sleep(0.01)
        assert world.done == ["a"]  # one edge on: the step ran, then it waits at the next edge
        await runs.set_breakpoints(run_id, [])
        await runs.proceed(run_id)
        result = await runs.result(run_id, wait=True, timeout=10)
        assert result is not None and result.state is AgentState.FINISHED and world.done == ["a", "b"]
