"""A worker process for the durable tests: `Worker` over the agents of `durable_agents.py`.

    python durable_worker.py DB WORKER_ID [--queue Q] [--concurrency N] [--app-version V]
                             [--heartbeat S] [--dead-after S] [--park-after S]
                             [--die-taking-over WORKER]

Prints ``ready`` once it takes runs, then a JSON line per takeover event (a dead worker's runs
taken, or refused; this worker's own taken by another), and serves until killed (SIGTERM: stops cleanly).
A run whose spec has ``kill: step:K`` SIGKILLs this process right after the K-th step
of that run to complete (concurrent calls' steps complete in any order), when that step ran
here for real (0: before its first step), once per run (a marker file beside the run's
effects file says it happened). ``--die-taking-over WORKER``: once it has claimed WORKER's
row, it SIGKILLs itself before putting WORKER's runs back on the queue (a claimer that dies
half way).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path

import durable_agents

from agentfsm.durable import AgentSpec, Worker, engine

_PLANS: dict[str, tuple[int, Path]] = {}
"""Run id -> (the step after which to die, the marker file), set by the factory in the run."""


def _planning(factory):
    def build(spec: AgentSpec):
        from dbos import DBOS

        kill = spec.options.get("kill", "none")
        if kill.startswith("step:") and DBOS.workflow_id is not None:
            marker = Path(spec.options["effects"]).with_suffix(".killed-step")
            _PLANS[DBOS.workflow_id] = (int(kill.partition(":")[2]), marker)
        return factory(spec)

    return build


def _hook_steps() -> None:
    run = engine._Step.run
    taken: dict[str, int] = {}

    def die_if_planned(run_id: str, count: int) -> None:
        plan = _PLANS.get(run_id)
        if plan is not None and plan[0] == count and durable_agents._once(plan[1]):
            os.kill(os.getpid(), signal.SIGKILL)

    async def hooked(self, body):
        run_id = self.journal.run_id
        die_if_planned(run_id, 0)
        ran = False

        async def counted():
            nonlocal ran
            ran = True
            return await body()

        output = await run(self, counted)
        taken[run_id] = taken.get(run_id, 0) + 1  # replayed or not: its place among the steps completed
        if ran:
            die_if_planned(run_id, taken[run_id])
        return output

    engine._Step.run = hooked


def _die_taking_over(dead: str) -> None:
    take_over = Worker._take_over

    def dying(self: Worker, beat) -> None:
        if beat.worker_id == dead:
            os.kill(os.getpid(), signal.SIGKILL)
        take_over(self, beat)

    Worker._take_over = dying


class _Takeovers(logging.Handler):
    """Prints the worker's takeover events (taken, refused, claimed) on stdout, one JSON object a line."""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.msg
        if isinstance(message, dict) and str(message.get("event", "")).startswith(
            ("durable_takeover", "durable_worker_claimed")
        ):
            print(json.dumps(message, default=str), flush=True)


async def main(args: argparse.Namespace) -> None:
    _hook_steps()
    if args.die_taking_over:
        _die_taking_over(args.die_taking_over)
    logger = logging.getLogger("agentfsm")
    logger.addHandler(_Takeovers())
    logger.setLevel(logging.INFO)
    agents = {name: _planning(factory) for name, factory in durable_agents.AGENTS.items()}
    worker = Worker(
        args.db,
        agents=agents,
        queue=args.queue,
        concurrency=args.concurrency,
        worker_id=args.worker_id,
        app_version=args.app_version,
        heartbeat_s=args.heartbeat,
        dead_after_s=args.dead_after,
        polling_s=0.05,
        **({} if args.park_after is None else {"park_after_s": args.park_after}),
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with worker:
        print("ready", flush=True)
        await stop.wait()
    print(f"taken over: {' '.join(worker.taken_over)}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("worker_id")
    parser.add_argument("--queue", default="agentfsm")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--app-version", default=None)
    parser.add_argument("--heartbeat", type=float, default=0.5)
    parser.add_argument("--dead-after", type=float, default=2.0)
    parser.add_argument("--park-after", type=float, default=None)  # default: the Worker's
    parser.add_argument("--die-taking-over", default=None)
    asyncio.run(main(parser.parse_args(sys.argv[1:])))
