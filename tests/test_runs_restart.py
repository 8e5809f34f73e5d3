"""`Runs` taking up paused runs after a restart: each waits for its decision as its ``run.json``
showed it, its agent built (and resumed from its checkpoint) only when a decision or a cancel
needs it; a ``run.json`` written before it showed that still has its run resumed at the start."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import test_runs
from runs_support import until

from agentfsm import Runs, StopReason, ToolCallAgent
from agentfsm.errors import KeyNotFoundError, WrongPhaseError
from agentfsm.runs import AgentSpec, RunStatus

pytestmark = pytest.mark.usefixtures("clean_env")


class World(test_runs.World):
    """`test_runs`' world, and every agent its factory built."""

    def __init__(self) -> None:
        super().__init__()
        self.built: list[ToolCallAgent] = []

    def factories(self) -> dict[str, Any]:
        build = super().factories()["worker"]

        def counted(spec: AgentSpec) -> ToolCallAgent:
            agent: ToolCallAgent = build(spec)
            self.built.append(agent)
            return agent

        return {"worker": counted}


async def _paused_run(world: World, folder: Path) -> tuple[str, RunStatus]:
    async with Runs(folder, agents=world.factories()) as runs:
        run_id = await runs.submit("delete a", "worker")
        status = await until(runs, run_id, "paused")
    world.built.clear()
    return run_id, status


async def test_a_paused_run_is_shown_after_a_restart_with_no_agent_built_until_its_decision(
    tmp_path: Path,
) -> None:
    world = World()
    run_id, before = await _paused_run(world, tmp_path)
    files = {name: (tmp_path / run_id / name).read_bytes() for name in ("trace.jsonl", "checkpoint.jsonl")}
    async with Runs(tmp_path, agents=world.factories()) as again:
        status = await again.status(run_id)
        assert status == before and status.pause == 1
        assert [c.name for c in status.pending_approval] == ["delete"]
        assert [s.run_id for s in await again.list(state="paused")] == [run_id]
        assert world.built == []  # nothing read but its run.json: no agent, its files untouched
        assert {name: (tmp_path / run_id / name).read_bytes() for name in files} == files
        unknown = f"no pending call with id 'nope' in the pause of run '{run_id}'"
        with pytest.raises(KeyNotFoundError, match=unknown):
            await again.approve(run_id, "nope")
        assert len(world.built) == 1  # built to take the decision, resumed to the same pause
        assert (await again.status(run_id)).pause == 1
        await again.approve(run_id, before.pending_approval[0].id, pause=1)
        result = await again.result(run_id, wait=True, timeout=10)
    assert result is not None and result.ok and world.done == ["deleted a"] and len(world.built) == 1


async def test_decisions_at_once_on_a_run_asleep_share_one_resumption_and_one_of_two_wins(
    tmp_path: Path,
) -> None:
    world = World()
    run_id, before = await _paused_run(world, tmp_path)
    call = before.pending_approval[0].id
    async with Runs(tmp_path, agents=world.factories()) as again:
        outcomes = await asyncio.gather(
            again.approve(run_id, call, pause=1), again.approve(run_id, call, pause=1), return_exceptions=True
        )
        refused = [o for o in outcomes if isinstance(o, Exception)]
        assert len(refused) == 1 and isinstance(refused[0], WrongPhaseError | KeyNotFoundError), outcomes
        result = await again.result(run_id, wait=True, timeout=10)
    assert result is not None and result.ok and world.done == ["deleted a"] and len(world.built) == 1


async def test_a_run_asleep_is_cancelled_for_good_with_its_end_in_its_trace(tmp_path: Path) -> None:
    world = World()
    run_id, _ = await _paused_run(world, tmp_path)
    async with Runs(tmp_path, agents=world.factories()) as again:
        await again.cancel(run_id)
        status = await again.status(run_id)
        assert status.state == "cancelled" and status.result is not None
        assert status.result.stop_reason is StopReason.CANCELLED
        trace = await again.trace(run_id)
    assert trace is not None and json.loads(trace.splitlines()[-1])["kind"] == "result"
    async with Runs(tmp_path, agents=world.factories()) as third:
        assert (await third.status(run_id)).state == "cancelled" and world.done == []


async def test_a_run_json_without_its_pause_shown_has_its_run_resumed_at_the_start(tmp_path: Path) -> None:
    world = World()
    run_id, before = await _paused_run(world, tmp_path)
    saved = tmp_path / run_id / "run.json"
    record = json.loads(saved.read_text())
    assert record["waiting"]["pending_approval"][0]["name"] == "delete"
    del record["waiting"]  # as a manager that did not write it left the file
    saved.write_text(json.dumps(record))
    async with Runs(tmp_path, agents=world.factories()) as again:
        status = await until(again, run_id, "paused")
        assert len(world.built) == 1  # resumed at the start, as before
        assert (status.pause, status.pending_approval) == (before.pause, before.pending_approval)
        await again.approve(run_id, status.pending_approval[0].id, pause=1)
        result = await again.result(run_id, wait=True, timeout=10)
    assert result is not None and result.ok and world.done == ["deleted a"]


async def test_a_flow_asleep_at_its_plan_review_shows_its_plan_and_is_reviewed_after_a_restart(
    tmp_path: Path,
) -> None:
    from flow_runs_support import FlowWorld

    world = FlowWorld()
    reviewed = AgentSpec(agent="flow", options={"review": True})
    async with Runs(tmp_path, agents=world.factories()) as runs:
        run_id = await runs.submit("note a", reviewed)
        before = await until(runs, run_id, "paused")
    async with Runs(tmp_path, agents=world.factories()) as again:
        status = await again.status(run_id)
        assert status == before and status.plan is not None and "note" in status.plan
        await again.review(run_id, "approve", pause=1)
        result = await again.result(run_id, wait=True, timeout=10)
    assert result is not None and result.stop_reason == "completed" and world.done == ["a"]
