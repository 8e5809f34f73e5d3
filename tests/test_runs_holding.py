"""Breakpoints on an app's runs: a run held between two edges, stepped, sent on, cancelled there,
and held again after a restart (`Runs.set_breakpoints`, `step`, `proceed`)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from test_runs import World, _replays_whole

from agentfsm import Runs, StopReason
from agentfsm.agent.stepping import Breakpoint
from agentfsm.errors import WrongPhaseError, WrongValueError
from agentfsm.runs import RunStatus

pytestmark = pytest.mark.usefixtures("clean_env")


async def _held(runs: Runs, run_id: str, timeout: float = 10) -> RunStatus:
    """The run's status once it waits at a breakpoint."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (status := await runs.status(run_id)).held is None:
        assert status.result is None, f"run {run_id} ended ({status.state}) without being held"
        assert loop.time() < deadline, f"run {run_id} is {status.state}, never held"
        await asyncio.sleep(0.005)
    return status


async def _transitions(runs: Runs, run_id: str) -> list[tuple[str, str]]:
    text = await runs.trace(run_id)
    assert text is not None
    records = [json.loads(line) for line in text.splitlines()]
    return [(r["source"], r["dest"]) for r in records if r["kind"] == "transition"]


async def test_a_run_waits_at_a_tool_breakpoint_steps_one_edge_at_a_time_and_proceeds_to_its_end(
    tmp_path: Path,
) -> None:
    world = World()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        run_id = await runs.submit("note hello", "worker", breakpoints=[Breakpoint(tool="note")])
        status = await _held(runs, run_id)
        assert status.state == "running"
        assert status.held == "tool note: THINKING -> ACTING on think_done"
        assert world.done == []  # held before the call runs
        await asyncio.sleep(0.05)
        assert world.done == [] and (await runs.status(run_id)).held is not None  # it stays held

        await runs.step(run_id)  # ACTING runs the call, then the run waits in OBSERVING
        status = await _held(runs, run_id)
        assert status.held == "step: ACTING -> OBSERVING on act_done" and world.done == ["hello"]
        await runs.step(run_id)
        with pytest.raises(WrongPhaseError, match="not held at a breakpoint"):
            await runs.step(run_id)  # on its way: not held until its next edge
        status = await _held(runs, run_id)
        assert status.held == "step: OBSERVING -> THINKING on observe_done"

        await runs.proceed(run_id)
        result = await runs.result(run_id, wait=True, timeout=10)
        assert result is not None and result.ok
        assert (await runs.status(run_id)).held is None

        kinds = [event.kind async for event in runs.events(run_id)]
        assert kinds.count("held") >= 2 and kinds.count("released") == kinds.count("held")
        edges = await _transitions(runs, run_id)
        assert edges[:3] == [("IDLE", "THINKING"), ("THINKING", "ACTING"), ("ACTING", "OBSERVING")]
        await _replays_whole(runs, run_id)  # a held run's trace is an ordinary one


async def test_breakpoints_set_on_a_running_run_hold_it_and_cancel_ends_a_held_run(tmp_path: Path) -> None:
    world = World()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        run_id = await runs.submit("wait", "worker")
        while world.waiting == 0:
            await asyncio.sleep(0.005)
        await runs.set_breakpoints(run_id, [Breakpoint(state="OBSERVING")])
        assert runs.breakpoints(run_id) == (Breakpoint(state="OBSERVING"),)
        world.gate.set()
        status = await _held(runs, run_id)
        assert status.held == "OBSERVING: ACTING -> OBSERVING on act_done"
        await runs.cancel(run_id)
        status = await runs.status(run_id)
        assert status.state == "cancelled" and status.held is None
        assert status.result is not None and status.result.stop_reason == StopReason.CANCELLED
        with pytest.raises(WrongPhaseError, match="has ended"):
            await runs.set_breakpoints(run_id, [])


async def test_a_breakpoint_the_machine_lacks_is_refused_naming_it(tmp_path: Path) -> None:
    world = World()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        run_id = await runs.submit("wait", "worker")
        while world.waiting == 0:
            await asyncio.sleep(0.005)
        with pytest.raises(WrongValueError, match="no state 'NAPPING' in this agent's machine"):
            await runs.set_breakpoints(run_id, [Breakpoint(state="NAPPING")])
        with pytest.raises(WrongPhaseError, match=f"run '{run_id}' is not held"):
            await runs.proceed(run_id)
        world.gate.set()
        assert (await runs.result(run_id, wait=True, timeout=10)).ok  # type: ignore[union-attr]

        bad = await runs.submit("note x", "worker", breakpoints=[Breakpoint(trigger="jump")])
        result = await runs.result(bad, wait=True, timeout=10)
        assert result is not None and result.stop_reason == StopReason.ERROR
        assert "no trigger 'jump' in this agent's machine" in str(result.error)
        assert world.done == []


async def test_a_held_run_is_held_again_after_a_restart(tmp_path: Path) -> None:
    world = World()
    points = [Breakpoint(state="OBSERVING"), Breakpoint(trigger="observe_done")]
    async with Runs(tmp_path, agents=world.factories()) as runs:
        run_id = await runs.submit("note hello", "worker", breakpoints=points)
        status = await _held(runs, run_id)
        assert status.held == "OBSERVING: ACTING -> OBSERVING on act_done" and world.done == ["hello"]
    saved = json.loads((tmp_path / run_id / "run.json").read_text())
    assert saved["breakpoints"] == [{"state": "OBSERVING"}, {"trigger": "observe_done"}]
    async with Runs(tmp_path, agents=world.factories()) as again:
        assert again.breakpoints(run_id) == tuple(points)
        status = await _held(again, run_id)  # taken up in OBSERVING, it waits after its next edge
        assert status.held == "* -> * on observe_done: OBSERVING -> THINKING on observe_done"
        await again.set_breakpoints(run_id, [])
        await again.proceed(run_id)
        result = await again.result(run_id, wait=True, timeout=10)
        assert result is not None and result.ok
    assert world.done == ["hello"]  # the call ran once
