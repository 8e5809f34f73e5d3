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
from typing import Any

from agentfsm import LLMResponse, Terminate, ToolCallAgent, tool
from agentfsm.durable import AgentSpec, DurableRuns, Worker
from agentfsm.durable.run import durable_run
from agentfsm.messages import Role, ToolCall
from agentfsm.testing import FunctionLLM, ModelRequest, reply

ROOT = Path(__file__).resolve().parent.parent
STEPS = 20
GOAL_STEP_MS = 5.0
GOAL_TAKEOVER_S = 15.0


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


def _server(given: str | None) -> str:
    url = given or os.environ.get("AGENTFSM_POSTGRES_URL")
    if not url:
        url = subprocess.run(
            [str(ROOT / "tools" / "postgres-env")], check=True, capture_output=True, text=True
        ).stdout.strip()
    return url.rsplit("/", 1)[0]


async def main(args: argparse.Namespace) -> dict[str, Any]:
    server = _server(args.db)
    return {
        "per_step": await per_step(server, 3 if args.quick else 10),
        "takeover": await takeover(server),
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        asyncio.run(_serve(sys.argv[2], sys.argv[3]))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="a PostgreSQL URL (its database part is ignored)")
    parser.add_argument("--json", action="store_true", help="the numbers as one JSON object on stdout")
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    numbers = asyncio.run(main(parser.parse_args()))
    if parser.parse_args().json:
        print(json.dumps(numbers))
    else:
        step, moved = numbers["per_step"], numbers["takeover"]
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
        print(
            f"takeover: {moved['runs_held']} runs of the killed worker held again after "
            f"{moved['resumed_after_s']} s (goal <= {GOAL_TAKEOVER_S} s)"
        )
