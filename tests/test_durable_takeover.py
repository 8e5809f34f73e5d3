"""Takeovers that do not go through in one pass, on SQLite in one process: a claimer whose takeover failed
half way does it again at its next round, and a live worker whose row a claimer claimed and then left
(dead before it put the runs back) is fenced, then takes its own row and runs back. (Across processes, a
claimer SIGKILLed between its claim and its takeover: test_durable_workers.py.)"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from durable_agents import AGENTS

from agentfsm.durable import AgentSpec, DurableRuns, Worker
from agentfsm.durable.heartbeat import Heartbeats


def calls(effects: Path) -> list[str]:
    return effects.read_text().split() if effects.exists() else []


async def until_calls(effects: Path, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while len(calls(effects)) < n:
        assert time.monotonic() < deadline, calls(effects)
        await asyncio.sleep(0.02)


def count_spec(effects: Path, steps: int) -> AgentSpec:
    return AgentSpec(agent="slow", options={"effects": str(effects), "delay": 0.1, "steps": steps})


async def test_a_takeover_whose_resume_failed_is_done_at_the_claimers_next_round(tmp_path, agentfsm_events):
    db, effects = f"sqlite:///{tmp_path / 'runs.db'}", tmp_path / "effects.txt"
    runs = DurableRuns(db)
    async with Worker(db, agents=AGENTS, worker_id="gone", polling_s=0.05):
        run_id = await runs.submit("count", count_spec(effects, 10))
        await until_calls(effects, 2)
    # `gone` stopped in the middle: its run is held by its id, its row stands still.
    assert ((await runs.status(run_id)).state, (await runs.status(run_id)).worker) == ("running", "gone")
    solo = Worker(db, agents=AGENTS, worker_id="solo", heartbeat_s=0.1, dead_after_s=0.5, polling_s=0.05)
    resume, failed = solo._client.resume, []

    def resume_failing_once(run_ids: list[str], queue: str) -> None:
        if not failed:
            assert solo._heartbeats is not None
            failed.append(sorted((b.worker_id, b.claimed_by) for b in solo._heartbeats.beats()))
            raise RuntimeError("the database went away")
        resume(run_ids, queue)

    solo._client.resume = resume_failing_once
    async with solo:
        result = await runs.result(run_id, wait=True, timeout=60)
        assert solo._heartbeats is not None
        rows = sorted(b.worker_id for b in solo._heartbeats.beats())
    runs.close()
    assert failed == [[("gone", "solo"), ("solo", None)]]  # claimed, then the resume raised
    assert [e["error"] for e in agentfsm_events.named("durable_heartbeat_failed")] == [
        "RuntimeError: the database went away"
    ]
    assert [(e["dead"], e["runs"]) for e in agentfsm_events.named("durable_takeover")] == [("gone", [run_id])]
    assert solo.taken_over == [run_id] and rows == ["solo"]  # done once, and the dead row deleted
    assert (str(result.stop_reason), result.steps) == ("max_steps", 10)
    done = calls(effects)
    assert len(done) == len(set(done)) >= 9, done  # each call once; one in flight may be interrupted


async def test_a_live_worker_left_claimed_by_a_dead_claimer_is_fenced_then_takes_its_runs_back(
    tmp_path, agentfsm_events
):
    """Another worker claimed `solo` (as it would a dead one) and died before putting its runs back: the
    claim stands. `solo` sees itself claimed, its run stops at its next step (the fence), and once the
    claim has stood still for `dead_after_s` solo claims its own row, puts its run back on the queue,
    takes it again and finishes it; then it registers afresh."""
    db, effects = f"sqlite:///{tmp_path / 'runs.db'}", tmp_path / "effects.txt"
    runs, claimer = DurableRuns(db), Heartbeats(db)
    solo = Worker(db, agents=AGENTS, worker_id="solo", heartbeat_s=0.1, dead_after_s=1.5, polling_s=0.05)
    async with solo:
        run_id = await runs.submit("count", count_spec(effects, 12))
        await until_calls(effects, 2)
        for _ in range(100):  # solo beats every 0.1 s: a claim of the count just read may come too late
            (mine,) = [b for b in claimer.beats() if b.worker_id == "solo"]
            if claimer.claim(mine, "gone"):
                break
        else:
            raise AssertionError("solo's row could not be claimed")
        claimed_at = time.monotonic()
        while not agentfsm_events.named("durable_worker_claimed"):  # its next beat closes the fence
            assert time.monotonic() - claimed_at < 10, "solo never saw itself claimed"
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # the step in flight may end
        held = calls(effects)
        await asyncio.sleep(0.5)  # solo takes its row over 1.5 s after that beat, not before
        assert calls(effects) == held, "a step started after the worker saw itself claimed"
        await until_calls(effects, len(held) + 1)
        went_on = time.monotonic() - claimed_at
        result = await runs.result(run_id, wait=True, timeout=60)
        rows = claimer.beats()
    claimer.close()
    runs.close()
    took = [
        e for e in agentfsm_events.events if e.get("event") in ("durable_worker_claimed", "durable_takeover")
    ]
    assert [(e["event"], e.get("runs")) for e in took] == [
        ("durable_worker_claimed", None),
        ("durable_takeover", [run_id]),
    ]
    assert solo.taken_over == [run_id]
    assert [(b.worker_id, b.claimed_by) for b in rows] == [("solo", None)]  # registered again
    assert (str(result.stop_reason), result.steps) == ("max_steps", 12)
    done = calls(effects)
    assert len(done) == len(set(done)) >= 11, done
    # The claim stood still for dead_after_s (1.5 s) from solo's first look at it, a beat (0.1 s) after the
    # claim at most; then the takeover and the queue's polling. Generous here: the machine may be loaded.
    assert went_on < 10.0
    print(f"left claimed: the run's calls went on {went_on:.1f} s after the claim")


async def test_a_worker_that_claims_its_own_row_disowns_every_execution_it_has():
    """Its takeover puts all its runs back on the queue: the executions it has end at their next step, the
    ones the queue gives it afterwards go on."""
    from agentfsm.durable.fence import Fence

    now = [0.0]
    fence = Fence(0.5, clock=lambda: now[0])
    now[0] = 0.2
    fence.beaten(claimed=False)
    now[0] = 0.3
    running = fence.ticket()  # started after the last beat: a claim seen by a beat would leave it
    now[0] = 0.4
    fence.disown()
    now[0] = 0.45
    assert not await fence.admit(running) and await fence.admit(fence.ticket())
