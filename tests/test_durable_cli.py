"""The durable runs' commands across processes on PostgreSQL: `agentfsm worker` runs what `agentfsm submit`
enqueued; `status`, `approve`, `answer`, `result` and `cancel` reach the run from processes of their own."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from postgres_support import pg_url, postgres_server  # noqa: F401 (fixtures)

from agentfsm.durable import AgentSpec, DurableRuns

HERE = Path(__file__).parent
ENV = {**os.environ, "PYTHONPATH": str(HERE)}
WORKER = [
    sys.executable,
    "-m",
    "agentfsm",
    "worker",
    "--agent-factory",
    "approval=durable_agents:approval_agent",
    "--agent-factory",
    "asking=durable_agents:asking_agent",
    "--agent-factory",
    "human=durable_agents:human_agent",
    "--agent-factory",
    "elicit=durable_agents:elicit_agent",
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


def started_worker(db: str, effects: Path, log: Path, concurrency: int = 2) -> subprocess.Popen[str]:
    with open(log, "w") as err:
        worker = subprocess.Popen(
            [*WORKER, "--db", db, "--worker-id", "cli-worker", "--concurrency", str(concurrency)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
            env={**ENV, "DURABLE_EFFECTS": str(effects)},
        )
    deadline = time.monotonic() + 30
    while "worker cli-worker runs queue 'agentfsm'" not in log.read_text():
        assert worker.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    return worker


def test_submit_approve_cancel_and_result_from_other_processes(pg_url, tmp_path):  # noqa: F811
    db = pg_url
    effects, log = tmp_path / "effects.txt", tmp_path / "worker.log"
    worker = started_worker(db, effects, log)
    try:
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


def test_a_tool_s_question_is_answered_from_another_process(pg_url, tmp_path):  # noqa: F811
    db = pg_url
    effects, log = tmp_path / "effects.txt", tmp_path / "worker.log"
    worker = started_worker(db, effects, log)
    try:
        submitted = [agentfsm("submit", task, "--db", db, "--agent", "asking") for task in ("one", "two")]
        assert [s.returncode for s in submitted] == [0, 0]
        answered, declined = (s.stdout.strip() for s in submitted)
        paused = wait_for(db, answered, "paused")
        [[call, question]] = paused["pending_input"]
        assert (call["id"], call["name"], question["key"]) == ("c1", "ask_age", "person")
        assert paused["pending_approval"] == []
        text = agentfsm("status", answered, "--db", db)
        assert text.returncode == 4, text.stderr
        assert "waits for input: c1 ask_age [person] Who are you?" in text.stdout
        assert "--field name=<string>" in text.stdout and "--field age=<integer> (optional)" in text.stdout
        mistakes = {
            ("c9", "--field", "name=Ada"): "waits for no call 'c9'",
            ("c1", "--field", "nick=A"): "has no field 'nick'; its fields: name, age",
            ("c1", "--field", "name=Ada", "--field", "age=old"): "--field age='old': 'old' is not an integer",
            ("c1", "--field", "age=36"): "needs --field name=...",
            ("c1", "--question", "other", "--field", "name=Ada"): "asked no question 'other'",
            ("c1", "--decline", "--field", "name=Ada"): "--decline takes no --field",
        }
        for words, message in mistakes.items():
            refused = agentfsm("answer", answered, *words, "--db", db)
            assert refused.returncode == 2 and message in refused.stderr, (words, refused.stderr)
        assert not effects.exists()  # nothing reached the tool
        both = agentfsm("answer", answered, "c1", "--field", "name=Ada", "--field", "age=36", "--db", db)
        assert both.returncode == 0, both.stderr
        done = agentfsm("result", answered, "--db", db, "--wait", "--timeout", "30", "--json")
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["stop_reason"] == "terminated"
        assert (
            result["output"] == "Observed output of cmd `ask_age` executed:\nhello {'name': 'Ada', 'age': 36}"
        )
        wait_for(db, declined, "paused")
        assert agentfsm("answer", declined, "c1", "--decline", "--db", db).returncode == 0
        ended = agentfsm("result", declined, "--db", db, "--wait", "--timeout", "30", "--json")
        assert "no answer (decline)" in json.loads(ended.stdout)["output"]
        heard = [json.loads(line) for line in effects.read_text().splitlines()]
        assert heard == [
            {"token": "t1", "action": "accept", "content": {"name": "Ada", "age": 36}},
            {"token": "t1", "action": "decline", "content": None},
        ]  # the tool, in the worker, received each answer once
        late = agentfsm("answer", answered, "c1", "--field", "name=Ada", "--db", db)
        assert late.returncode == 2 and "is finished, not paused" in late.stderr
    finally:
        worker.terminate()
        worker.communicate(timeout=30)
    assert worker.returncode == 0, log.read_text()


def test_ask_human_on_a_worker_is_a_question_answered_from_another_process(pg_url, tmp_path):  # noqa: F811
    db = pg_url
    effects, log = tmp_path / "effects.txt", tmp_path / "worker.log"
    worker = started_worker(db, effects, log)
    try:
        run_id = agentfsm("submit", "ask", "--db", db, "--agent", "human").stdout.strip()
        paused = wait_for(db, run_id, "paused")
        [[call, question]] = paused["pending_input"]
        assert (call["id"], call["name"], question["message"]) == ("c1", "ask_human", "Which colour?")
        text = agentfsm("status", run_id, "--db", db)
        assert "waits for input: c1 ask_human [human] Which colour?" in text.stdout
        assert "--field answer=<string>" in text.stdout
        given = agentfsm("answer", run_id, "c1", "--field", "answer=blue", "--db", db)
        assert given.returncode == 0, given.stderr
        done = agentfsm("result", run_id, "--db", db, "--wait", "--timeout", "30", "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["output"] == "Observed output of cmd `ask_human` executed:\nblue"
    finally:
        worker.terminate()
        worker.communicate(timeout=30)
    assert worker.returncode == 0, log.read_text()


def test_cancelling_a_paused_run_on_another_process_ends_its_wait_at_once(pg_url, tmp_path):  # noqa: F811
    """The worker runs one run at a time: the run after the cancelled one starts only once the
    cancelled run's wait for a decision has ended on the worker."""
    db = pg_url
    effects, log = tmp_path / "effects.txt", tmp_path / "worker.log"
    worker = started_worker(db, effects, log, concurrency=1)
    try:
        paused = agentfsm("submit", "one", "--db", db, "--agent", "approval").stdout.strip()
        wait_for(db, paused, "paused")
        after = agentfsm("submit", "two", "--db", db, "--agent", "asking").stdout.strip()
        time.sleep(1.0)  # well inside the run's wait for a decision
        assert status(db, after)["state"] == "queued"  # the worker's one place is the paused run's
        assert agentfsm("cancel", paused, "--db", db).returncode == 0
        cancelled_at = time.monotonic()
        wait_for(db, after, "paused", timeout=20)  # the place is free again: the next run took it
        freed_s = time.monotonic() - cancelled_at
        assert freed_s < 5.0, freed_s  # a wait of 60 s unless the cancel wakes it
        print(f"cancel: the worker's place free again {freed_s:.1f} s after the cancel (the next run paused)")
        ended = agentfsm("result", paused, "--db", db, "--json")
        assert ended.returncode == 1 and json.loads(ended.stdout)["stop_reason"] == "cancelled"
        assert not effects.exists()  # the cancelled call never ran
        done = agentfsm("status", paused, "--db", db, "--json")
        assert json.loads(done.stdout)["state"] == "cancelled"
    finally:
        worker.terminate()
        worker.communicate(timeout=30)
    assert worker.returncode == 0, log.read_text()


