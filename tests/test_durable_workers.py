"""Several workers on one queue, on PostgreSQL: a killed worker's runs are finished by another, within a
bound; a worker of another application version refuses them and says which version can finish them; a
queue's rate limit holds."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time

from durable_agents import AGENTS, TASK
from postgres_support import pg_url, postgres_server  # noqa: F401 (fixtures)
from test_durable_crash import HERE, start_worker, stop_worker

from agentfsm.durable import AgentSpec, DurableRuns, Worker
from agentfsm.durable.heartbeat import Heartbeats

TAKEOVER_BOUND_S = 15.0
"""The issue's goal: a dead worker's runs go on within 15 s (here: 2 s without a beat, then the queue)."""


STEPS_LONG = 24


def start_workers(db: str, *workers: tuple[str, ...]) -> list[subprocess.Popen[str]]:
    """Start several worker processes at once (each `(worker_id, *options)`), and wait until all are ready."""
    children = [
        subprocess.Popen(
            [sys.executable, str(HERE / "durable_worker.py"), db, *worker],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=HERE,
        )
        for worker in workers
    ]
    for child in children:
        assert child.stdout is not None
        line = child.stdout.readline()
        if line.strip() != "ready":
            for other in children:
                other.kill()
            raise AssertionError(
                f"a worker did not start: {line!r} {child.stderr.read() if child.stderr else ''}"
            )
    return children


async def test_a_killed_workers_runs_are_finished_by_another(pg_url, tmp_path):  # noqa: F811
    runs = DurableRuns(pg_url)
    w1 = start_worker(pg_url, "w1", "--concurrency", "3")
    w2 = start_worker(pg_url, "w2", "--concurrency", "3")
    w3 = None
    try:
        ids = []
        for i in range(6):
            options = {"effects": str(tmp_path / f"effects-{i}.txt"), "steps": 8, "delay": 0.25}
            ids.append(await runs.submit(f"count {i}", AgentSpec(agent="slow", options=options)))
        deadline = time.monotonic() + 30
        while True:
            statuses = [await runs.status(i) for i in ids]
            if all(s.state == "running" for s in statuses):
                break
            assert time.monotonic() < deadline, [s.state for s in statuses]
            await asyncio.sleep(0.05)
        held = [s.run_id for s in statuses if s.worker == "w1"]
        assert len(held) == 3 and {s.worker for s in statuses} == {"w1", "w2"}  # 3 at a time, each
        # Another release watches too (quicker to call a worker dead, so it sees w1 die before w2 claims it);
        # the queue is empty by now, and it never takes runs of another version.
        w3 = start_worker(
            pg_url, "w3", "--app-version", "another-release", "--heartbeat", "0.2", "--dead-after", "1"
        )
        w1.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        w1.wait()
        moved: dict[str, float] = {}
        while len(moved) < len(held):
            for run_id in held:
                status = await runs.status(run_id)
                if run_id not in moved and status.worker == "w2" and status.state in ("running", "finished"):
                    moved[run_id] = time.monotonic() - killed_at
            assert time.monotonic() - killed_at < TAKEOVER_BOUND_S, moved
            await asyncio.sleep(0.05)
        results = [await runs.result(i, wait=True, timeout=60) for i in ids]
        assert {(await runs.status(i)).worker for i in ids} == {"w2"}
        print(f"takeover: w1's runs going on again on w2 after {max(moved.values()):.1f} s")
    finally:
        out2 = stop_worker(w2)
        out3 = stop_worker(w3) if w3 is not None else ""
        stop_worker(w1)
        runs.close()
    assert [(str(r.state), str(r.stop_reason), r.steps) for r in results] == [
        ("FINISHED", "max_steps", 8)
    ] * 6
    taken = [json.loads(line) for line in out2.splitlines() if line.startswith("{")]
    assert [(t["event"], t["dead"], sorted(t["runs"])) for t in taken] == [
        ("durable_takeover", "w1", sorted(held))
    ]
    # (Under load, w3's short bound may also take a late beat of w2's for a death: a refusal too.)
    refused = {
        json.loads(line)["dead"]: json.loads(line) for line in out3.splitlines() if line.startswith("{")
    }
    assert refused["w1"]["event"] == "durable_takeover_refused"
    assert "start a worker of version 'agentfsm-" in refused["w1"]["reason"]
    for i in range(6):  # each call ran at most once; one in flight when w1 died is reported interrupted
        effects = (tmp_path / f"effects-{i}.txt").read_text().split()
        assert len(effects) == len(set(effects)) and len(effects) >= 7, effects


async def test_a_claimer_killed_before_it_put_the_runs_back_leaves_them_to_another(pg_url, tmp_path):  # noqa: F811
    """w1 dies; w2 (the quickest to call it dead) claims its row and is SIGKILLed before it puts w1's runs
    back on the queue, so the claim stays and the runs stay parked on w1's id. w3 and w4 see the claim
    stand still (count and claimer) for their `dead_after_s`; one of them wins it again and puts the runs
    back, and they are finished, each call at most once. Bound: w2's 1 s and a beat to claim, then w3's
    and w4's 3 s and a beat (they see the claim a beat after it), then the queue: about 5 s."""
    runs = DurableRuns(pg_url)
    w1 = start_worker(pg_url, "w1", "--concurrency", "3")
    others: dict[str, subprocess.Popen[str]] = {}
    w2 = None
    try:
        ids = []
        for i in range(
            3
        ):  # long enough (24 calls of 0.4 s) to outlast three workers' starts and the takeover
            options = {"effects": str(tmp_path / f"effects-{i}.txt"), "steps": STEPS_LONG, "delay": 0.4}
            ids.append(await runs.submit(f"count {i}", AgentSpec(agent="slow", options=options)))
        deadline = time.monotonic() + 30
        while [((s := await runs.status(i)).state, s.worker) for i in ids] != [("running", "w1")] * 3:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        # The queue is empty now: w2, w3 and w4 hold no runs. They beat often (0.2 s), so none of them
        # is taken for dead by w2's short bound. Started side by side, to be quick.
        w2, others["w3"], others["w4"] = start_workers(
            pg_url,
            ("w2", "--heartbeat", "0.2", "--dead-after", "1", "--die-taking-over", "w1"),
            ("w3", "--heartbeat", "0.2", "--dead-after", "3"),
            ("w4", "--heartbeat", "0.2", "--dead-after", "3"),
        )
        w1.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        w1.wait()
        assert w2.wait(timeout=TAKEOVER_BOUND_S) == -signal.SIGKILL  # it claimed w1, then died
        claimer_died = time.monotonic() - killed_at
        heartbeats = Heartbeats(pg_url)
        try:
            claims = {beat.worker_id: beat.claimed_by for beat in heartbeats.beats()}
        finally:
            heartbeats.close()
        assert claims["w1"] == "w2"
        parked = [await runs.status(i) for i in ids]
        assert [(s.state, s.worker) for s in parked] == [("running", "w1")] * 3  # nobody put them back
        moved: dict[str, float] = {}
        while len(moved) < len(ids):
            for run_id in ids:
                status = await runs.status(run_id)
                if (
                    run_id not in moved
                    and status.worker in others
                    and status.state in ("running", "finished")
                ):
                    moved[run_id] = time.monotonic() - killed_at
            assert time.monotonic() - killed_at < TAKEOVER_BOUND_S, moved
            await asyncio.sleep(0.05)
        results = [await runs.result(i, wait=True, timeout=60) for i in ids]
        print(
            f"claimer killed: w2 claimed w1 and died {claimer_died:.1f} s after w1, "
            f"w1's runs going on again after {max(moved.values()):.1f} s"
        )
    finally:
        outs = {name: stop_worker(worker) for name, worker in others.items()}
        if w2 is not None:
            stop_worker(w2)
        stop_worker(w1)
        runs.close()
    assert [(str(r.state), str(r.stop_reason), r.steps) for r in results] == [
        ("FINISHED", "max_steps", STEPS_LONG)
    ] * 3
    taken = [json.loads(line) for out in outs.values() for line in out.splitlines() if line.startswith("{")]
    # One of w3 and w4 won w1's claim again and put its runs back once; one of them took w2's empty row.
    assert sorted((t["event"], t["dead"], sorted(t["runs"])) for t in taken) == [
        ("durable_takeover", "w1", sorted(ids)),
        ("durable_takeover", "w2", []),
    ]
    for i in range(3):  # each call ran at most once; one in flight when w1 died is reported interrupted
        effects = (tmp_path / f"effects-{i}.txt").read_text().split()
        assert len(effects) == len(set(effects)) and len(effects) >= STEPS_LONG - 1, effects


