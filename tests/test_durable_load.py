"""200 durable runs over a loopback model (0.1 s a reply) across two workers on PostgreSQL: none lost, none
run twice, the queue's concurrency limit never exceeded (counted by the model), and the throughput beside
plain asyncio in one process (printed; speed goals live in tools/bench_durable.py)."""

from __future__ import annotations

import asyncio
import time

from durable_agents import remote_agent
from postgres_support import pg_url, postgres_server  # noqa: F401 (fixtures)
from slow_model_server import SlowModelServer
from test_durable_crash import start_worker, stop_worker

from agentfsm.durable import AgentSpec, DurableRuns

RUNS = 200
CONCURRENCY = 10
"""Runs at a time per worker (two workers)."""


async def test_two_hundred_runs_across_two_workers(pg_url):  # noqa: F811
    server = SlowModelServer(delay=0.1)
    base = await server.start()
    try:
        await _two_hundred_runs(pg_url, server, base)
    finally:
        await server.stop()


async def _two_hundred_runs(db: str, server: SlowModelServer, base: str) -> None:
    workers = [start_worker(db, f"load-{i}", "--concurrency", str(CONCURRENCY)) for i in range(2)]
    runs = DurableRuns(db)
    try:
        spec = AgentSpec(agent="remote", options={"api_base": base})
        started = time.monotonic()
        ids = await asyncio.gather(*(runs.submit(f"task {i}", spec) for i in range(RUNS)))
        results = [await runs.result(i, wait=True, timeout=120, poll_s=0.2) for i in ids]
        durable_s = time.monotonic() - started
        statuses = [await runs.status(i) for i in ids]
    finally:
        for worker in workers:
            stop_worker(worker)
        runs.close()
    durable_most = server.most_in_flight
    assert len(set(ids)) == RUNS
    assert all(r is not None and str(r.stop_reason) == "final_answer" and r.output == "done" for r in results)
    assert {s.worker for s in statuses} == {"load-0", "load-1"}  # both workers took runs
    # Each run asked the model exactly twice (its call, then its answer): none lost, none run twice.
    assert server.requests == {f"task {i}": 2 for i in range(RUNS)}
    assert 2 <= durable_most <= 2 * CONCURRENCY, durable_most

    server.requests.clear()
    server.most_in_flight = 0
    gate = asyncio.Semaphore(2 * CONCURRENCY)

    async def plain(i: int) -> None:
        async with gate:
            await remote_agent(spec).run(f"task {i}")

    started = time.monotonic()
    await asyncio.gather(*(plain(i) for i in range(RUNS)))
    plain_s = time.monotonic() - started
    print(
        f"\n{RUNS} runs, {2 * CONCURRENCY} at a time, 0.1 s a reply: two durable workers {durable_s:.1f} s "
        f"({RUNS / durable_s:.0f} runs/s, at most {durable_most} model calls at once), "
        f"plain asyncio in one process {plain_s:.1f} s ({RUNS / plain_s:.0f} runs/s)"
    )
