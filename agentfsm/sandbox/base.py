"""The interface every sandbox implements, what an execution returns, and the parts both share.

Shared here because the two sandboxes must behave the same to the tools:
the output clipping (`OutputCapture`: streaming, so 10 MB of output never
piles up in memory) and the shell-session protocol (`SessionScript`: a
marker and the exit status printed after each command, so a persistent shell
can be driven without guessing when a command has finished).
"""

from __future__ import annotations

import asyncio
import codecs
import re
import secrets
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ..errors import OutsideWorkspaceError, SandboxError
from ..serde import Serializable
from . import worker

__all__ = [
    "CODE_GROUP",
    "EXEC_TAG",
    "KILL_TAGGED",
    "RESTARTED",
    "SHELL_EXITED",
    "WORKER_ENDED",
    "WORKER_GRACE_S",
    "WORKER_SOURCE",
    "ExecResult",
    "OutputCapture",
    "Sandbox",
    "SandboxError",
    "SessionScript",
    "WorkerRequest",
    "finish",
    "finish_despite_cancellation",
    "new_tag",
    "outside_workspace",
    "truncation_marker",
]

EXEC_TAG = "AGENTFSM_EXEC"
"""Environment variable every sandboxed process inherits: a token per command or shell session.

Process groups are not enough to find a command's processes again (a child
can call ``setsid``); the inherited token is, and `KILL_TAGGED` kills by it.
"""

KILL_TAGGED = r"""
import os, signal, sys
tag = b"\0AGENTFSM_EXEC=" + sys.argv[1].encode()
tag += b"" if tag.endswith(b".") else b"\0"
group = sys.argv[2].encode() if len(sys.argv) > 2 else None
me = os.getpid()
for sig in (signal.SIGSTOP, signal.SIGKILL, signal.SIGKILL):
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        found = False
        try:  # a snippet's environ is closed even to root (it changed user: not dumpable); its status is not
            with open(f"/proc/{pid}/environ", "rb") as fh:
                found = tag in b"\0" + fh.read()
        except OSError:
            pass
        try:
            if not found and group is not None:
                with open(f"/proc/{pid}/status", "rb") as fh:
                    found = any(l.startswith(b"Groups:") and group in l.split() for l in fh)
            if found:
                os.kill(int(pid), sig)
        except OSError:
            pass
"""
"""Python source: kill every process whose environment holds ``AGENTFSM_EXEC=<argv[1]>``, and with an
``argv[2]`` every process in that supplementary group (the Python worker's snippets, `worker.CODE_GROUP`:
a mark they cannot drop, where an environment can be rewritten in place).

An argument ending in ``.`` is a prefix: a sandbox's own prefix (`new_tag`)
finds every process any of its commands started. Stopping first, then
killing, so a fork bomb cannot outrun the scan. Run inside the container by
the Docker sandbox; the local one kills by ancestry as well (`reaper`).
"""


RESTARTED = "\n[the shell session was restarted: working directory and variables are reset]"
SHELL_EXITED = "\n[the shell exited; the next command starts a new session]"
WORKER_SOURCE = Path(worker.__file__).read_text(encoding="utf-8")
CODE_GROUP = worker.CODE_GROUP
"""The Python worker's source, run as ``python -u -c WORKER_SOURCE``: nothing of ours need be installed
where it runs, and the snippets' ``sys.path`` starts with their working directory, as ``python -`` does."""
WORKER_GRACE_S = worker.DRAIN_S + 2.0
"""How long after a snippet's timeout the host still waits for the worker's answer before it takes the
worker for hung and kills it: the worker's own drain allowance after its kill, and a margin for a loaded
machine, where the worker may get the processor late. Less, and a worker that did its job on time on a
busy machine would be killed and started again for nothing."""
WORKER_ENDED = "\n[the Python worker ended during this call; the next call starts a new one]"


@dataclass(slots=True, kw_only=True)
class ExecResult(Serializable):
    """The outcome of one command. Output is decoded text, already clipped to the sandbox's limit."""

    exit_code: int | None
    """None when the process was killed by the timeout or never reported a status."""
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    truncated: bool = False
    """True when stdout or stderr was clipped (the text then ends with a visible marker)."""
    oom_killed: bool = False
    """True when the memory limit killed the command (stderr then ends with a note saying so)."""
    duration_s: float = 0.0