async def test_a_worker_taken_for_dead_while_alive_runs_no_call_twice(pg_url, tmp_path):  # noqa: F811
    """The worker running the run is frozen (SIGSTOP: its heartbeat too) in the middle of it; the other
    takes the run over and finishes it; the frozen one wakes: the call it was in may finish there, and
    nothing else of the run runs on it again."""
    runs = DurableRuns(pg_url)
    effects = tmp_path / "effects.txt"
    workers = {name: start_worker(pg_url, name, "--concurrency", "1") for name in ("w1", "w2")}
    try:
        options = {"effects": str(effects), "steps": 5, "delay": 1.0, "pids": True}
        run_id = await runs.submit("count", AgentSpec(agent="slow", options=options))
        deadline = time.monotonic() + 30
        while not effects.exists():
            assert time.monotonic() < deadline and (await runs.status(run_id)).state in ("queued", "running")
            await asyncio.sleep(0.02)
        holder = (await runs.status(run_id)).worker
        assert holder in workers
        taker = "w2" if holder == "w1" else "w1"
        frozen = workers[holder]
        await asyncio.sleep(0.4)  # into the next call's 1 s (under load, wherever it is by then)
        frozen.send_signal(signal.SIGSTOP)
        frozen_at = time.monotonic()
        before = effects.read_text().split()
        while (await runs.status(run_id)).worker != taker:
            assert time.monotonic() - frozen_at < TAKEOVER_BOUND_S
            await asyncio.sleep(0.05)
        frozen.send_signal(signal.SIGCONT)  # alive again, after it was taken for dead
        result = await runs.result(run_id, wait=True, timeout=60)
        await asyncio.sleep(1.5)  # time for the woken worker to do whatever it would still do
        status = await runs.status(run_id)
    finally:
        outs = {name: stop_worker(worker) for name, worker in workers.items()}
        runs.close()
    assert (str(result.stop_reason), result.steps, status.worker) == ("max_steps", 5, taker)
    done = effects.read_text().split()
    assert len(done) == len(set(done)), f"a call ran twice: {done}"
    in_flight = str(len(before) + 1)  # the call the freeze may have landed in
    assert set(done) >= {"1", "2", "3", "4", "5"} - {in_flight}, (before, done)
    by = [line.split() for line in effects.with_suffix(".pids").read_text().splitlines()]
    on_frozen = {n for n, pid in by if int(pid) == frozen.pid}
    assert on_frozen <= {*before, in_flight}, (before, by)  # after waking: at most the call it was in
    claimed = [json.loads(line)["event"] for line in outs[holder].splitlines() if line.startswith("{")]
    assert claimed == ["durable_worker_claimed"], outs[holder]
    print(f"taken for dead while alive: frozen after calls {before}, then ran {sorted(on_frozen)} in all")


