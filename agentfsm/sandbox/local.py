"""The sandbox for machines without Docker: subprocesses confined to a workspace directory.

What it guarantees: commands run with the workspace as their working
directory, in their own session, with a minimal environment (the host's
API keys are not inherited); each runs under its own supervisor
(`reaper`, a child subreaper), so a timeout kills the command and
everything it started, and `close()` everything any command started, even
daemons that left the session and cleared their environment; if this
process dies, the supervisors kill their processes too; output is clipped
while it streams; file operations refuse any path outside
the workspace, through ``..`` or symlinks. What it cannot guarantee: memory,
process-count and network limits, or that a command does not read or write
elsewhere on the host, nor catch a process that another service starts
on the command's behalf (``systemd-run``, ``at``, a Docker engine): that is
what the Docker sandbox is for.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path

from ..errors import NotAFileError, SandboxError
from . import reaper
from .base import (
    EXEC_TAG,
    RESTARTED,
    SHELL_EXITED,
    WORKER_ENDED,
    WORKER_GRACE_S,
    WORKER_SOURCE,
    ExecResult,
    OutputCapture,
    Sandbox,
    SessionScript,
    WorkerRequest,
    finish,
    finish_despite_cancellation,
    new_tag,
    outside_workspace,
)

__all__ = ["TEMP_PREFIX", "LocalSandbox"]

TEMP_PREFIX = f"agentfsm-sandbox-{os.getpid()}-"
"""Temporary workspaces are named after the process that made them, so leftovers are attributable."""

_SHELL = ["bash", "--noprofile", "--norc"]
_REAPER = os.path.abspath(reaper.__file__)
"""Run as a script (``python -I -S``): the supervisor every command runs under."""
_DRAIN_S = 2.0
"""After a kill, how long the output pipes may take to close before they are abandoned."""


class LocalSandbox(Sandbox):
    """Subprocesses in a workspace directory: a temporary one (removed on close) or `workspace_dir`."""

    kind = "local"

    def __init__(
        self,
        workspace_dir: str | Path | None = None,
        *,
        output_limit: int = 100_000,
        timeout: float = 60.0,
    ) -> None:
        self._given = Path(workspace_dir) if workspace_dir is not None else None
        self.output_limit = output_limit
        self.default_timeout = timeout
        self.python = sys.executable
        self.workspace = ""
        self._owned = False
        self._closed = False
        self._closing: asyncio.Future[None] | None = None
        self._shell: _Process | None = None
        self._shell_tag = ""
        self._shell_lock = asyncio.Lock()
        self._worker: _Process | None = None
        """The Python worker (`agentfsm.sandbox.worker`), under its supervisor like any command."""
        self._worker_tag = ""
        self._worker_lock = asyncio.Lock()
        self._running: set[_Process] = set()
        """Every command whose supervisor still runs (it holds what the command left running)."""
        self._tags = new_tag() + "."  # every command's tag starts so: close() kills what they left running
        self._abandoned: weakref.finalize[..., LocalSandbox] | None = None
        """What `close()` does, done anyway if the sandbox is dropped, or the interpreter exits, unclosed."""

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        if self._closed:
            raise SandboxError("this sandbox was closed; create a new one")
        if self.workspace:
            return
        if self._given is None:
            self.workspace = os.path.realpath(tempfile.mkdtemp(prefix=TEMP_PREFIX))
            self._owned = True
        else:
            self._given.mkdir(parents=True, exist_ok=True)
            self.workspace = os.path.realpath(self._given)
        self._abandoned = weakref.finalize(self, _abandon, self._running, self._tags, self._removable())

    def _removable(self) -> str | None:
        return self.workspace if self._owned and self.workspace else None

    async def close(self) -> None:
        """Kill every process the sandbox started and remove its temporary workspace.

        The cleanup is one task, started once: a caller cancelled again
        meanwhile waits for it to end all the same (`finish_despite_cancellation`),
        and a second `close()` waits for the same task instead of returning early.
        """
        if self._closing is None:
            self._closed = True
            self._closing = asyncio.ensure_future(self._destroy())
        await finish_despite_cancellation(self._closing)

    async def _destroy(self) -> None:
        self._shell = self._worker = None
        running = list(self._running)
        # One blocking call in a thread: once begun it ends, even if the loop is torn down meanwhile.
        await asyncio.to_thread(self._destroy_sync, [proc.pid for proc in running])
        for proc in running:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(proc.supervisor_exited), _DRAIN_S)
            proc.close()

    def _destroy_sync(self, supervisors: list[int]) -> None:
        if self._abandoned is not None:
            self._abandoned.detach()
        _kill(supervisors, self._tags)
        removable = self._removable()
        if removable is not None:
            shutil.rmtree(removable, True)

    # -- commands -------------------------------------------------------------------

    async def exec(
        self, argv: list[str], *, timeout: float | None = None, stdin: str | None = None
    ) -> ExecResult:
        await self._ensure_started()
        limit = self.default_timeout if timeout is None else timeout
        tag = new_tag(self._tags)
        began = time.monotonic()
        try:
            proc = await self._spawn(argv, tag, stdin=stdin is not None)
        except OSError as exc:
            return ExecResult(exit_code=127, stderr=f"cannot run {argv[0]!r}: {exc}")
        timed_out = False
        try:
            if stdin is not None:
                proc.send(stdin.encode(), close=True)
            try:  # once it ends, its supervisor kills what it left in its process group
                await asyncio.wait_for(asyncio.shield(proc.exited), limit)
            except TimeoutError:
                timed_out = True
                await proc.kill(tag)
            await proc.drained()
        except BaseException:
            await proc.kill(tag)
            raise
        finally:
            proc.close()
        if proc.error is not None:
            return ExecResult(exit_code=127, stderr=f"cannot run {argv[0]!r}: {proc.error}")
        return finish(proc.returncode, proc.out, proc.err, began=began, timed_out=timed_out, limit=limit)

    async def bash(self, command: str, *, timeout: float | None = None) -> ExecResult:
        await self._ensure_started()
        limit = self.default_timeout if timeout is None else timeout
        async with self._shell_lock:
            if self._shell is None or self._shell.exited.done():
                await self._stop_shell()
                self._shell_tag = new_tag(self._tags)
                self._shell = await self._spawn(_SHELL, self._shell_tag, stdin=True)
            shell = self._shell
            script = SessionScript(command)
            out, err = script.captures(self.output_limit)
            answered = shell.expect(out, err)
            began = time.monotonic()
            shell.send(script.script)
            try:
                await asyncio.wait_for(asyncio.shield(answered), limit)
            except TimeoutError:
                await self._stop_shell()
                return finish(None, out, err, began=began, timed_out=True, limit=limit, note=RESTARTED)
            except BaseException:
                await self._stop_shell()
                raise
            if out.found and err.found:
                return finish(out.status, out, err, began=began)
            # The shell ended before the markers: the command ran `exit` (or killed the shell).
            await shell.drained()
            await self._stop_shell()
            return finish(shell.returncode, out, err, began=began, note=SHELL_EXITED)

    async def run_python(self, code: str, *, timeout: float | None = None) -> ExecResult:
        """The snippet in a child of this sandbox's Python worker, started on the first call.

        A fork instead of a supervisor and an interpreter per call. The worker
        kills a snippet at its timeout and stays; a worker that does not answer
        a moment later, or dies, is killed with all it started, and the next
        call starts a new one.
        """
        await self._ensure_started()
        limit = self.default_timeout if timeout is None else timeout
        async with self._worker_lock:
            if self._worker is None or self._worker.exited.done():
                await self._stop_worker()
                self._worker_tag = new_tag(self._tags) + ".worker"  # its calls: the tag's prefix, then N
                argv = [sys.executable, "-u", "-c", WORKER_SOURCE]
                self._worker = await self._spawn(argv, self._worker_tag, stdin=True)
            worker = self._worker
            request = WorkerRequest(code, limit)
            out, err = request.captures(self.output_limit)
            answered = worker.expect(out, err)
            began = time.monotonic()
            worker.send(request.data)
            try:
                await asyncio.wait_for(asyncio.shield(answered), limit + WORKER_GRACE_S)
            except TimeoutError:
                await self._stop_worker()
                return finish(None, out, err, began=began, timed_out=True, limit=limit)
            except BaseException:
                await self._stop_worker()
                raise
            if out.found and err.found:
                status = out.status
                if status == WorkerRequest.TIMED_OUT:
                    return finish(None, out, err, began=began, timed_out=True, limit=limit)
                return finish(status, out, err, began=began)
            await worker.drained()  # the worker ended before its markers: killed, or killed by the snippet
            await self._stop_worker()
            return finish(worker.returncode, out, err, began=began, note=WORKER_ENDED)

    async def _stop_worker(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            await worker.kill(self._worker_tag)
            worker.close()

    async def _spawn(self, argv: list[str], tag: str, *, stdin: bool) -> _Process:
        """Start `argv` under its own supervisor, which tells us its pid and status through a pipe."""
        loop = asyncio.get_running_loop()
        proc = _Process(loop, self.output_limit)
        status_read, status_write = os.pipe()
        try:
            await loop.subprocess_exec(
                lambda: proc,
                sys.executable,
                "-I",
                "-S",
                _REAPER,
                str(os.getpid()),
                str(status_write),
                *argv,
                cwd=self.workspace,
                env=self._environment(tag),
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                pass_fds=(status_write,),
            )
        except BaseException:
            os.close(status_read)
            raise
        finally:
            os.close(status_write)
        proc.watch_status(status_read)
        running = self._running  # not `self`: the callback must not keep an abandoned sandbox alive
        running.add(proc)
        proc.supervisor_exited.add_done_callback(lambda _: running.discard(proc))
        return proc

    async def _stop_shell(self) -> None:
        shell, self._shell = self._shell, None
        if shell is not None:
            await shell.kill(self._shell_tag)
            shell.close()

    def _environment(self, tag: str) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": self.workspace, EXEC_TAG: tag}
        env["LANG"] = os.environ.get("LANG", "C.UTF-8")
        return env

    async def _ensure_started(self) -> None:
        if not self.workspace:
            await self.start()
        elif self._closed:
            raise SandboxError("this sandbox was closed; create a new one")

    # -- files ----------------------------------------------------------------------

    async def resolve(self, path: str) -> str:
        await self._ensure_started()
        real = os.path.realpath(os.path.join(self.workspace, path))
        if real != self.workspace and not real.startswith(self.workspace + os.sep):
            raise outside_workspace(path, self.workspace)
        return real

    async def read_file(self, path: str) -> bytes:
        real = await self.resolve(path)
        return await asyncio.to_thread(_read_nofollow, real)

    async def write_file(self, path: str, data: bytes) -> None:
        real = await self.resolve(path)
        if real == self.workspace:
            raise NotAFileError(f"{path!r} is the workspace directory itself, not a file")
        await asyncio.to_thread(os.makedirs, os.path.dirname(real), exist_ok=True)
        await self.resolve(os.path.dirname(real))  # a symlinked parent swapped in meanwhile is refused
        await asyncio.to_thread(_write_nofollow, real, data)


def _read_nofollow(real: str) -> bytes:
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def _write_nofollow(real: str, data: bytes) -> None:
    fd = os.open(real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


class _Process(asyncio.SubprocessProtocol):
    """One command under its supervisor: output goes straight into the captures (bounded memory).

    A protocol rather than asyncio's `Process`: on Python 3.11 `Process.wait()`
    returns only once every pipe has closed, so a background child holding
    stdout would make a finished command look like a hung one. The child
    process is the supervisor; the command's own end comes through the status
    pipe (`exited`), and the supervisor's end later, once nothing the command
    left is running (`supervisor_exited`).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self.out, self.err = OutputCapture(limit), OutputCapture(limit)
        self.exited: asyncio.Future[None] = loop.create_future()
        """The command has ended (or its supervisor has, or could not start it)."""
        self.closed: asyncio.Future[None] = loop.create_future()
        """Its stdout and stderr are closed: every process holding them has ended or let go."""
        self.supervisor_exited: asyncio.Future[None] = loop.create_future()
        self.error: str | None = None
        """Why the command could not be started, if it could not."""
        self._code: int | None = None
        self._open_pipes = {1, 2}
        self._status = b""
        self._status_fd = -1
        self._loop = loop
        self._answered: asyncio.Future[None] | None = None
        self.transport: asyncio.SubprocessTransport | None = None

    def watch_status(self, fd: int) -> None:
        self._status_fd = fd
        os.set_blocking(fd, False)
        self._loop.add_reader(fd, self._status_ready)

    def _status_ready(self) -> None:
        try:
            data = os.read(self._status_fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the command ended, or its supervisor did
            self._loop.remove_reader(self._status_fd)
            os.close(self._status_fd)
            self._exited()
            return
        self._status += data
        *lines, self._status = self._status.split(b"\n")
        for line in lines:
            word, _, rest = line.decode("utf-8", "replace").partition(" ")
            if word == "error":
                self.error = rest
            elif word == "exit":
                self._code = int(rest)
                self._exited()

    def _exited(self) -> None:
        _resolve(self.exited)
        self._answer()

    # protocol callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.SubprocessTransport)
        self.transport = transport

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        (self.err if fd == 2 else self.out).feed(data)
        if self.out.found and self.err.found:
            self._answer()

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open_pipes.discard(fd)
        if not self._open_pipes:
            _resolve(self.closed)

    def process_exited(self) -> None:
        _resolve(self.supervisor_exited)
        self._exited()

    def connection_lost(self, exc: Exception | None) -> None:
        _resolve(self.closed)
        _resolve(self.supervisor_exited)
        self._exited()
        self.close()  # all is over: closing now kills nothing

    # use
    @property
    def pid(self) -> int:
        assert self.transport is not None
        return self.transport.get_pid()

    @property
    def returncode(self) -> int | None:
        """The command's exit status (negative: killed by that signal); else its supervisor's."""
        if self._code is not None:
            return self._code
        return self.transport.get_returncode() if self.transport is not None else None

    def expect(self, out: OutputCapture, err: OutputCapture) -> asyncio.Future[None]:
        """Feed the next output to these captures; the future resolves when both markers have arrived."""
        self.out, self.err = out, err
        self._answered = asyncio.get_running_loop().create_future()
        if self.exited.done():
            self._answer()
        return self._answered

    def _answer(self) -> None:
        if self._answered is not None:
            _resolve(self._answered)

    def send(self, data: bytes, *, close: bool = False) -> None:
        assert self.transport is not None
        pipe = self.transport.get_pipe_transport(0)
        if not isinstance(pipe, asyncio.WriteTransport) or pipe.is_closing():
            return
        with contextlib.suppress(ConnectionError):
            pipe.write(data)
        if close:
            pipe.close()

    async def kill(self, tag: str) -> None:
        """SIGKILL everything below the supervisor and everything carrying the tag, then the supervisor."""
        if not self.supervisor_exited.done():
            await asyncio.to_thread(_kill, [self.pid], tag)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.exited), _DRAIN_S)

    async def drained(self) -> None:
        """Wait a moment for the pipes to close; a child that dropped its tag may hold them forever."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.closed), _DRAIN_S)

    def close(self) -> None:
        """Release the transport once the supervisor has ended; before, closing it would kill the
        supervisor alone and hand what it holds to init."""
        if self.transport is not None and self.supervisor_exited.done():
            self.transport.close()


def _kill(supervisors: list[int], tag: str) -> None:
    """Kill what these supervisors (children of this process) hold, then them; and whatever carries `tag`."""
    if sys.platform.startswith("linux"):
        reaper.kill_tree(supervisors, tag, parent=os.getpid())


def _abandon(running: set[_Process], tags: str, workspace: str | None) -> None:
    """A sandbox dropped or left open at exit: kill what it started, remove its temporary workspace.

    Run by `weakref.finalize` (garbage collection, or the interpreter's exit),
    so it blocks: it is the safety net of a sandbox whose owner never called
    `close()`, such as an agent kept alive between runs and never closed.
    """
    supervisors = []
    for proc in list(running):
        with contextlib.suppress(Exception):
            supervisors.append(proc.pid)
    _kill(supervisors, tags)
    if workspace is not None:
        shutil.rmtree(workspace, True)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
