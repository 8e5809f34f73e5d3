"""The durable commands on a database no worker has opened: a new SQLite file, a new PostgreSQL database.

Enqueueing before any worker started is the ordinary order for a queue. Each command, the first to open
the database, creates DBOS's tables as a worker's launch does: `submit` enqueues a run that a worker
started afterwards runs to its end, and the commands that look a run up say in one line that there is no
such run. A database that cannot be opened is one line too, at once, never a traceback.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from durable_agents import AGENTS, TASK
from postgres_support import postgres_server  # noqa: F401 (fixture)
from test_durable_cli import WORKER, agentfsm, started_worker, status

from agentfsm.cli.parser import DURABLE_COMMANDS
from agentfsm.durable import AgentSpec, DurableRuns, Worker
from agentfsm.durable.engine import CONNECT_TIMEOUT_S
from agentfsm.errors import ConfigError

LOOKUPS = {
    "status": ("status", "r1"),
    "result": ("result", "r1"),
    "result --wait": ("result", "r1", "--wait", "--timeout", "5"),
    "cancel": ("cancel", "r1"),
    "approve": ("approve", "r1", "c1"),
    "approve --reject": ("approve", "r1", "c1", "--reject", "no"),
    "answer": ("answer", "r1", "c1", "--field", "name=Ada"),
    "answer --decline": ("answer", "r1", "c1", "--decline"),
}
"""Every client-side durable command but `submit`, each with the id of a run that is not there."""


@pytest.fixture(params=["sqlite", "postgresql"])
def new_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], str]]:
    """Makes URLs of databases that do not exist yet: a SQLite file not there, or a PostgreSQL
    database the server lacks (each dropped after the test)."""
    made: list[str] = []
    server = request.getfixturevalue("postgres_server") if request.param == "postgresql" else None

    def new() -> str:
        name = f"agentfsm_new_{uuid.uuid4().hex[:12]}"
        made.append(name)
        return f"{server}/{name}" if server is not None else f"sqlite:///{tmp_path / name}.db"

    yield new
    if server is not None:
        import psycopg

        with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
            for name in made:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The command's stderr, asserted to be one line of agentfsm's own (no traceback, nothing of DBOS's)."""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentfsm: "), done.stderr
    return lines[0]


@pytest.mark.parametrize("command", LOOKUPS)
def test_looking_a_run_up_first_on_a_new_database_says_there_is_no_such_run(new_database, command):
    db = new_database()
    done = agentfsm(*LOOKUPS[command], "--db", db)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert (
        one_line(done) == f"agentfsm: error: no run 'r1' in {db}; `agentfsm submit` prints the ids it makes"
    )
    assert agentfsm("status", "r1", "--db", db).returncode == 2  # the tables it made serve the next command


def test_a_run_submitted_to_a_new_database_runs_once_a_worker_starts(new_database, tmp_path):
    db = new_database()
    submitted = agentfsm("submit", "one", "--db", db, "--agent", "approval")
    assert submitted.returncode == 0 and submitted.stderr == "", submitted.stderr
    run_id = submitted.stdout.strip()
    again = agentfsm("submit", "one", "--db", db, "--agent", "approval", "--id", run_id)
    assert (again.returncode, again.stdout.strip()) == (0, run_id)  # the same run, not a second one
    queued = agentfsm("status", run_id, "--db", db)
    assert (queued.returncode, queued.stdout) == (4, f"{run_id}: queued\n")
    effects, log = tmp_path / "effects.txt", tmp_path / "worker.log"
    worker = started_worker(db, effects, log)
    try:
        deadline = time.monotonic() + 30
        while (found := status(db, run_id))["state"] != "paused":
            assert time.monotonic() < deadline, found
            time.sleep(0.2)
        assert [c["id"] for c in found["pending_approval"]] == ["c1"]
        assert agentfsm("approve", run_id, "c1", "--db", db).returncode == 0
        done = agentfsm("result", run_id, "--db", db, "--wait", "--timeout", "30")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "done"  # the answer alone; the summary is on stderr
        assert "stop_reason=terminated" in done.stderr
        assert effects.read_text().split() == ["7"]  # the run ran once, its call once
    finally:
        worker.terminate()
        worker.communicate(timeout=30)
    assert worker.returncode == 0, log.read_text()


def test_python_submits_to_a_new_database_before_its_worker_starts(new_database, tmp_path):
    db = new_database()
    effects = tmp_path / "effects.txt"

    async def scenario() -> tuple[str, str | None]:
        runs = DurableRuns(db)
        try:
            run_id = await runs.submit(TASK, AgentSpec(agent="record", options={"effects": str(effects)}))
            assert (await runs.status(run_id)).state == "queued"
            async with Worker(db, agents=AGENTS, worker_id="late", polling_s=0.05):
                result = await runs.result(run_id, wait=True, timeout=30)
            assert result is not None
            return str(result.stop_reason), result.output
        finally:
            runs.close()

    assert asyncio.run(scenario()) == ("terminated", "done")
    assert effects.read_text().split() == ["1", "2", "3"]


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound for a moment, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("command", ["submit", "status", "worker"])
def test_a_database_that_cannot_be_opened_is_one_line_at_once(tmp_path, command):
    words = {"submit": ("submit", "hello"), "status": ("status", "r1"), "worker": ("worker",)}[command]
    unreachable = f"postgresql://agentfsm@127.0.0.1:{closed_port()}/runs"
    cases = {
        unreachable: f"agentfsm: error: cannot open the database --db {unreachable!r} (connection failed: ",
        f"sqlite:///{tmp_path / 'missing' / 'runs.db'}": "agentfsm: error: cannot open the database --db ",
    }
    for db, start in cases.items():
        began = time.monotonic()
        argv = [*WORKER[3:], "--db", db] if command == "worker" else [*words, "--db", db]
        done = agentfsm(*argv, timeout=30)
        took = time.monotonic() - began
        assert done.returncode == 2, done.stderr
        line = one_line(done)
        assert line.startswith(start), line
        fix = "give a file in a folder that exists" if db.startswith("sqlite") else "start the server"
        assert fix in line, line
        assert took < 10, took  # DBOS's client would retry for minutes
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("db", ["sqlite:///", "sqlite:///:memory:", "sqlite:///:memory:?cache=shared"])
def test_a_sqlite_url_with_no_file_is_refused(db):
    with pytest.raises(ConfigError, match="names no file: give sqlite:///FILE"):
        DurableRuns(db)
    done = agentfsm("submit", "hello", "--db", db)
    assert done.returncode == 2 and "names no file" in one_line(done)


