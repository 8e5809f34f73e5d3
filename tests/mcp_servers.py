"""Real MCP servers from npm for the tests: `@modelcontextprotocol/server-everything` over stdio and HTTP.

`tools/mcp-env` installs the server at the version locked in tools/npm; these fixtures find it there
(`tools/mcp-env --path`). Without it the tests that use them skip, with the command to run, unless
AGENTFSM_REQUIRE_MCP=1 (CI), where they fail.

The server cannot be told which address to bind (its HTTP transports listen on every interface), so it
runs with tests/loopback_only.cjs preloaded, which makes every listen bind 127.0.0.1 and reports the
port. Each server started here carries a marker in its environment; after the test no process with that
marker may remain (leftovers are killed, and the test fails).

Fixtures (registered for the whole suite through `pytest_plugins` in conftest.py):

- `everything_stdio`: a `StdioServerParameters` for the SDK's stdio client (`mcp.Client(params)`);
  its `command`, `args` and `env` are also what an `[mcp.servers.<id>]` stdio entry would hold.
- `everything_http`: the URL of a running server's streamable HTTP endpoint, `http://127.0.0.1:PORT/mcp`.

`everything_http_server(log, port)` is the context manager behind `everything_http`, for a test that needs
to start, stop or restart servers itself.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the SDK is imported by the fixture that needs it, not by every test run (0.5 s)
    from mcp.client.stdio import StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
INSTALL_SCRIPT = ROOT / "tools" / "mcp-env"
LOOPBACK_ONLY = Path(__file__).resolve().parent / "loopback_only.cjs"
REQUIRE_MCP = os.environ.get("AGENTFSM_REQUIRE_MCP") == "1"
"""Set by CI: an MCP test that would skip fails instead."""

MARKER = "AGENTFSM_TEST_MCP_SERVER"
"""The environment variable that tags each server process started here, for the leftover check."""

_LISTENING = re.compile(r"^loopback-only: listening on 127\.0\.0\.1:(\d+)$", re.MULTILINE)
_START_TIMEOUT = 20.0
_STOP_TIMEOUT = 5.0


@functools.cache
def _installed() -> Path | str:
    """The installed server's entry point, or why server-everything cannot run here."""
    if shutil.which("node") is None:
        return "node is not on PATH; run tools/mcp-env (as root it installs Debian's nodejs and npm)"
    found = subprocess.run(["bash", str(INSTALL_SCRIPT), "--path"], capture_output=True, text=True)
    if found.returncode != 0:
        return found.stderr.strip() or f"tools/mcp-env --path exited {found.returncode}"
    return Path(found.stdout.strip())


def everything_entry() -> Path:
    """The installed server's entry point; skips without it, or fails when CI demands MCP."""
    found = _installed()
    if isinstance(found, str):
        if REQUIRE_MCP:
            pytest.fail(f"AGENTFSM_REQUIRE_MCP=1 but server-everything cannot run: {found}", pytrace=False)
        pytest.skip(f"no server-everything here: {found}")
    return found


def _command(entry: Path, transport: str) -> list[str]:
    return ["node", "--require", str(LOOPBACK_ONLY), str(entry), transport]


def _environment(mark: str, **extra: str) -> dict[str, str]:
    """What the server needs and nothing of the test's own environment (no keys, no proxies)."""
    env = {name: os.environ[name] for name in ("PATH", "HOME") if name in os.environ}
    return env | {MARKER: mark} | extra


def marked_processes(mark: str) -> list[int]:
    """Pids of live processes whose environment carries `MARKER=mark` (zombies have none to read)."""
    needle = f"{MARKER}={mark}".encode() + b"\0"
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if needle in (proc / "environ").read_bytes():
                found.append(int(proc.name))
    return found


def _assert_none_left(mark: str) -> None:
    """Wait for the marked processes to end; kill any that remain and fail."""
    deadline = time.monotonic() + _STOP_TIMEOUT
    while (left := marked_processes(mark)) and time.monotonic() < deadline:
        time.sleep(0.05)
    if left:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        pytest.fail(f"MCP server processes {left} outlived their test (killed now)", pytrace=False)


def _answers(port: int) -> bool:
    """Whether the server answers HTTP on 127.0.0.1:`port` (a 400 for a request without a session counts)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        opener.open(f"http://127.0.0.1:{port}/mcp", timeout=2).close()
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


@contextlib.contextmanager
def everything_http_server(log: Path, port: int = 0) -> Iterator[str]:
    """Run server-everything's streamable HTTP transport on 127.0.0.1:`port` (0: a free one); yield its URL.

    The server's output goes to `log`. On exit the server's process group is stopped (SIGTERM, then
    SIGKILL after 5 s) and no process of it may remain.
    """
    entry = everything_entry()
    mark = uuid.uuid4().hex
    with log.open("wb") as out:
        process = subprocess.Popen(
            _command(entry, "streamableHttp"),
            env=_environment(mark, PORT=str(port)),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield f"http://127.0.0.1:{_wait_for_port(process, log)}/mcp"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        _assert_none_left(mark)


def _wait_for_port(process: subprocess.Popen[bytes], log: Path) -> int:
    """The port the server reported, once it answers HTTP; fails if it exits or takes over 20 s."""
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"server-everything exited {process.returncode}: {_tail(log)}", pytrace=False)
        match = _LISTENING.search(log.read_text(errors="replace"))
        if match and _answers(int(match.group(1))):
            return int(match.group(1))
        time.sleep(0.05)
    pytest.fail(f"server-everything did not answer in {_START_TIMEOUT:.0f} s: {_tail(log)}", pytrace=False)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-2000:]


@pytest.fixture
def everything_stdio() -> Iterator[StdioServerParameters]:
    """Parameters that start server-everything over stdio; no server process may outlive the test."""
    from mcp.client.stdio import StdioServerParameters

    entry = everything_entry()
    mark = uuid.uuid4().hex
    command = _command(entry, "stdio")
    yield StdioServerParameters(command=command[0], args=command[1:], env={MARKER: mark})
    _assert_none_left(mark)


@pytest.fixture
def everything_http(tmp_path: Path) -> Iterator[str]:
    """The URL of a server-everything streamable HTTP endpoint on 127.0.0.1, stopped after the test."""
    with everything_http_server(tmp_path / "server-everything.log") as url:
        yield url
