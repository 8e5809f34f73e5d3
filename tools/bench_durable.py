"""Benchmarks of durable runs (agentfsm.durable) on PostgreSQL, against the issue's two goals.

    .venv/bin/python tools/bench_durable.py [--db postgresql://...] [--json] [--quick]

- per-step overhead: one run at a time of an agent whose model (a function) and
  tool answer at once, 20 steps each; the time between two consecutive model
  calls inside a durable run (two recorded steps: the model call, whose record
  carries the call's start, and the tool call) against the same agent's plain `run()`, and
  the same durable run on a journal that records nothing (what agentfsm's side
  costs). Goal: the median overhead at most 5 ms a step. Beside it, the floor:
  a bare DBOS step (a no-op, recorded) on the same worker's DBOS, timed inside
  a workflow; an agent step with one call records two.
- takeover: two worker processes (this script, ``worker``; 4 runs at a time
  each, default heartbeat 1 s and dead after 5 s), four runs spread over both,
  one worker SIGKILLed; the time until each of its runs is held by the other
  worker again. Goal: at most 15 s.
- throughput: runs/s of one-tool runs across worker processes on one database
  (1 worker x 8 and 4 workers x 8, the same queue settings and polling), agentfsm's
  workers (the agent of `one_tool`, its model a function) side by side with bare
  DBOS workflows of as many steps on the same settings, taken in turns, and the CPU
  each worker process spent a run. Goal: agentfsm at least 0.9x of bare at 4 workers.

Without ``--db`` it uses AGENTFSM_POSTGRES_URL, else starts tools/postgres-env's
server. Each measurement uses a database of its own, dropped after.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, NoReturn

from agentfsm import LLMResponse, Terminate, ToolCallAgent, tool
from agentfsm.durable import AgentSpec, DurableRuns, Worker
from agentfsm.durable.run import durable_run
from agentfsm.messages import Role, ToolCall
from agentfsm.testing import FunctionLLM, ModelRequest, reply

ROOT = Path(__file__).resolve().parent.parent
STEPS = 20
GOAL_STEP_MS = 5.0
GOAL_TAKEOVER_S = 15.0
GOAL_THROUGHPUT = 0.9
THROUGHPUT_QUEUE = "bench-throughput"
THROUGHPUT_POLLING_S = 0.2


@tool
def noop(n: int) -> int:
    """Return `n`."""
    return n


@tool
async def pause(n: int) -> int:
    """Wait a quarter of a second, then return `n`."""
    await asyncio.sleep(0.25)
    return n


def stepping(spec: AgentSpec, marks: list[float] | None = None) -> ToolCallAgent:
    """Calls its tool once a step until its steps run out; `marks` gets the time of each model call."""
    name = str(spec.options.get("tool", "noop"))

    def script(request: ModelRequest) -> LLMResponse:
        if marks is not None:
            marks.append(time.perf_counter())
        done = sum(1 for m in request.messages if m.role is Role.TOOL)
        return reply(None, [ToolCall.create(f"c{done}", name, {"n": done})])

    steps = int(spec.options.get("steps", STEPS))
    tools = [noop if name == "noop" else pause, Terminate()]
    return ToolCallAgent(llm=FunctionLLM(script), tools=tools, max_steps=steps, name="bench")


def one_tool(spec: AgentSpec) -> ToolCallAgent:
    """One tool call, then the answer: the run the throughput section counts."""

    def script(request: ModelRequest) -> LLMResponse:
        if not any(m.role is Role.TOOL for m in request.messages):
            return reply(None, [ToolCall.create("c1", "noop", {"n": 1})])
        return reply(None, [ToolCall.create("c2", "terminate", {"status": "success"})])

    return ToolCallAgent(llm=FunctionLLM(script), tools=[noop, Terminate()], max_steps=4, name="one")


class _Unrecorded:
    """A step that records nothing."""

    async def run(self, body: Callable[[], Awaitable[Any]]) -> Any:
        return await body()


class _MemoryJournal:
    """A journal that keeps nothing: what the durable run itself costs a step, without the database."""

    @property
    def run_id(self) -> str:
        return "bench"

    def reserve(self, name: str) -> _Unrecorded:
        return _Unrecorded()

    async def receive(self, topic: str, timeout_s: float) -> Any:
        return None

    async def publish(self, key: str, value: Any) -> None:
        return None

    async def mark_parked(self, pause: int | None) -> None:
        return None

    async def leave(self) -> NoReturn:
        raise RuntimeError("a run on the memory journal never parks: it does not pause")


def _bare_workflow(times: list[float], count: int) -> Callable[[], Coroutine[Any, Any, None]]:
    """A workflow of `count` no-op steps, each one's time put in `times`: what DBOS costs a step.
    Registered before the worker launches (DBOS takes its workflows at launch)."""
    from dbos import DBOS

    async def nothing() -> int:
        return 0

    @DBOS.workflow(name="bench.bare_steps")
    async def bare() -> None:
        for _ in range(count):
            began = time.perf_counter()
            await DBOS.run_step_async({"name": "bare"}, nothing)
            times.append((time.perf_counter() - began) * 1000)

    return bare


async def _bare_steps(bare: Callable[[], Coroutine[Any, Any, None]]) -> None:
    from dbos import DBOS

    handle: Any = await DBOS.start_workflow_async(bare)
    await handle.get_result()


def _database(server: str) -> str:
    return f"{server}/agentfsm_bench_{uuid.uuid4().hex[:10]}"


def _drop(url: str) -> None:
    import psycopg

    server, _, name = url.rpartition("/")
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _gaps(marks: list[float]) -> list[float]:
    return [(b - a) * 1000 for a, b in itertools.pairwise(marks)]


async def per_step(server: str, runs_count: int) -> dict[str, Any]:
    """Median ms between two model calls, durable and plain, and their difference."""
    plain: list[float] = []
    for _ in range(runs_count):
        marks: list[float] = []
        await stepping(AgentSpec(agent="step"), marks).run("step")
        plain += _gaps(marks)
    unrecorded: list[float] = []
    for _ in range(runs_count):
        marks = []
        agents = {"step": functools.partial(stepping, marks=marks)}
        await durable_run(_MemoryJournal(), agents, "step", {"agent": "step", "options": {}})
        unrecorded += _gaps(marks)
    db = _database(server)
    durable: list[float] = []
    current: list[float] = []
    bare_times: list[float] = []
    bare = _bare_workflow(bare_times, STEPS * runs_count)
    try:
        async with Worker(db, agents={"step": lambda spec: stepping(spec, current)}):
            runs = DurableRuns(db)
            for _ in range(runs_count):
                current.clear()
                run_id = await runs.submit("step", "step")
                # Polled slowly: the client shares the worker's process (and its GIL) here only
                # because this is a benchmark; at 50 polls a second it added 1-2 ms CPU a step.
                await runs.result(run_id, wait=True, timeout=120, poll_s=0.25)
                durable += _gaps(current)
            runs.close()
            await _bare_steps(bare)
    finally:
        _drop(db)
    plain_ms, durable_ms = statistics.median(plain), statistics.median(durable)
    return {
        "steps_measured": len(durable),
        "plain_step_ms": round(plain_ms, 3),
        "durable_step_ms": round(durable_ms, 3),
        "overhead_ms": round(durable_ms - plain_ms, 3),
        "unrecorded_step_ms": round(statistics.median(unrecorded), 3),
        "durable_step_p90_ms": round(statistics.quantiles(durable, n=10)[-1], 3),
        "bare_dbos_step_ms": round(statistics.median(bare_times), 3),
        "dbos_steps_per_step": 2,
        "goal_ms": GOAL_STEP_MS,
    }


def _worker_process(db: str, worker_id: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, __file__, "worker", db, worker_id], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert child.stdout is not None
    if child.stdout.readline().strip() != "ready":
        child.kill()
        raise RuntimeError(f"worker {worker_id} did not start")
    return child


async def takeover(server: str) -> dict[str, Any]:
    """Seconds from a worker's SIGKILL until its runs are held by the other worker again."""
    db = _database(server)
    first = _worker_process(db, "bench-1")
    second = _worker_process(db, "bench-2")
    runs = DurableRuns(db)
    try:
        spec = AgentSpec(agent="step", options={"tool": "pause", "steps": 60})
        ids = [await runs.submit(f"run {i}", spec) for i in range(4)]
        while True:
            statuses = [await runs.status(i) for i in ids]
            if all(s.state == "running" for s in statuses):
                break
            await asyncio.sleep(0.05)
        # The worker holding more of the runs is killed (either may have taken them all).
        by_worker = {w: [s.run_id for s in statuses if s.worker == w] for w in ("bench-1", "bench-2")}
        victim, survivor = sorted(by_worker, key=lambda w: len(by_worker[w]), reverse=True)
        held = by_worker[victim]
        dead = first if victim == "bench-1" else second
        dead.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        dead.wait()
        moved: dict[str, float] = {}
        while len(moved) < len(held) and time.monotonic() - killed < 60:
            for run_id in held:
                status = await runs.status(run_id)
                if run_id not in moved and status.worker == survivor:
                    moved[run_id] = time.monotonic() - killed
            await asyncio.sleep(0.05)
        for run_id in ids:
            await runs.cancel(run_id)
    finally:
        runs.close()
        for child in (first, second):
            if child.poll() is None:
                child.terminate()
            child.wait(timeout=30)
        _drop(db)
    return {
        "runs_held": len(held),
        "resumed_after_s": round(max(moved.values()), 2) if len(moved) == len(held) else None,
        "heartbeat_s": 1.0,
        "dead_after_s": 5.0,
        "goal_s": GOAL_TAKEOVER_S,
    }