def test_the_lookups_cover_every_client_side_durable_command():
    from agentfsm.cli.parser import DURABLE_COMMANDS

    assert set(DURABLE_COMMANDS) == {"worker", "submit"} | {words[0] for words in LOOKUPS.values()}


class _Listener:
    """A TCP server on 127.0.0.1 that accepts every connection and then, as `speak` says, never
    answers (holding the socket open) or answers with bytes that are not PostgreSQL's protocol."""

    def __init__(self, speak: bytes | None = None) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self.port = int(self._server.getsockname()[1])
        self.accepted = 0
        self._speak = speak
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            if self._speak is not None:
                conn.sendall(self._speak)
            self._held.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for conn in self._held:
            conn.close()
        self._server.close()


@pytest.fixture
def silent_listener() -> Iterator[_Listener]:
    listener = _Listener()
    yield listener
    listener.close()


def _each(argvs: dict[str, list[str]]) -> dict[str, tuple[float, subprocess.CompletedProcess[str]]]:
    """Each command line run in turn; its time (from the interpreter's start) and outcome."""
    done = {}
    for name, argv in argvs.items():
        began = time.monotonic()
        outcome = agentfsm(*argv, timeout=120)
        done[name] = (time.monotonic() - began, outcome)
    return done


EVERY_COMMAND = {
    "worker": WORKER[3:],
    "submit": ["submit", "hello"],
    **{name: list(words) for name, words in LOOKUPS.items() if name in ("status", "result", "cancel")},
}
"""The commands the issue found hanging, each once (`approve` and `answer` open the database the same
way, through `EngineClient`: the quick cases below run them too)."""
QUICK_COMMANDS = {
    **EVERY_COMMAND,
    **{name: list(words) for name, words in LOOKUPS.items() if name in ("approve", "answer")},
}


def test_a_server_that_accepts_and_never_answers_is_one_line_within_the_connect_timeout(silent_listener):
    db = f"postgresql://agentfsm@127.0.0.1:{silent_listener.port}/runs"
    done = _each({name: [*argv, "--db", db] for name, argv in EVERY_COMMAND.items()})
    for name, (took, outcome) in done.items():
        assert outcome.returncode == 2, (name, outcome.stderr)
        line = one_line(outcome)
        assert line.startswith(f"agentfsm: error: cannot open the database --db {db!r} "), line
        assert f"(no answer within {CONNECT_TIMEOUT_S} s)" in line and "connect_timeout=SECONDS" in line, line
        # The stated timeout, plus the interpreter's start on a busy machine: never DBOS's minutes.
        assert took < CONNECT_TIMEOUT_S + 8, (name, took)
    assert silent_listener.accepted >= len(EVERY_COMMAND)


def test_the_connect_timeout_in_the_url_is_the_one_waited_for(silent_listener):
    db = f"postgresql://agentfsm@127.0.0.1:{silent_listener.port}/runs?connect_timeout=1"
    began = time.monotonic()
    with pytest.raises(ConfigError, match=r"\(no answer within 1 s\)"):
        asyncio.run(DurableRuns(db).status("r1"))
    assert time.monotonic() - began < CONNECT_TIMEOUT_S


def test_a_server_that_answers_with_something_else_is_one_line_at_once():
    listener = _Listener(speak=b"HTTP/1.1 400 Bad Request\r\n\r\n")
    try:
        db = f"postgresql://agentfsm@127.0.0.1:{listener.port}/runs"
        done = _each({name: [*argv, "--db", db] for name, argv in QUICK_COMMANDS.items()})
    finally:
        listener.close()
    for name, (took, outcome) in done.items():
        assert outcome.returncode == 2, (name, outcome.stderr)
        assert one_line(outcome).startswith(f"agentfsm: error: cannot open the database --db {db!r} ("), name
        assert took < CONNECT_TIMEOUT_S + 8, (name, took)


def test_a_login_the_server_refuses_is_one_line(postgres_server):  # noqa: F811
    server = postgres_server  # the server, no database
    db = server.replace("://agentfsm@", "://nobody:wrong@", 1) + "/runs"
    assert db != server + "/runs"
    done = _each({name: [*argv, "--db", db] for name, argv in QUICK_COMMANDS.items()})
    for name, (took, outcome) in done.items():
        assert outcome.returncode == 2, (name, outcome.stderr)
        line = one_line(outcome)
        assert line.startswith(f"agentfsm: error: cannot open the database --db {db!r} ("), line
        assert '"nobody"' in line and "fix the URL or its password" in line, line
        assert took < CONNECT_TIMEOUT_S + 8, (name, took)


def test_the_connect_timeout_is_stated_in_every_durable_commands_help():
    for name in DURABLE_COMMANDS:
        done = agentfsm(name, "--help")
        text = " ".join(done.stdout.split())
        assert f"does not answer within {CONNECT_TIMEOUT_S} s is an error" in text, (name, text)
        assert "?connect_timeout=SECONDS" in text, name