@pytest.mark.parametrize("revision", ["modern", "legacy"])
def test_an_mcp_servers_question_on_a_worker_is_answered_from_another_process(pg_url, tmp_path, revision):  # noqa: F811
    """A real MCP server (tests/mcp_elicit_server.py, stdio, started by the worker's agent) asks for a
    name in the middle of a call: on 2026-07-28 as an ``input_required`` result, on 2025-11-25 as an
    ``elicitation/create`` request while the call is held open."""
    db = pg_url
    effects, log = tmp_path / "effects.txt", tmp_path / "worker.log"
    worker = started_worker(db, effects, log)
    runs = DurableRuns(db)
    try:
        spec = AgentSpec(agent="elicit", options={"revision": revision})
        run_id = asyncio.run(runs.submit("greet me", spec))
        paused = wait_for(db, run_id, "paused")
        [[call, question]] = paused["pending_input"]
        assert (call["id"], call["name"], question["message"]) == ("c1", "mcp_el_greet", "What is your name?")
        text = agentfsm("status", run_id, "--db", db)
        assert "waits for input: c1 mcp_el_greet" in text.stdout and "--field name=<string>" in text.stdout
        given = agentfsm("answer", run_id, "c1", "--field", "name=Ada", "--db", db)
        assert given.returncode == 0, given.stderr
        done = agentfsm("result", run_id, "--db", db, "--wait", "--timeout", "30", "--json")
        assert done.returncode == 0, done.stderr
        assert (
            json.loads(done.stdout)["output"] == "Observed output of cmd `mcp_el_greet` executed:\nhello Ada"
        )
    finally:
        runs.close()
        worker.terminate()
        worker.communicate(timeout=30)
    assert worker.returncode == 0, log.read_text()


def test_bad_database_urls_are_bad_usage():
    done = agentfsm("status", "x", "--db", "mysql://nope")
    assert done.returncode == 2 and "is not a database URL" in done.stderr and done.stdout == ""
