"""Durable runs killed with SIGKILL at every step boundary and inside each tool call, on PostgreSQL.

Every run of the ``record`` agent (durable_agents.py) is submitted to one
queue; a worker process (durable_worker.py, always the same worker id, so a new
process recovers the runs the killed one held) dies at each run's planned
point and is started again until all runs ended. Each run's result then equals
the uninterrupted run's, a run killed between steps has its trace too, and the
tool's own counter (its effects file) shows each call ran at most once.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from durable_agents import BATCH_TASK, TASK
from postgres_support import pg_url, postgres_server  # noqa: F401 (fixtures)

from agentfsm.durable import AgentSpec, DurableRuns

HERE = Path(__file__).parent
STEPS = 7
"""Steps of one run (step layout 2): three model calls and four tool calls, each call's start carried by the
step just before it (its reply's model step, or the previous call's tool step)."""


def start_worker(db: str, worker_id: str, *extra: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, str(HERE / "durable_worker.py"), db, worker_id, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=HERE,
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    if line.strip() != "ready":
        child.kill()
        raise AssertionError(
            f"the worker did not start: {line!r} {child.stderr.read() if child.stderr else ''}"
        )
    return child


def stop_worker(child: subprocess.Popen[str]) -> str:
    if child.poll() is None:
        child.terminate()
    out, _ = child.communicate(timeout=30)
    return out


def comparable(result: dict, run_id: str) -> dict:
    return {**result, "run_id": None} if result["run_id"] == run_id else result


def trace_records(text: str, run_id: str) -> list[dict]:
    """The trace without what differs between any two runs (ids, clocks, durations)."""
    timing = {"duration_s", "duration_ms", "started_at", "written_at", "at", "elapsed_s", "timestamp"}

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in timing and k != "run_id"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return None if value == run_id else value

    return [strip(json.loads(line)) for line in text.splitlines() if line.strip()]


STARTED = {1: "1", 2: "2", 4: "3"}
"""The steps that carry a call's start, and that call's number: a kill right after one lands inside the
call (started, not completed), so the call is reported interrupted, never run again. (Step 6 carries the
start of `terminate`, which is idempotent: it runs again.)"""


def interrupted_call(plan: str) -> str | None:
    """The call a plan kills inside of before its effect, if it does."""
    kind, _, arg = plan.partition(":")
    if kind == "before":
        return arg
    return STARTED.get(int(arg)) if kind == "step" else None


async def run_plans(
    db: str, plans: list[str], task: str, agent: str, options_of: Callable[[int, str], dict]
) -> tuple[DurableRuns, dict[str, str], int]:
    """Each plan's run of `agent`, on two workers each on a queue of its own (the kills of one do not
    touch the other), one run at a time (so a kill lands in the run it was planned for), a new process of
    the same worker started after each kill. The runs' client, each plan's run id, the workers started."""
    chains = ("w1", "w2")
    runs = DurableRuns(db)
    ids: dict[str, str] = {}
    starts = 0

    async def chain(name: str, mine: list[tuple[int, str]]) -> None:
        nonlocal starts
        worker = await asyncio.to_thread(start_worker, db, name, "--concurrency", "1", "--queue", name)
        starts += 1
        try:
            for index, plan in mine:
                spec = AgentSpec(agent=agent, options={**options_of(index, plan), "kill": plan})
                ids[plan] = run_id = await runs.submit(task, spec, queue=name)
                deadline = time.monotonic() + 60
                while not (await runs.status(run_id)).ended:
                    assert time.monotonic() < deadline, (plan, (await runs.status(run_id)).state)
                    if (
                        worker.poll() is not None
                    ):  # killed as planned: a new process of the same worker goes on
                        assert worker.returncode == -9, worker.stderr.read() if worker.stderr else ""
                        worker = await asyncio.to_thread(
                            start_worker, db, name, "--concurrency", "1", "--queue", name
                        )
                        starts += 1
                    await asyncio.sleep(0.05)
        finally:
            stop_worker(worker)

    numbered = list(enumerate(plans))
    await asyncio.gather(*(chain(name, numbered[i :: len(chains)]) for i, name in enumerate(chains)))
    return runs, ids, starts - len(chains)


async def test_runs_killed_at_every_step_and_inside_every_call_end_as_uninterrupted_ones(
    pg_url,  # noqa: F811 (the fixture)
    tmp_path,
):
    plans = ["none"] + [f"step:{k}" for k in range(STEPS + 1)]
    plans += [f"{when}:{n}" for when in ("before", "after") for n in (1, 2, 3)]

    def options(index: int, plan: str) -> dict:
        return {"effects": str(tmp_path / f"effects-{index}.txt")}

    runs, ids, kills = await run_plans(pg_url, plans, TASK, "record", options)
    assert kills == len(plans) - 1  # every planned kill happened
    reference_id = ids["none"]
    reference = (await runs.status(reference_id)).result.model_dump(mode="json")
    reference_trace = trace_records(await runs.trace(reference_id), reference_id)
    assert reference["stop_reason"] == "terminated" and reference["steps"] == 3
    for index, plan in enumerate(plans):
        run_id = ids[plan]
        result = (await runs.status(run_id)).result.model_dump(mode="json")
        assert comparable(result, run_id) == {**reference, "run_id": None}, plan
        effects = (tmp_path / f"effects-{index}.txt").read_text().split()
        assert len(effects) == len(set(effects)), f"{plan}: a call ran twice: {effects}"
        missing = interrupted_call(plan)
        assert sorted(effects) == sorted({"1", "2", "3"} - {missing}), plan
        trace = trace_records(await runs.trace(run_id), run_id)
        if missing is None and not plan.startswith("after:"):
            assert trace == reference_trace, plan
        else:  # the interrupted call's observation says so, instead of its result
            assert "the run was interrupted while `record` ran" in json.dumps(trace), plan
    runs.close()


async def test_a_call_run_after_its_approval_has_a_start_record_of_its_own_that_a_kill_respects(
    pg_url,  # noqa: F811 (the fixture)
    tmp_path,
):
    """The approval agent's run records: the model call (1), the parking setting at the pause (2), then,
    after the decision, the call's own start (3), the call (4), the model call (5), `terminate` (6).
    Killed right after step 1 the call has not started: it runs once, after its approval. Killed right
    after step 3 it has: the worker that goes on reports it interrupted and never runs it."""
    runs = DurableRuns(pg_url)
    worker = await asyncio.to_thread(start_worker, pg_url, "wa", "--concurrency", "1", "--queue", "wa")
    outcomes = {}
    try:
        for kill, effects_expected in ((1, ["7"]), (3, [])):
            effects = tmp_path / f"approved-{kill}.txt"
            options = {"effects": str(effects), "kill": f"step:{kill}"}
            run_id = await runs.submit("record 7", AgentSpec(agent="approval", options=options), queue="wa")
            approved, deaths = False, 0
            deadline = time.monotonic() + 60
            while not (status := await runs.status(run_id)).ended:
                assert time.monotonic() < deadline, (kill, status.state)
                if worker.poll() is not None:
                    assert worker.returncode == -9, worker.stderr.read() if worker.stderr else ""
                    deaths += 1
                    worker = await asyncio.to_thread(
                        start_worker, pg_url, "wa", "--concurrency", "1", "--queue", "wa"
                    )
                elif status.state == "paused" and not approved:
                    await runs.approve(run_id, "c1")
                    approved = True
                await asyncio.sleep(0.05)
            result = status.result
            assert result is not None and deaths == 1, (kill, deaths)
            outcomes[kill] = (str(result.stop_reason), result.steps)
            assert (effects.read_text().split() if effects.exists() else []) == effects_expected, kill
            interrupted = "the run was interrupted while `record` ran" in (await runs.trace(run_id) or "")
            assert interrupted == (kill == 3), kill
    finally:
        stop_worker(worker)
        runs.close()
    assert outcomes == {1: ("terminated", 2), 3: ("terminated", 2)}


BATCH_STEPS = 6
"""Steps of one run of the ``batch`` agent: its model call, whose record carries the starts of the three
calls it asks for, the three calls' tool steps (run together, completing in call order here), the next model
call, and `terminate`."""
GAPS = [0.0, 0.3, 0.6]
"""``mark``'s delays once all three calls are inside: p1 finishes first, p2 0.3 s later, p3 0.3 s after
that, so a kill inside one call lands in the later ones too, and after the earlier ones were recorded."""


def kept(plan: str) -> set[int]:
    """The calls of the batch whose result a run killed by `plan` keeps (recorded before the kill); the
    others are reported interrupted, and ran at most once."""
    kind, _, arg = plan.partition(":")
    if kind in ("before", "after"):
        return set(range(1, int(arg)))
    if kind == "step" and 1 <= int(arg) <= 3:  # after the model step (1), after p1's (2), after p2's (3)
        return set(range(1, int(arg)))
    return {1, 2, 3}  # the kill lands outside every call of the batch


async def test_runs_killed_around_and_inside_a_batch_of_concurrent_calls_run_no_call_twice(
    pg_url,  # noqa: F811 (the fixture)
    tmp_path,
):
    plans = ["none"] + [f"step:{k}" for k in range(BATCH_STEPS + 1)]
    plans += [f"{when}:{n}" for when in ("before", "after") for n in (1, 2, 3)]

    def options(index: int, plan: str) -> dict:
        return {"effects": str(tmp_path / f"effects-{index}.txt"), "delays": GAPS}

    runs, ids, kills = await run_plans(pg_url, plans, BATCH_TASK, "batch", options)
    assert kills == len(plans) - 1  # every planned kill happened
    reference_id = ids["none"]
    reference = (await runs.status(reference_id)).result.model_dump(mode="json")
    reference_trace = trace_records(await runs.trace(reference_id), reference_id)
    assert reference["stop_reason"] == "terminated" and reference["steps"] == 2
    for index, plan in enumerate(plans):
        run_id = ids[plan]
        result = (await runs.status(run_id)).result.model_dump(mode="json")
        assert comparable(result, run_id) == {**reference, "run_id": None}, plan
        written = tmp_path / f"effects-{index}.txt"
        effects = [int(n) for n in written.read_text().split()] if written.exists() else []
        assert len(effects) == len(set(effects)), f"{plan}: a call ran twice: {effects}"
        killed_after = {int(plan.partition(":")[2])} if plan.startswith("after:") else set()
        assert set(effects) == kept(plan) | killed_after, (plan, effects)
        trace = trace_records(await runs.trace(run_id), run_id)
        observed = {r["call_id"]: r["observation"] for r in trace if r["kind"] == "tool"}
        for n in (1, 2, 3):
            if n in kept(plan):
                assert observed[f"p{n}"] == f"Observed output of cmd `mark` executed:\nmarked {n}", (plan, n)
            else:
                assert "the run was interrupted while `mark` ran" in observed[f"p{n}"], (plan, n)
        if kept(plan) == {1, 2, 3}:
            assert trace == reference_trace, plan
    runs.close()