class Sandbox(ABC):
    """A place to run commands and keep files, confined to `workspace`.

    Every path argument is resolved against `workspace`; a path that leaves
    it (through ``..`` or a symlink) raises `OutsideWorkspaceError` (a
    `PermissionError`) naming the path.
    Every `exec` has a timeout that really kills the process (and everything
    it started). Instances are single-use: after `close()` they stay closed.
    """

    kind: ClassVar[str]
    """``"docker"`` or ``"local"``."""
    workspace: str
    """The working directory, as seen by commands inside the sandbox."""
    python: str
    """The Python interpreter to run code with: ``python3`` in a container, `sys.executable` locally."""
    default_timeout: float
    """The timeout used when a call passes none."""

    @abstractmethod
    async def start(self) -> None:
        """Create the environment (idempotent)."""

    @abstractmethod
    async def close(self) -> None:
        """Destroy the environment and everything in it (idempotent, never raises on a gone sandbox)."""

    @abstractmethod
    async def exec(
        self, argv: list[str], *, timeout: float | None = None, stdin: str | None = None
    ) -> ExecResult:
        """Run `argv` in `workspace`; kill it (and its children) after `timeout` seconds."""

    async def run_python(self, code: str, *, timeout: float | None = None) -> ExecResult:
        """Run Python source as ``python -u -`` would, in `workspace`; kill it after `timeout` seconds.

        This default runs a new interpreter per call; the sandboxes override it
        with their worker (`agentfsm.sandbox.worker`), which forks one per call
        from a process started once.
        """
        return await self.exec([self.python, "-u", "-"], timeout=timeout, stdin=code)

    @abstractmethod
    async def bash(self, command: str, *, timeout: float | None = None) -> ExecResult:
        """Run `command` in this sandbox's persistent shell session (cwd and env persist).

        The command's stdin is /dev/null. On timeout the command is killed and
        the session restarted; the result says so (`timed_out`), and the next
        call gets a fresh shell.
        """

    @abstractmethod
    async def read_file(self, path: str) -> bytes:
        """The file's bytes; `FileNotFoundError` if missing, `IsADirectoryError` for a directory."""

    @abstractmethod
    async def write_file(self, path: str, data: bytes) -> None:
        """Create or replace a file (parents created) inside `workspace`."""

    @abstractmethod
    async def resolve(self, path: str) -> str:
        """The absolute path inside the sandbox; `OutsideWorkspaceError` if it leaves `workspace`."""

    async def __aenter__(self) -> Sandbox:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def truncation_marker(omitted: int) -> str:
    return f"\n... [output truncated: {omitted} more bytes]"


def outside_workspace(path: str, workspace: str) -> OutsideWorkspaceError:
    return OutsideWorkspaceError(f"path {path!r} is outside the sandbox workspace {workspace}: refused")


class OutputCapture:
    """One output stream, fed in chunks: keeps the first `limit` bytes and counts the rest.

    With an `end_marker` it also watches for the session protocol's marker
    line (`SessionScript`); only a short tail is kept for that, so the scan
    costs the same whatever the output's size. Whatever follows the marker is
    dropped. An `ended_marker` ends the output the same way: the line the
    shell around the container's own Python worker prints when that worker
    has ended (`docker_stream.CONTAINER_WORKER`), whose stream stays open.
    """

    _TAIL = 4096

    def __init__(self, limit: int, end_marker: str | None = None, ended_marker: str | None = None) -> None:
        self.limit = limit
        self.total = 0
        self._head = bytearray()
        self._tail = b""
        markers = b"|".join(re.escape(m.encode()) for m in (end_marker, ended_marker) if m)
        self._pattern = re.compile(rb"\n(" + markers + rb")(?: (-?\d+))?\n") if markers else None
        self.found = False
        self.marker: str | None = None
        """Which marker ended the output, once one has."""
        self.status: int | None = None
        """The exit status printed after the marker (stdout's marker carries one)."""

    def feed(self, data: bytes) -> bool:
        """Take a chunk; True once the end marker has been seen."""
        if self.found or not data:
            return self.found
        room = self.limit - len(self._head)
        if room > 0:
            self._head += data[:room]
        start = self.total - len(self._tail)
        self.total += len(data)
        if self._pattern is None:
            return False
        window = self._tail + data
        match = self._pattern.search(window)
        if match is None:
            self._tail = window[-self._TAIL :]
            return False
        self.found = True
        self.marker = match.group(1).decode()
        self.status = int(match.group(2)) if match.group(2) is not None else None
        self.total = start + match.start()  # the command's output ends where our marker line starts
        del self._head[self.total :]
        return True

    @property
    def omitted(self) -> int:
        return max(0, self.total - len(self._head))

    def text(self) -> str:
        """The kept output, decoded (an incomplete last character is dropped), plus the marker if clipped."""
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        if not self.omitted:
            return decoder.decode(bytes(self._head), final=True)
        return decoder.decode(bytes(self._head), final=False) + truncation_marker(self.omitted)