async def test_a_queues_rate_limit_holds(pg_url, tmp_path):  # noqa: F811
    """At most 3 runs start per second: 9 runs take three windows. The windows are read where the limiter
    keeps them, DBOS's claim stamps on the database's clock; the agents' factory, called a moment after
    each claim (a moment that varies with the machine's load), sees the same three groups.
    (On SQLite, DBOS's limiter lets a second window start early: measured 0.4 s instead of 1.)"""
    import psycopg

    db = pg_url
    starts: list[float] = []

    def counted(spec: AgentSpec):
        starts.append(time.monotonic())
        return AGENTS["record"](spec)

    async with Worker(db, agents={"record": counted}, rate_limit=(3, 1.0), concurrency=9, polling_s=0.05):
        runs = DurableRuns(db)
        spec = lambda i: AgentSpec(agent="record", options={"effects": str(tmp_path / f"e{i}.txt")})  # noqa: E731
        ids = [await runs.submit(TASK, spec(i)) for i in range(9)]
        for run_id in ids:
            await runs.result(run_id, wait=True, timeout=30)
        runs.close()
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT started_at_epoch_ms FROM dbos.workflow_status WHERE workflow_uuid = ANY(%s)", (ids,)
        ).fetchall()
    claimed = sorted(ms for (ms,) in rows)
    assert len(claimed) == 9
    assert all(sum(1 for t in claimed if start <= t < start + 1000) <= 3 for start in claimed), [
        t - claimed[0] for t in claimed
    ]
    assert claimed[-1] - claimed[0] >= 2000
    times = sorted(starts)
    assert len(times) == 9
    assert times[-1] - times[0] >= 1.0  # three groups, not one burst
