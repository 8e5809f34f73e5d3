"""A flow's run has the lifecycle an agent's has (`DrivenModel`): the same refusals while a run is
in progress or paused, `cancel()` of a paused run, `iter()` and `resume_iter()` step by step, a named
run id, `reset()`, and a checkpoint leased before the run starts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentfsm import StopReason, ToolCallAgent, tool
from agentfsm.errors import AgentBusyError, CheckpointLeasedError
from agentfsm.flow import FlowStopReason, PlanningFlow, StepStatus
from agentfsm.recording.lease import Lease
from agentfsm.run.result import AgentState
from agentfsm.testing import ScriptedLLM, reply


def create(*steps: str) -> object:
    return reply(tool_calls=[("planning", {"command": "create", "title": "T", "steps": list(steps)})])


def reviewed_flow(*planner: object) -> PlanningFlow:
    coder = ToolCallAgent(llm=ScriptedLLM([reply("done it")]), name="coder")
    return PlanningFlow(agents={"coder": coder}, planner_llm=ScriptedLLM(list(planner)), review=True)


async def test_a_flow_paused_for_review_is_cancelled_for_good_and_a_new_run_may_start() -> None:
    flow = reviewed_flow(create("[coder] a"), create("[coder] b"), reply("summary"))
    assert (await flow.execute("first")).paused
    with pytest.raises(AgentBusyError) as refused:
        await flow.execute("second")
    assert str(refused.value) == (
        "flow 'planning' has a paused run (it waits in AWAITING_PLAN_REVIEW); `resume()` it, "
        "or `await flow.cancel()` to end it, before starting another"
    )
    cancelled = await flow.cancel()
    assert (cancelled.state, cancelled.stop_reason) == (AgentState.ERROR, StopReason.CANCELLED)
    assert flow.fsm_state == "ERROR" and flow.last_result is not None and not cancelled.paused
    with pytest.raises(AgentBusyError, match="flow 'planning' has no run to cancel"):
        await flow.cancel()
    with pytest.raises(AgentBusyError, match="flow 'planning' has no paused run to resume"):
        await flow.resume()
    again = await flow.execute("second")  # a new run: the cancelled one is over
    assert again.paused and again.run_id != cancelled.run_id


async def test_cancelling_a_flow_paused_on_its_agent_ends_the_agent_s_paused_run_too() -> None:
    ran: list[int] = []

    @tool
    def record(n: int) -> str:
        """Records `n` (a call that needs approval)."""
        ran.append(n)
        return f"recorded {n}"

    coder = ToolCallAgent(
        llm=ScriptedLLM([reply("recording", [("record", {"n": 1})])]),
        tools=[record],
        name="coder",
        require_approval=["record"],
    )
    flow = PlanningFlow(agents={"coder": coder}, planner_llm=ScriptedLLM([create("[coder] record one")]))
    paused = await flow.execute("task")
    assert paused.paused and coder.fsm_state == "AWAITING_APPROVAL"
    result = await flow.cancel()
    assert result.stop_reason == StopReason.CANCELLED and flow.fsm_state == "ERROR"
    assert coder.phase is None and coder.last_result is not None
    assert coder.last_result.stop_reason is StopReason.CANCELLED and ran == []  # nothing ran unapproved
    assert result.plan is not None and result.plan.steps[0].status is StepStatus.IN_PROGRESS


async def test_a_flow_steps_edge_by_edge_and_names_its_run() -> None:
    coder = ToolCallAgent(llm=ScriptedLLM([reply("done it")]), name="coder")
    flow = PlanningFlow(
        agents={"coder": coder}, planner_llm=ScriptedLLM([create("[coder] a"), reply("all done")])
    )
    seen = []
    async for transition in flow.iter("task"):
        seen.append((transition.source, transition.dest))
        if transition.dest == "EXECUTING":  # the step has not run yet: the flow waits for the caller
            assert coder.last_result is None and flow.plan is not None
    assert seen[0] == ("IDLE", "PLANNING") and seen[-1][1] == "DONE"
    assert ("PLANNING", "EXECUTING") in seen and ("FINALIZING", "DONE") in seen
    assert flow.last_result is not None and flow.last_result.stop_reason == FlowStopReason.COMPLETED

    other = PlanningFlow(
        agents={"coder": ToolCallAgent(llm=ScriptedLLM([reply("done")]), name="coder")},
        planner_llm=ScriptedLLM([create("[coder] a"), reply("summary")]),
    )
    named = await other.execute("task", run_id="nightly-42")
    assert named.run_id == "nightly-42" and named.ok
    assert (await other.execute("task again")).run_id != "nightly-42"  # one run only


async def test_a_flow_s_checkpoint_held_by_another_is_refused_before_anything_runs(tmp_path: Path) -> None:
    path = tmp_path / "flow.checkpoint.json"
    held = Lease.acquire(path)
    planner = ScriptedLLM([create("[coder] a")])
    flow = PlanningFlow(
        agents={"coder": ToolCallAgent(llm=ScriptedLLM([]), name="coder")}, planner_llm=planner
    )
    try:
        with pytest.raises(CheckpointLeasedError):
            await flow.execute("task", checkpoint=path)
    finally:
        held.release()
    assert planner.requests == [] and flow.fsm_state == "IDLE"  # refused before the run started


async def test_a_paused_flow_resumes_step_by_step_in_place_and_from_its_checkpoint(tmp_path: Path) -> None:
    """`resume_iter()`, as an agent's: the flow's edges one by one, the same the flow's `resume()`
    takes; from a checkpoint, a flow built again goes on where the saved one paused."""
    path = tmp_path / "flow.checkpoint"
    flow = reviewed_flow(create("[coder] a"), reply("summary"))
    assert (await flow.execute("task", checkpoint=path)).paused
    flow.approve_plan()
    seen = [(t.source, t.dest) async for t in flow.resume_iter()]
    assert seen[0] == ("AWAITING_PLAN_REVIEW", "EXECUTING") and seen[-1] == ("FINALIZING", "DONE")
    assert flow.last_result is not None and flow.last_result.stop_reason == FlowStopReason.COMPLETED

    written = tmp_path / "written.checkpoint"
    first = reviewed_flow(create("[coder] a"), reply("summary"))
    assert (await first.execute("task", checkpoint=written)).paused
    saved = tmp_path / "saved.checkpoint"  # as a process killed at the pause would leave it
    saved.write_bytes(written.read_bytes())
    again = reviewed_flow(reply("summary"))  # built as the one that wrote it; its plan is in the file
    assert [t async for t in again.resume_iter(saved)] == []  # no decision yet: it waits again
    assert again.fsm_state == "AWAITING_PLAN_REVIEW" and again.plan is not None
    again.approve_plan()
    seen = [(t.source, t.dest) async for t in again.resume_iter()]
    assert seen[0] == ("AWAITING_PLAN_REVIEW", "EXECUTING") and seen[-1] == ("FINALIZING", "DONE")


async def test_a_finished_flow_resets_to_idle_by_a_logged_edge_and_a_paused_one_refuses() -> None:
    flow = reviewed_flow(create("[coder] a"), create("[coder] b"), reply("summary"))
    assert (await flow.execute("first")).paused
    with pytest.raises(AgentBusyError, match="flow 'planning' has a paused run"):
        flow.reset()
    edges: list[tuple[str, str, str]] = []
    flow.on_transition(lambda t: edges.append((t.source, t.dest, t.trigger)))
    await flow.cancel()
    flow.reset()
    assert flow.fsm_state == "IDLE" and edges[-1] == ("ERROR", "IDLE", "reset")
    flow.reset()  # already IDLE: nothing to do
    assert edges[-1] == ("ERROR", "IDLE", "reset")


async def test_a_flow_cancelled_running_or_paused_stays_ended_through_its_checkpoint(tmp_path: Path) -> None:
    """`flow.cancel()`, as an agent's: a running flow's task is cancelled and its `execute()`
    returns the cancelled result; a paused one ends at once; either checkpoint resumes to that end."""
    started = asyncio.Event()

    @tool
    async def wait() -> str:
        """Waits a long time."""
        started.set()
        await asyncio.sleep(30)
        return "waited"

    coder = ToolCallAgent(llm=ScriptedLLM([reply("waiting", [("wait", {})])]), tools=[wait], name="coder")
    running_path = tmp_path / "running.checkpoint"
    flow = PlanningFlow(agents={"coder": coder}, planner_llm=ScriptedLLM([create("[coder] a")]))
    running = asyncio.create_task(flow.execute("task", checkpoint=running_path))
    await started.wait()
    ended = await flow.cancel()
    assert (await running).stop_reason == StopReason.CANCELLED == ended.stop_reason

    paused_path = tmp_path / "paused.checkpoint"
    paused = reviewed_flow(create("[coder] a"))
    assert (await paused.execute("task", checkpoint=paused_path)).paused
    await paused.cancel()

    for path in (running_path, paused_path):
        planner = ScriptedLLM([reply("summary")])
        coder = ToolCallAgent(llm=ScriptedLLM([]), name="coder")  # as `reviewed_flow` builds it
        if path is running_path:
            coder = ToolCallAgent(llm=ScriptedLLM([]), tools=[wait], name="coder")
        again = PlanningFlow(
            agents={"coder": coder},
            planner_llm=planner,
            review=path is paused_path,
        )
        resumed = await again.resume(path)
        assert (resumed.state, resumed.stop_reason) == (AgentState.ERROR, StopReason.CANCELLED)
        assert planner.requests == []  # nothing ran