class SessionScript:
    """The protocol that drives a persistent ``bash`` through its stdin.

    Each command is passed as a quoted here-document and `eval`'d with stdin
    from /dev/null, so it can neither read the protocol's own lines nor leave
    the shell waiting for the rest of an unbalanced quote; then a fresh marker
    and the exit status are printed on stdout and the marker on stderr. A
    command is finished when both markers have arrived.
    """

    def __init__(self, command: str) -> None:
        token = secrets.token_hex(12)
        self.marker = f"__AGENTFSM_DONE_{token}__"
        delimiter = f"AGENTFSM_EOF_{token}"
        self.script = (
            f"__agentfsm_cmd=$(cat <<'{delimiter}'\n{command}\n{delimiter}\n)\n"
            'eval "$__agentfsm_cmd" </dev/null\n'
            f"__agentfsm_rc=$?; printf '\\n%s %d\\n' '{self.marker}' \"$__agentfsm_rc\"; "
            f"printf '\\n%s\\n' '{self.marker}' >&2\n"
        ).encode()

    def captures(self, limit: int) -> tuple[OutputCapture, OutputCapture]:
        return OutputCapture(limit, self.marker), OutputCapture(limit, self.marker)


class WorkerRequest:
    """One snippet for the Python worker (`agentfsm.sandbox.worker`): the bytes to send, the markers awaited.

    The worker answers like a shell session (`SessionScript`): the marker and
    the exit status on stdout, the marker on stderr; the status is
    `TIMED_OUT` when its timeout killed the snippet.
    """

    TIMED_OUT = -1
    """The worker's own `TIMED_OUT` (the script imports nothing from agentfsm)."""

    def __init__(self, code: str, timeout: float) -> None:
        source = code.encode()
        self.marker = f"__AGENTFSM_DONE_{secrets.token_hex(12)}__"
        self.data = f"{self.marker} {timeout:.3f} {len(source)}\n".encode() + source

    def captures(self, limit: int, ended: str | None = None) -> tuple[OutputCapture, OutputCapture]:
        """With `ended`, the line that says the worker itself ended ends the output too."""
        return OutputCapture(limit, self.marker, ended), OutputCapture(limit, self.marker, ended)

    def answered(self, out: OutputCapture, err: OutputCapture) -> bool:
        """Whether the worker answered this request on both streams (not ended before it could)."""
        return out.marker == err.marker == self.marker


def finish(
    code: int | None,
    out: OutputCapture,
    err: OutputCapture,
    *,
    began: float,
    timed_out: bool = False,
    limit: float = 0.0,
    oom_limit: str | None = None,
    note: str = "",
) -> ExecResult:
    """The `ExecResult` of a finished, killed or timed-out command, with a note saying which.

    `oom_limit` is the memory limit when the memory limit killed the command.
    """
    stderr = err.text()
    if timed_out:
        stderr += f"\n[killed: the command ran longer than its {limit:g} s timeout]"
    if oom_limit is not None:
        stderr += f"\n[killed: the command ran out of memory (the sandbox's limit is {oom_limit})]"
    return ExecResult(
        exit_code=None if timed_out else code,
        stdout=out.text(),
        stderr=stderr + note,
        timed_out=timed_out,
        truncated=bool(out.omitted or err.omitted),
        oom_killed=oom_limit is not None,
        duration_s=round(time.monotonic() - began, 3),
    )


async def finish_despite_cancellation(cleanup: asyncio.Future[None]) -> None:
    """Wait until `cleanup` has finished, however often the caller is cancelled meanwhile; then re-raise.

    `asyncio.shield` alone keeps the cleanup running but lets a second
    cancellation (or an anyio cancel scope, which cancels again at every
    await) return control while it still runs: the caller, and then the event
    loop's shutdown, go on as if it were done, and workspaces and processes
    leak. Here the caller's cancellation is held until the cleanup is over,
    then delivered. A cleanup that is itself cancelled (the loop shutting
    down) ends the wait.
    """
    interrupted: asyncio.CancelledError | None = None
    held = 0
    while not cleanup.done():
        try:
            await asyncio.wait([cleanup])  # never cancels `cleanup` itself
        except asyncio.CancelledError as exc:
            interrupted, held = exc, held + 1
            if held > 1:
                # Cancelled again at once (an anyio cancel scope re-cancels at every await): a short
                # blocking pause, so this loop does not keep the cleanup's threads from the GIL.
                time.sleep(0.002)
    if interrupted is not None:
        task = asyncio.current_task()
        for _ in range(held - 1):  # the cancellations held and not re-raised are withdrawn, as asyncio
            if task is not None:  # asks of code that swallows one (an anyio scope counts them)
                task.uncancel()
        raise interrupted
    cleanup.result()


def new_tag(prefix: str = "") -> str:
    """A fresh value for `EXEC_TAG`; with a sandbox's `prefix` (ending in ``.``), findable by it too."""
    return prefix + secrets.token_hex(12)
