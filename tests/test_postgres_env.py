"""`tools/postgres-env`, which `.ci/run` uses, from a checkout other users cannot enter (a `mktemp -d`
folder, mode 700): the server it starts there must be the one `--stop` stops, so that CI leaves no
server running. As root only, as CI runs it: the server runs as the `postgres` user, which is what
makes such a folder unreachable to it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest
from postgres_support import _binary, _unavailable

ROOT = Path(__file__).resolve().parent.parent


def answers(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_a_server_started_from_a_private_checkout_is_stopped_by_stop() -> None:
    if os.geteuid() != 0:
        pytest.skip("only root makes the postgres user meet a folder it cannot enter")
    if _binary("initdb") is None or _binary("pg_ctl") is None:
        _unavailable("no initdb or pg_ctl here (tools/postgres-env installs them)")
    private = Path(tempfile.mkdtemp(prefix="agentfsm-private-"))  # mode 700, as mktemp makes it
    checkout = private / "main"
    (checkout / "tools").mkdir(parents=True)
    shutil.copy(ROOT / "tools" / "postgres-env", checkout / "tools" / "postgres-env")
    script = str(checkout / "tools" / "postgres-env")
    away: Path | None = None
    try:
        started = subprocess.run([script], capture_output=True, text=True, timeout=120, cwd=private)
        assert started.returncode == 0, started.stderr
        url = started.stdout.strip()
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        assert answers(port)
        assert "cannot reach" in started.stderr  # the data went beside the checkout
        away = (checkout / ".postgres").resolve()
        assert not away.is_relative_to(private)

        stopped = subprocess.run([script, "--stop"], capture_output=True, text=True, timeout=120, cwd=private)
        assert stopped.returncode == 0, stopped.stderr
        assert "Permission denied" not in stopped.stderr
        assert not answers(port)
        assert not (away / "data" / "postmaster.pid").exists()
    finally:
        if away is not None and (away / "data" / "postmaster.pid").exists():
            pg_ctl = str(_binary("pg_ctl"))
            as_owner = ["runuser", "-u", "postgres", "--"]
            stop = [*as_owner, pg_ctl, "-D", str(away / "data"), "-m", "immediate", "stop"]
            subprocess.run(stop, capture_output=True)
        if away is not None:
            shutil.rmtree(away, ignore_errors=True)
        shutil.rmtree(private, ignore_errors=True)
