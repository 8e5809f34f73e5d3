"""Forking a `PlanningFlow`'s run from one of its past transitions (`Runs.fork`): from a managed
run, from a flow's checkpoint file, from a flow's trace; its agents' memories edited or not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from flow_runs_support import FlowWorld
from runs_support import until

from agentfsm import AgentState, Runs
from agentfsm.errors import IndexOutOfRangeError, WrongPhaseError, WrongValueError
from agentfsm.flow.checkpoint import read_flow_checkpoint
from agentfsm.flow.replay import replay_flow
from agentfsm.messages import Message, Role
from agentfsm.runs import AgentSpec

pytestmark = pytest.mark.usefixtures("clean_env")

AFTER_STEP_ONE = 2
"""The flow's transition EXECUTING -> EXECUTING: step 1 completed, step 2 not begun."""


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _own_edges(records: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(r["source"], r["dest"]) for r in records if r["kind"] == "transition" and "agent" not in r]


async def _parent(runs: Runs, world: FlowWorld) -> str:
    parent = await runs.submit("note a; note b", "flow", run_id="parent")
    result = await runs.result(parent, wait=True, timeout=10)
    assert result is not None and result.state is AgentState.FINISHED and world.done == ["a", "b"]
    return parent


async def test_a_flow_forks_after_a_step_and_no_step_it_completed_runs_again(tmp_path: Path) -> None:
    world = FlowWorld()
    async with Runs(tmp_path / "runs", agents=world.factories()) as runs:
        parent = await _parent(runs, world)
        parent_trace = (tmp_path / "runs" / parent / "trace.jsonl").read_text()
        parent_checkpoint = (tmp_path / "runs" / parent / "checkpoint.jsonl").read_text()
        point = await runs.fork_point(parent, AFTER_STEP_ONE)
        assert (point.state, point.pending, point.memory.messages) == ("EXECUTING", (), [])
        assert [m.role for m in point.agents["worker"].messages][-1] is Role.TOOL  # step 1's end
        planned, worked = world.planner_calls, world.worker_calls

        fork = await runs.fork(parent, AFTER_STEP_ONE, fork_id="fork")
        result = await runs.result(fork, wait=True, timeout=10)
        assert result is not None and (result.state, result.stop_reason) == (AgentState.FINISHED, "completed")
        assert world.done == ["a", "b", "b"]  # step 2 only: step 1 was completed before the fork
        assert (world.planner_calls - planned, world.worker_calls - worked) == (1, 2)  # the summary; step 2
    assert (tmp_path / "runs" / parent / "trace.jsonl").read_text() == parent_trace  # the parent untouched
    assert (tmp_path / "runs" / parent / "checkpoint.jsonl").read_text() == parent_checkpoint
    records = _records(tmp_path / "runs" / "fork" / "trace.jsonl")
    assert records[0]["run_id"] == "fork"
    assert records[0]["forked_from"] == {"run_id": "parent", "transition": 2, "memory_edited": False}
    parent_records = _records(tmp_path / "runs" / "parent" / "trace.jsonl")
    assert _own_edges(records) == _own_edges(parent_records)  # its history to the fork, then the same steps
    assert records[-1]["kind"] == "result" and records[-1]["flow"]["run_id"] == "fork"
    replayed = await replay_flow(
        tmp_path / "runs" / "fork" / "trace.jsonl"
    )  # one run: the parent's, then its own
    assert replayed.ended_early is None and replayed.result is not None
    assert replayed.result.stop_reason == "completed"
    steps = records[-1]["flow"]["plan"]["steps"]
    assert [(s["status"], s["attempts"]) for s in steps] == [("completed", 1), ("completed", 1)]
    checkpoint = _records(tmp_path / "runs" / "fork" / "checkpoint.jsonl")
    assert checkpoint[-1]["run_state"]["run_id"] == "fork" and checkpoint[-1]["run_state"]["state"] == "DONE"
    saved = json.loads((tmp_path / "runs" / "fork" / "run.json").read_text())
    assert saved["forked_from"] == {"run_id": "parent", "transition": 2} and saved["spec"]["agent"] == "flow"


async def test_a_flow_s_fork_asks_its_agent_with_the_edited_memory(tmp_path: Path) -> None:
    world = FlowWorld()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        parent = await _parent(runs, world)
        point = await runs.fork_point(parent, AFTER_STEP_ONE)
        edited = [
            Message(role=m.role, content="noted z", tool_call_id=m.tool_call_id, name=m.name)
            if m.role is Role.TOOL and "noted a" in str(m.content)
            else m
            for m in point.agents["worker"].messages
        ]
        with pytest.raises(WrongValueError, match="has no memory of its own: give `memory` as its agents'"):
            await runs.fork(parent, AFTER_STEP_ONE, memory=edited)
        with pytest.raises(WrongValueError, match="has no agent 'nobody'; its agents: worker"):
            await runs.fork(parent, AFTER_STEP_ONE, memory={"nobody": edited})
        fork = await runs.fork(parent, AFTER_STEP_ONE, memory={"worker": edited})
        result = await runs.result(fork, wait=True, timeout=10)
        assert result is not None and result.state is AgentState.FINISHED
        seen = [str(m.content) for m in world.asked[-2] if m.role is Role.TOOL]
        assert "noted z" in seen and not any("noted a" in text for text in seen)  # step 2's agent read it
        assert _records(tmp_path / fork / "trace.jsonl")[0]["forked_from"]["memory_edited"] is True


