"""The durable runs' commands across processes on PostgreSQL: `agentfsm worker` runs what `agentfsm submit`
enqueued; `status`, `approve`, `result` and `cancel` reach the run from processes of their own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from postgres_support import pg_url, postgres_server  # noqa: F401 (fixtures)

HERE = Path(__file__).parent
ENV = {**os.environ, "PYTHONPATH": str(HERE)}
WORKER = [
    sys.executable,
    "-m",
    "agentfsm",
    "worker",
    "--agent-factory",
    "approval=durable_agents:approval_agent",
]


def agentfsm(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentfsm", *args], capture_output=True, text=True, timeout=timeout, env=ENV
    )


def status(db: str, run_id: str) -> dict:
    done = agentfsm("status", run_id, "--db", db, "--json")
    return json.loads(done.stdout)


def wait_for(db: str, run_id: str, state: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while (found := status(db, run_id))["state"] != state:
        assert time.monotonic() < deadline, found
        time.sleep(0.2)
    return found


def test_submit_approve_cancel_and_result_from_other_processes(pg_url, tmp_path):  # noqa: F811
    db = pg_url
    effects, log = tmp_path / "effects.txt", tmp_path / "worker.log"
    with open(log, "w") as err:
        worker = subprocess.Popen(
            [*WORKER, "--db", db, "--worker-id", "cli-worker", "--concurrency", "2"],
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
            env={**ENV, "DURABLE_EFFECTS": str(effects)},
        )
    try:
        deadline = time.monotonic() + 30
        while "worker cli-worker runs queue 'agentfsm'" not in log.read_text():
            assert worker.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        spec = ["--agent", "approval"]
        submitted = [agentfsm("submit", task, "--db", db, *spec) for task in ("one", "two")]
        assert [s.returncode for s in submitted] == [0, 0]
        kept, cancelled = (s.stdout.strip() for s in submitted)
        paused = wait_for(db, kept, "paused")
        assert [c["id"] for c in paused["pending_approval"]] == ["c1"]
        text = agentfsm("status", kept, "--db", db)
        assert text.returncode == 4 and "waits for approval: c1 record" in text.stdout
        assert agentfsm("result", kept, "--db", db).returncode == 4  # not ended yet
        refused = agentfsm("approve", kept, "c9", "--db", db)
        assert refused.returncode == 2 and "waits for no call 'c9'" in refused.stderr
        assert agentfsm("approve", kept, "c1", "--db", db).returncode == 0
        done = agentfsm("result", kept, "--db", db, "--wait", "--json", "--trace", str(tmp_path / "t.jsonl"))
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["stop_reason"] == "terminated"
        assert effects.read_text().split() == ["7"]
        assert (tmp_path / "t.jsonl").read_text().splitlines()[0].startswith('{"kind": "header"')
        wait_for(db, cancelled, "paused")
        assert agentfsm("cancel", cancelled, "--db", db).returncode == 0
        ended = agentfsm("result", cancelled, "--db", db, "--json")
        assert ended.returncode == 1 and json.loads(ended.stdout)["stop_reason"] == "cancelled"
        assert (
            wait_for(db, cancelled, "cancelled")["result"]["error"] == "CancelledError: the run was cancelled"
        )
        unknown = agentfsm("status", "nope", "--db", db)
        assert unknown.returncode == 2 and "no run 'nope'" in unknown.stderr
    finally:
        worker.terminate()
        worker.communicate(timeout=30)
    assert worker.returncode == 0, log.read_text()
    assert "transition" in log.read_text()  # the worker logs its runs' transitions on stderr


def test_bad_database_urls_are_bad_usage():
    done = agentfsm("status", "x", "--db", "mysql://nope")
    assert done.returncode == 2 and "is not a database URL" in done.stderr and done.stdout == ""