async def _serve(db: str, worker_id: str) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with Worker(db, agents={"step": stepping}, worker_id=worker_id, concurrency=4, polling_s=0.05):
        print("ready", flush=True)
        await stop.wait()


BARE_WORKFLOW = "bench.bare_run"


async def _serve_bare(db: str, worker_id: str, concurrency: int, steps: int) -> None:
    """A bare DBOS executor on the throughput queue: workflows of `steps` no-op steps, with the
    configuration agentfsm's engine gives DBOS (serializer, pool, polling)."""
    from dbos import DBOS, DBOSConfig, DBOSPortableJSONSerializer

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)

    async def nothing() -> int:
        return 0

    @DBOS.workflow(name=BARE_WORKFLOW)
    async def bare(task: str, spec: dict[str, Any]) -> dict[str, Any]:
        for _ in range(steps):
            await DBOS.run_step_async({"name": "bare"}, nothing)
        return {"output": task}

    config: DBOSConfig = {
        "name": "agentfsm",
        "system_database_url": db,
        "executor_id": worker_id,
        "application_version": "bench-bare",
        "serializer": DBOSPortableJSONSerializer(),
        "log_level": "WARNING",
        "notification_listener_polling_interval_sec": 0.2,
        "db_engine_kwargs": {"pool_pre_ping": False, "pool_use_lifo": True},
    }
    DBOS(config=config)
    DBOS.listen_queues([THROUGHPUT_QUEUE])
    await asyncio.to_thread(DBOS.launch)
    await DBOS.register_queue_async(
        THROUGHPUT_QUEUE,
        worker_concurrency=concurrency,
        polling_interval_sec=THROUGHPUT_POLLING_S,
        on_conflict="always_update",
    )
    _report_cpu("ready")
    await stop.wait()
    _report_cpu("cpu")
    await asyncio.to_thread(DBOS.destroy, destroy_registry=True)