async def test_a_flow_s_fork_is_refused_beyond_its_transitions_and_from_its_end(tmp_path: Path) -> None:
    world = FlowWorld()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        parent = await _parent(runs, world)
        with pytest.raises(IndexOutOfRangeError, match=f"run '{parent}' has no transition 9"):
            await runs.fork(parent, 9)
        with pytest.raises(WrongPhaseError, match=f"transition 4 of run '{parent}' ended it"):
            await runs.fork(parent, 4)
        assert [s.run_id for s in await runs.list()] == [parent]


async def test_a_flow_forks_from_its_checkpoint_file_and_from_its_trace(tmp_path: Path) -> None:
    world = FlowWorld()
    flow = world.factories()["flow"](AgentSpec(agent="flow"))
    trace, checkpoint = tmp_path / "flow.jsonl", tmp_path / "flow.ckpt.jsonl"
    ended = await flow.execute("note a; note b", trace=trace, checkpoint=checkpoint, run_id="file")
    assert ended.state is AgentState.FINISHED and world.done == ["a", "b"]
    async with Runs(tmp_path / "runs", agents=world.factories()) as runs:
        with pytest.raises(WrongValueError, match="needs `agent`"):
            await runs.fork(trace, AFTER_STEP_ONE)
        with pytest.raises(IndexOutOfRangeError, match="has no transition 9"):
            await runs.fork(trace, 9, agent="flow")
        point = await runs.fork_point(trace, AFTER_STEP_ONE)
        assert point.run_id == "file" and point.state == "EXECUTING" and point.agents["worker"].messages
        from_trace = await runs.fork(trace, AFTER_STEP_ONE, agent="flow", fork_id="from-trace")
        from_checkpoint = await runs.fork(checkpoint, AFTER_STEP_ONE, agent="flow", fork_id="from-checkpoint")
        for fork in (from_trace, from_checkpoint):
            result = await runs.result(fork, wait=True, timeout=10)
            assert result is not None and result.state is AgentState.FINISHED, result
        assert world.done == ["a", "b", "b", "b"]  # step 2 once in each fork, step 1 never again
    by_trace = _records(tmp_path / "runs" / "from-trace" / "trace.jsonl")
    assert by_trace[0]["forked_from"]["trace"] == str(trace)
    assert _own_edges(by_trace) == _own_edges(_records(trace))
    by_checkpoint = _records(tmp_path / "runs" / "from-checkpoint" / "trace.jsonl")
    assert by_checkpoint[0]["begins_after"]["edges"] == 3  # no trace holds its history: it begins there
    assert _own_edges(by_checkpoint) == [("EXECUTING", "FINALIZING"), ("FINALIZING", "DONE")]


async def test_a_flow_forked_at_its_step_agent_s_pause_waits_there_for_its_own_decision(
    tmp_path: Path,
) -> None:
    world = FlowWorld()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        parent = await runs.submit("delete a", "flow", run_id="parent")
        status = await until(runs, parent, "paused")
        await runs.approve(parent, status.pending_approval[0].id)
        assert (await runs.result(parent, wait=True, timeout=10)) is not None and world.done == ["deleted a"]
        edges = _own_edges(_records(tmp_path / parent / "trace.jsonl"))
        paused_at = edges.index(("EXECUTING", "AWAITING_AGENT"))
        point = await runs.fork_point(parent, paused_at)
        assert point.state == "AWAITING_AGENT" and point.pending == (status.pending_approval[0].id,)
        fork = await runs.fork(parent, paused_at)
        forked = await until(runs, fork, "paused")
        assert forked.pause == 1 and [c.name for c in forked.pending_approval] == ["delete"]
        await runs.reject(fork, forked.pending_approval[0].id, "not in the fork", pause=1)
        result = await runs.result(fork, wait=True, timeout=10)
        assert result is not None and result.state is AgentState.FINISHED
    assert world.done == ["deleted a"]  # approved in the parent, rejected in its fork


async def test_a_flow_s_fork_revises_the_plan_it_went_on_with_when_a_step_blocks(tmp_path: Path) -> None:
    world = FlowWorld()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        parent = await runs.submit("note a; boom", "flow", run_id="parent")
        ended = await runs.result(parent, wait=True, timeout=10)
        assert ended is not None and ended.state is AgentState.FINISHED and world.done == ["a", "recovered"]
        fork = await runs.fork(parent, AFTER_STEP_ONE)
        result = await runs.result(fork, wait=True, timeout=10)
        assert result is not None and (result.state, result.stop_reason) == (AgentState.FINISHED, "completed")
    assert world.done == ["a", "recovered", "recovered"]  # the fork's planner revised its parent's plan
    flow = _records(tmp_path / fork / "trace.jsonl")[-1]["flow"]
    assert flow["replans"] == 1 and [s["status"] for s in flow["plan"]["steps"]] == ["completed", "completed"]


async def test_a_flow_s_checkpoint_written_before_journals_is_refused_saying_how_to_fork_it(
    tmp_path: Path,
) -> None:
    world = FlowWorld()
    flow = world.factories()["flow"](AgentSpec(agent="flow"))
    journal, document = tmp_path / "flow.ckpt.jsonl", tmp_path / "old.json"
    await flow.execute("note a; note b", checkpoint=journal)
    document.write_text(json.dumps(read_flow_checkpoint(journal)))  # one document, as schema 3 wrote it
    async with Runs(tmp_path / "runs", agents=world.factories()) as runs:
        with pytest.raises(
            WrongValueError, match="written before they were journals: resume the flow from it once"
        ):
            await runs.fork(document, AFTER_STEP_ONE, agent="flow")
        assert await runs.list() == []
