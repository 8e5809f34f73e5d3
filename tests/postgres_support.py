"""PostgreSQL for the durable tests: the server at AGENTFSM_POSTGRES_URL (tools/postgres-env prints one),
else a private one this session starts on 127.0.0.1 (initdb, pg_ctl) and stops at its end; without
either the tests skip, or fail when AGENTFSM_REQUIRE_POSTGRES=1 (CI sets it).

Each test gets a database of its own on that server (`pg_url`), dropped after it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (folder / name).exists():
            return str(folder / name)
    return None


def _unavailable(reason: str) -> None:
    if os.environ.get("AGENTFSM_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"AGENTFSM_REQUIRE_POSTGRES=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The server's URL without a database name: ``postgresql://USER@127.0.0.1:PORT``."""
    given = os.environ.get("AGENTFSM_POSTGRES_URL")
    if given:
        yield given.rsplit("/", 1)[0]
        return
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        _unavailable("no PostgreSQL here (set AGENTFSM_POSTGRES_URL, or run tools/postgres-env)")
    assert initdb is not None and pg_ctl is not None
    # Not under pytest's temporary folder: as root, that one is closed to the server's own user.
    root = Path(tempfile.mkdtemp(prefix="agentfsm-postgres-"))
    as_owner: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        as_owner = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
        root.chmod(0o755)
    data = root / "data"
    subprocess.run(
        [*as_owner, initdb, "-D", str(data), "-U", "agentfsm", "--auth=trust", "--no-instructions"],
        check=True,
        capture_output=True,
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    options = f"-h 127.0.0.1 -p {port} -k {data} -c max_connections=300"
    subprocess.run(
        [*as_owner, pg_ctl, "-D", str(data), "-l", str(root / "log"), "-w", "-o", options, "start"],
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql://agentfsm@127.0.0.1:{port}"
    finally:
        subprocess.run(
            [*as_owner, pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"], capture_output=True
        )
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_url(postgres_server: str) -> Iterator[str]:
    """A database of this test's own (DBOS creates it on a worker's first launch)."""
    name = f"agentfsm_test_{uuid.uuid4().hex[:12]}"
    yield f"{postgres_server}/{name}"
    import psycopg

    with psycopg.connect(f"{postgres_server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def either_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL of each kind in turn: a SQLite file, then a PostgreSQL database of its own."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url
