"""`agentfsm worker --poll-interval SECONDS` and `-q`: how often the worker looks at its queue (the queue's
polling interval, as `Worker(polling_s=)` sets it), and a worker that writes only warnings and errors; and
a worker's flag of seconds that is not seconds, refused."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from durable_agents import TASK
from test_durable_cli import ENV

from agentfsm.cli.parser import build_parser
from agentfsm.durable import AgentSpec, DurableRuns

FACTORY = ["--agent-factory", "record=durable_agents:record_agent"]


def test_the_worker_parses_a_poll_interval_and_quiet():
    args = build_parser().parse_args(["worker", "--db", "sqlite:///r.db", "--poll-interval", "1.5", "-q"])
    assert (args.poll_interval, args.quiet) == (1.5, 1)
    default = build_parser().parse_args(["worker", "--db", "sqlite:///r.db"])
    assert (default.poll_interval, default.quiet) == (0.2, 0)


@pytest.mark.parametrize(
    ("flag", "value", "expected"),
    [
        *(("--poll-interval", value, "a positive number of seconds") for value in ("0", "-1", "soon", "inf")),
        *(("--park-after", value, "0 or more seconds, or never") for value in ("-1", "soon", "inf")),
    ],
)
def test_a_worker_flag_that_is_not_seconds_is_refused(flag, value, expected):
    done = subprocess.run(
        [sys.executable, "-m", "agentfsm", "worker", "--db", "sqlite:///r.db", flag, value],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60,
    )
    assert done.returncode == 2
    assert f"{flag}: expected {expected}, got {value!r}" in done.stderr


def _queue_polling(db: str, queue: str) -> float | None:
    """The polling interval the queue's worker registered in the database, None before it did."""
    from dbos import DBOSClient

    from agentfsm.durable.engine import migrate

    migrate(db)  # the tables, whoever comes first
    client = DBOSClient(system_database_url=db)
    try:
        found = [q for q in client.list_queues() if q.name == queue]
        return found[0].polling_interval_sec if found else None
    finally:
        client.destroy()


def _run_one(db: str, effects: Path) -> str:
    async def scenario() -> str:
        runs = DurableRuns(db)
        try:
            spec = AgentSpec(agent="record", options={"effects": str(effects)})
            run_id = await runs.submit(TASK, spec)
            result = await runs.result(run_id, wait=True, timeout=60)
            assert result is not None
            return str(result.stop_reason)
        finally:
            runs.close()

    return asyncio.run(scenario())


@pytest.mark.parametrize("quiet", [True, False])
def test_a_worker_polls_at_its_interval_and_says_nothing_with_q(tmp_path, quiet):
    db, effects, log = f"sqlite:///{tmp_path / 'runs.db'}", tmp_path / "effects.txt", tmp_path / "worker.log"
    argv = [sys.executable, "-m", "agentfsm", "worker", "--db", db, *FACTORY, "--poll-interval", "1.5"]
    with open(log, "w") as err:
        worker = subprocess.Popen([*argv, *(["-q"] if quiet else [])], stderr=err, text=True, env=ENV)
    try:
        deadline = time.monotonic() + 60
        while (polling := _queue_polling(db, "agentfsm")) is None:
            assert worker.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        assert polling == 1.5
        assert _run_one(db, effects) == "terminated"
        assert effects.read_text().split() == ["1", "2", "3"]
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    text = log.read_text()
    assert worker.returncode == 0, text
    if quiet:
        assert text == "", text  # -q: warnings and errors only, and there were none
    else:
        assert "(version " in text and "4 at a time, polling every 1.5 s); Ctrl-C stops it" in text, text
        assert "durable_worker_started" in text, text


def test_a_workers_agent_is_built_as_the_command_lines_are(tmp_path, monkeypatch):
    """`agentfsm worker`'s built-in agents come from the same builder as `run`'s: approvals naming a
    tool the agent lacks are refused as there, and nothing asks a terminal."""
    from agentfsm.cli.durable import _configured
    from agentfsm.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    llm = '[llm]\nmodel = "openai/m"\napi_base = "http://127.0.0.1:9/v1"\napi_key = "k"\n\n'
    (tmp_path / "agentfsm.toml").write_text(llm + '[agent]\nrequire_approval = ["nope"]\n')
    with pytest.raises(
        ConfigError, match=r"^require_approval names tools the toolcall agent does not have: nope;"
    ):
        _configured("toolcall", None)(AgentSpec(agent="toolcall"))
    (tmp_path / "agentfsm.toml").write_text(llm + '[agent]\nrequire_approval = ["terminate"]\n')
    agent = _configured("toolcall", None)(AgentSpec(agent="toolcall"))
    assert (
        list(agent.approval_names) == ["terminate"] and agent.approver is None and agent.input_handler is None
    )
