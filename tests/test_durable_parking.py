"""A paused durable run leaves its worker's place (it parks) after `park_after_s` without a decision, and a
decision puts it back on its queue, where a worker replays it to its pause and goes on; on SQLite and on
PostgreSQL. So one approval left waiting does not starve a worker of ``concurrency=1``."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from durable_agents import repeat_agent
from postgres_support import either_db, pg_url, postgres_server  # noqa: F401 (fixtures)

from agentfsm.cli.parser import build_parser
from agentfsm.durable import AgentSpec, DurableRuns, RunStatus, Worker
from agentfsm.errors import WrongPhaseError, WrongValueError

AGENTS = {"repeat": repeat_agent}


def spec(effects: Path, *, approval: bool, calls: int = 1) -> AgentSpec:
    return AgentSpec(agent="repeat", options={"effects": str(effects), "approval": approval, "calls": calls})


@pytest.fixture
def db(either_db: str) -> str:  # noqa: F811 (the fixture)
    """SQLite, then PostgreSQL."""
    return either_db


@pytest.fixture
def dbos_lines() -> AsyncIterator[list[logging.LogRecord]]:
    """What DBOS logs at WARNING and above during the test."""
    lines: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lines.append  # type: ignore[method-assign]
    logger = logging.getLogger("dbos")
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)


async def settled(runs: DurableRuns, run_id: str, done: Callable[[RunStatus], bool]) -> RunStatus:
    for _ in range(400):
        status = await runs.status(run_id)
        if done(status):
            return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} is {status.state} (parked: {status.parked})")


def parked(status: RunStatus) -> bool:
    return status.state == "paused" and status.parked


async def test_a_parked_run_leaves_its_place_and_goes_on_at_each_decision(
    db: str, tmp_path: Path, dbos_lines: list[logging.LogRecord]
) -> None:
    waiting, other = tmp_path / "waiting.txt", tmp_path / "other.txt"
    async with Worker(db, agents=AGENTS, worker_id="one", concurrency=1, polling_s=0.05, park_after_s=0.3):
        runs = DurableRuns(db)
        try:
            paused = await runs.submit("record twice", spec(waiting, approval=True, calls=2))
            first = await settled(runs, paused, parked)
            assert (first.pause, [c.id for c in first.pending_approval]) == (1, ["call_1"])
            # The worker's only place is free: a run submitted now runs to its end meanwhile.
            free = await runs.submit("record once", spec(other, approval=False))
            result = await runs.result(free, wait=True, timeout=20)
            assert result is not None and str(result.stop_reason) == "terminated"
            assert (await runs.status(paused)).parked and not waiting.exists()

            await runs.approve(paused, "call_1")  # back on the queue; it replays to pause 1, goes on
            second = await settled(runs, paused, lambda s: parked(s) and s.pause == 2)
            assert [json.loads(c.arguments) for c in second.pending_approval] == [{"n": 2}]
            assert waiting.read_text().split() == ["1"]
            await runs.approve(paused, "call_1")
            result = await runs.result(paused, wait=True, timeout=20)
            assert result is not None and (str(result.stop_reason), result.steps) == ("terminated", 3)
            assert waiting.read_text().split() == ["1", "2"]  # each approved call ran once
            trace = [json.loads(line) for line in (await runs.trace(paused) or "").splitlines()]
            assert [r["name"] for r in trace if r["kind"] == "tool"] == ["record", "record", "terminate"]
        finally:
            runs.close()
    # A park is DBOS's cancellation, planned: none of its warnings or tracebacks reach the log.
    assert [r.getMessage() for r in dbos_lines] == []


async def test_a_parked_run_that_is_cancelled_stays_cancelled(db: str, tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"
    async with Worker(db, agents=AGENTS, worker_id="one", concurrency=1, polling_s=0.05, park_after_s=0.0):
        runs = DurableRuns(db)
        try:
            run_id = await runs.submit("record once", spec(effects, approval=True))
            await settled(runs, run_id, parked)
            await runs.cancel(run_id)
            status = await runs.status(run_id)
            assert (status.state, status.parked) == ("cancelled", False)
            with pytest.raises(WrongPhaseError, match="is cancelled, not paused"):
                await runs.approve(run_id, "call_1")
            await asyncio.sleep(0.5)
            assert (await runs.status(run_id)).state == "cancelled" and not effects.exists()
        finally:
            runs.close()


async def test_with_park_after_none_a_paused_run_keeps_its_place(tmp_path: Path) -> None:
    """The contrast: without parking, the paused run holds the only place and the other run waits."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    waiting, other = tmp_path / "waiting.txt", tmp_path / "other.txt"
    async with Worker(db, agents=AGENTS, worker_id="one", concurrency=1, polling_s=0.05, park_after_s=None):
        runs = DurableRuns(db)
        try:
            paused = await runs.submit("record once", spec(waiting, approval=True))
            await settled(runs, paused, lambda s: s.state == "paused")
            queued = await runs.submit("record once", spec(other, approval=False))
            await asyncio.sleep(1.0)
            assert (await runs.status(queued)).state == "queued"
            assert not (await runs.status(paused)).parked
            await runs.approve(paused, "call_1")
            for run_id in (paused, queued):
                result = await runs.result(run_id, wait=True, timeout=20)
                assert result is not None and str(result.stop_reason) == "terminated"
        finally:
            runs.close()


def test_the_worker_parses_park_after() -> None:
    parse = build_parser().parse_args
    assert parse(["worker", "--db", "sqlite:///r.db"]).park_after == 30.0
    assert parse(["worker", "--db", "sqlite:///r.db", "--park-after", "0"]).park_after == 0.0
    assert parse(["worker", "--db", "sqlite:///r.db", "--park-after", "never"]).park_after is None
    with pytest.raises(WrongValueError, match="`park_after_s` must be 0 or more seconds"):
        Worker("sqlite:///r.db", agents=AGENTS, park_after_s=-1.0)