async def _serve_agentfsm(db: str, worker_id: str, concurrency: int) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with Worker(
        db,
        agents={"one": one_tool},
        queue=THROUGHPUT_QUEUE,
        worker_id=worker_id,
        concurrency=concurrency,
        polling_s=THROUGHPUT_POLLING_S,
    ):
        _report_cpu("ready")
        await stop.wait()
        _report_cpu("cpu")


def _report_cpu(word: str) -> None:
    """`word` and the process's CPU seconds so far, on stdout, for the parent: once ready (its start,
    not counted) and once stopped."""
    times = os.times()
    print(f"{word} {times.user + times.system}", flush=True)


def _throughput_workers(
    kind: str, db: str, count: int, concurrency: int
) -> tuple[list[subprocess.Popen[str]], float]:
    """`count` worker processes of `kind`, each ready; and the CPU seconds their starts took."""
    children = []
    for n in range(count):
        child = subprocess.Popen(
            [sys.executable, __file__, f"throughput-{kind}", db, f"{kind}-{n}", str(concurrency)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        children.append(child)
    started = 0.0
    for child in children:
        assert child.stdout is not None
        word, _, cpu = child.stdout.readline().partition(" ")
        if word != "ready":
            for other in children:
                other.kill()
            raise RuntimeError(f"a {kind} worker did not start")
        started += float(cpu)
    return children, started


def _stopped_cpu(children: list[subprocess.Popen[str]]) -> float:
    """Stop the workers; the CPU seconds they spent in all."""
    total = 0.0
    for child in children:
        child.send_signal(signal.SIGTERM)
    for child in children:
        out, _ = child.communicate(timeout=60)
        for line in out.splitlines():
            if line.startswith("cpu "):
                total += float(line.split()[1])
    return total


def _steps_of_one_tool_run() -> int:
    """How many steps DBOS records for one `one_tool` run (two model calls, two tool calls; the trace
    goes with the run's output): the bare workflow takes as many."""
    return 4


async def _one_round(
    kind: str, server: str, runs_count: int, workers: int, concurrency: int
) -> dict[str, Any]:
    from dbos import DBOSClient, DBOSPortableJSONSerializer

    from agentfsm.durable.engine import WORKFLOW, migrate

    db = _database(server)
    migrate(db)
    children, started = _throughput_workers(kind, db, workers, concurrency)
    client = DBOSClient(
        system_database_url=db, serializer=DBOSPortableJSONSerializer(), application_name="agentfsm"
    )
    try:
        name = WORKFLOW if kind == "agentfsm" else BARE_WORKFLOW
        spec = AgentSpec(agent="one").to_json()
        began = time.perf_counter()
        options: Any = {"workflow_name": name, "queue_name": THROUGHPUT_QUEUE}
        for n in range(runs_count):
            client.enqueue(options, f"run {n}", spec)
        while True:
            done = client.list_workflows(
                status=["SUCCESS", "ERROR"], name=name, load_input=False, load_output=False
            )
            if len(done) >= runs_count:
                break
            await asyncio.sleep(0.05)
        took = time.perf_counter() - began
        failed = sum(1 for w in done if w.status != "SUCCESS")
        steps = len(client.list_workflow_steps(done[0].workflow_id))
    finally:
        client.destroy()
        cpu = _stopped_cpu(children) - started  # idle polling included, on both sides
        _drop(db)
    return {
        "runs_per_s": runs_count / took,
        "cpu_ms_per_run": cpu * 1000 / runs_count,
        "failed": failed,
        "steps": steps,
    }


async def throughput(server: str, runs_count: int, rounds: int) -> dict[str, Any]:
    """Runs/s of agentfsm's workers and of bare DBOS's, at 1 x 8 and 4 x 8, in alternating rounds
    (the machine is shared: a round of each kind, then again); the median of each."""
    found: dict[str, Any] = {}
    for workers in (1, 4):
        seen: dict[str, list[dict[str, Any]]] = {"bare": [], "agentfsm": []}
        for _ in range(rounds):
            for kind in ("bare", "agentfsm"):
                seen[kind].append(await _one_round(kind, server, runs_count, workers, 8))
        row: dict[str, Any] = {}
        for kind, measured in seen.items():
            row[f"{kind}_runs_per_s"] = round(statistics.median(m["runs_per_s"] for m in measured), 1)
            row[f"{kind}_cpu_ms_per_run"] = round(statistics.median(m["cpu_ms_per_run"] for m in measured), 2)
            row[f"{kind}_failed"] = sum(m["failed"] for m in measured)
            row[f"{kind}_steps_per_run"] = measured[0]["steps"]
            row[f"{kind}_rounds_runs_per_s"] = [round(m["runs_per_s"], 1) for m in measured]
        row["ratio"] = round(row["agentfsm_runs_per_s"] / row["bare_runs_per_s"], 3)
        found[f"{workers}x8"] = row
    found.update(runs=runs_count, rounds=rounds, bare_steps=_steps_of_one_tool_run(), goal=GOAL_THROUGHPUT)
    return found


def _server(given: str | None) -> str:
    url = given or os.environ.get("AGENTFSM_POSTGRES_URL")
    if not url:
        url = subprocess.run(
            [str(ROOT / "tools" / "postgres-env")], check=True, capture_output=True, text=True
        ).stdout.strip()
    return url.rsplit("/", 1)[0]


async def main(args: argparse.Namespace) -> dict[str, Any]:
    server = _server(args.db)
    runs = args.runs or (120 if args.quick else 400)
    rate = functools.partial(throughput, server, runs, args.rounds or (1 if args.quick else 3))
    if args.only == "throughput":
        return {"throughput": await rate()}
    return {
        "per_step": await per_step(server, 3 if args.quick else 10),
        "takeover": await takeover(server),
        "throughput": await rate(),
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        asyncio.run(_serve(sys.argv[2], sys.argv[3]))
        sys.exit(0)
    if sys.argv[1:2] == ["throughput-agentfsm"]:
        asyncio.run(_serve_agentfsm(sys.argv[2], sys.argv[3], int(sys.argv[4])))
        sys.exit(0)
    if sys.argv[1:2] == ["throughput-bare"]:
        asyncio.run(_serve_bare(sys.argv[2], sys.argv[3], int(sys.argv[4]), _steps_of_one_tool_run()))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="a PostgreSQL URL (its database part is ignored)")
    parser.add_argument("--json", action="store_true", help="the numbers as one JSON object on stdout")
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--only", choices=("throughput",), help="only this section")
    parser.add_argument("--runs", type=int, help="throughput: runs a round (default 400, --quick 120)")
    parser.add_argument("--rounds", type=int, help="throughput: rounds of each side (default 3, --quick 1)")
    numbers = asyncio.run(main(parser.parse_args()))
    if parser.parse_args().json:
        print(json.dumps(numbers))
    else:
        step, moved = numbers.get("per_step"), numbers.get("takeover")
        if step is not None:
            print(
                f"per step: plain {step['plain_step_ms']} ms, durable {step['durable_step_ms']} ms "
                f"(p90 {step['durable_step_p90_ms']}), overhead {step['overhead_ms']} ms "
                f"(goal <= {GOAL_STEP_MS} ms, {step['steps_measured']} steps); without the database "
                f"{step['unrecorded_step_ms']} ms"
            )
            print(
                f"floor: a bare DBOS step {step['bare_dbos_step_ms']} ms on this database; an agent step "
                f"with one call records {step['dbos_steps_per_step']}"
            )
        if moved is not None:
            print(
                f"takeover: {moved['runs_held']} runs of the killed worker held again after "
                f"{moved['resumed_after_s']} s (goal <= {GOAL_TAKEOVER_S} s)"
            )
        rate = numbers["throughput"]
        print(
            f"throughput: {rate['runs']} one-tool runs, {rate['rounds']} round(s) each, "
            f"bare DBOS runs {rate['bare_steps']} steps (goal >= {GOAL_THROUGHPUT}x of bare at 4x8)"
        )
        print(
            f"{'workers':>8} {'agentfsm/s':>11} {'bare/s':>8} {'ratio':>6} "
            f"{'cpu ms/run agentfsm':>20} {'bare':>6}"
        )
        for label in ("1x8", "4x8"):
            row = rate[label]
            print(
                f"{label:>8} {row['agentfsm_runs_per_s']:>11} {row['bare_runs_per_s']:>8} {row['ratio']:>6} "
                f"{row['agentfsm_cpu_ms_per_run']:>20} {row['bare_cpu_ms_per_run']:>6}"
            )
