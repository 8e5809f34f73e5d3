"""A durable run whose output row was damaged in the database (edited by hand, written by something
else): `status` and `result` say in one line, exit 2, which run and what is wrong, and the other runs
of the database are read as before. The row is edited directly in DBOS's SQLite table."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from typing import Any

import pytest
from durable_agents import AGENTS, TASK

from agentfsm.cli.commands import main
from agentfsm.durable import AgentSpec, DurableRuns, Worker
from agentfsm.errors import CheckpointError

DAMAGES: dict[str, tuple[Any, str]] = {
    # name: (the output column's new text, or a function of the intact result; what the line says)
    "not JSON": ("not json{", "holds an output that is not a result object ('not json{')"),
    "null": ("null", "holds no output"),
    "an array": ("[1, 2]", "holds an output that is not a result object ([1, 2])"),
    "an empty object": ("{}", "its result in the database is damaged (run_id: Field required)"),
    "an unknown state": (
        lambda r: {**r, "state": "EXPLODED"},
        "its result in the database is damaged (state: Input should be",
    ),
    "wrong types": (
        lambda r: {**r, "steps": "three", "usage": []},
        "its result in the database is damaged (steps: Input should be a valid integer",
    ),
    "a pending call without a name": (
        lambda r: {**r, "pending_approval": [{"id": "c1", "arguments": "{}"}]},
        "its result in the database is damaged (pending_approval.0.name: Field required)",
    ),
}


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, dict[str, str]]:
    """A database of finished runs: one intact, one per damage of its output row."""
    folder = tmp_path_factory.mktemp("damaged")
    db = f"sqlite:///{folder / 'runs.db'}"

    async def finished(count: int) -> list[str]:
        async with Worker(db, agents=AGENTS, worker_id="damage", polling_s=0.05):
            runs = DurableRuns(db)
            try:
                spec = AgentSpec(agent="record", options={"effects": str(folder / "effects.txt")})
                ids = [await runs.submit(TASK, spec) for _ in range(count)]
                for run_id in ids:
                    assert (await runs.result(run_id, wait=True, timeout=60)) is not None
                return ids
            finally:
                runs.close()

    intact, *others = asyncio.run(finished(1 + len(DAMAGES)))
    by_damage = dict(zip(DAMAGES, others, strict=True))
    with sqlite3.connect(folder / "runs.db") as database:
        for name, run_id in by_damage.items():
            (text,) = database.execute(
                "SELECT output FROM workflow_output WHERE workflow_uuid = ?", (run_id,)
            ).fetchone()
            change = DAMAGES[name][0]
            new = json.dumps(change(json.loads(text))) if callable(change) else change
            updated = database.execute(
                "UPDATE workflow_output SET output = ? WHERE workflow_uuid = ?", (new, run_id)
            )
            assert updated.rowcount == 1
    return db, intact, by_damage


@pytest.mark.parametrize("damage", list(DAMAGES))
@pytest.mark.parametrize("command", ["status", "result"])
def test_a_damaged_output_row_is_one_line_naming_the_run_and_the_damage(
    damaged: tuple[str, str, dict[str, str]], damage: str, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db, intact, by_damage = damaged
    run_id = by_damage[damage]
    assert main([command, run_id, "--db", db]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    [line] = err.splitlines()
    assert line.startswith(f"agentfsm: error: run {run_id!r} ended as SUCCESS but "), line
    assert DAMAGES[damage][1] in line, line
    assert line.endswith("submit its task again"), line
    # The other runs of the database are read as before.
    assert main([command, intact, "--db", db]) == 0
    out, err = capsys.readouterr()
    assert "done" in out and "error" not in err


def test_python_callers_get_the_same_error(damaged: tuple[str, str, dict[str, str]]) -> None:
    db, intact, by_damage = damaged

    async def read() -> None:
        runs = DurableRuns(db)
        try:
            for run_id in by_damage.values():
                with pytest.raises(CheckpointError, match=f"run {run_id!r} ended as SUCCESS"):
                    await runs.result(run_id)
            result = await runs.result(intact)
            assert result is not None and result.output == "done"
        finally:
            runs.close()

    asyncio.run(read())


def test_the_trace_is_read_from_the_output_and_from_the_event_of_an_earlier_layout(tmp_path) -> None:
    """Step layout 6 keeps a run's trace in its output beside the result; a run recorded by layout 5
    or earlier kept it in an event, which is still read. A trace that is not text reads as none,
    and leaves the result readable."""
    db_file = tmp_path / "runs.db"
    db = f"sqlite:///{db_file}"

    async def finished() -> list[str]:
        async with Worker(db, agents=AGENTS, worker_id="layouts", polling_s=0.05):
            runs = DurableRuns(db)
            try:
                spec = AgentSpec(agent="record", options={"effects": str(tmp_path / "effects.txt")})
                ids = [await runs.submit(TASK, spec) for _ in range(3)]
                for run_id in ids:
                    assert (await runs.result(run_id, wait=True, timeout=60)) is not None
                return ids
            finally:
                runs.close()

    current, earlier, damaged = asyncio.run(finished())
    with sqlite3.connect(db_file) as database:
        rows = dict(database.execute("SELECT workflow_uuid, output FROM workflow_output").fetchall())
        assert {json.loads(rows[run_id])["trace"].partition("\n")[0][:18] for run_id in rows} == {
            '{"kind": "header",'
        }
        assert database.execute("SELECT count(*) FROM workflow_events").fetchone() == (0,)  # no event
        # The earlier layout: the output is the result alone, the trace an event of the run.
        output = json.loads(rows[earlier])
        trace_text = output.pop("trace")
        database.execute(
            "UPDATE workflow_output SET output = ? WHERE workflow_uuid = ?", (json.dumps(output), earlier)
        )
        database.execute(
            "INSERT INTO workflow_events (workflow_uuid, key, value) VALUES (?, ?, ?)",
            (earlier, "trace", json.dumps(trace_text)),
        )
        wrong = {**json.loads(rows[damaged]), "trace": 7}
        database.execute(
            "UPDATE workflow_output SET output = ? WHERE workflow_uuid = ?", (json.dumps(wrong), damaged)
        )

    async def read() -> None:
        runs = DurableRuns(db)
        try:
            for run_id in (current, earlier):
                text = await runs.trace(run_id)
                assert text is not None
                records = [json.loads(line) for line in text.splitlines()]
                assert records[0]["run_id"] == run_id and records[-1]["kind"] == "result"
                result = await runs.result(run_id)
                assert result is not None and result.output == "done"
            assert await runs.trace(damaged) is None
            result = await runs.result(damaged)
            assert result is not None and result.output == "done"
        finally:
            runs.close()

    asyncio.run(read())
