"""The hardened Docker sandbox: one container per agent session.

Hardening, all on by default (see `Engine._run` for the container's
settings): no network (loopback only) unless `network`; a memory limit with
swap limited to the same value; a CPU quota; a pids limit; every capability
dropped; no-new-privileges; a non-root user for every command and snippet (the Python worker alone
runs as root, holding only what it needs to start each snippet as that user and kill what the snippet
left: see `agentfsm.sandbox.worker`), and another for the ``bash`` tool's shell, so that no snippet can
reach into the shell and forge its results (`SandboxSettings.shell_user`); a read-only root filesystem
whose only writable places are the workspace (a labelled volume) and a small
/tmp tmpfs; an init process that reaps orphans.

Every command has two timeouts: ``timeout -s KILL`` inside the container
(which kills the command's whole process group), and a host-side watchdog a
moment later that kills every process carrying the command's tag and cuts
the connection, so nothing — not a child that left the process group, not a
hung engine stream — outlives its timeout. The persistent shell has only the
host-side one (a shell session has no single process to wrap). The Python
worker (`run_python`) kills its own snippets at their timeout; the host-side
watchdog, a moment later, kills the worker and all it started if it did not
answer.

The first worker is the container's own command (`Engine`, `CONTAINER_WORKER`),
on the container's stdin and stdout, attached before the start: the first
``python_execute`` of a sandbox needs no exec. A shell around it outlives it,
says when it has ended, and keeps the container running; the workers after it
are started through exec.

Blocking SDK calls run in threads (`asyncio.to_thread`), so the event loop
never blocks. Start and destroy never overlap, and a destroy that has begun
finishes even if the task awaiting it is cancelled.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import posixpath
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ..errors import NotAFileError, SandboxError, SandboxPathError
from ..log import event
from .base import (
    RESTARTED,
    SHELL_EXITED,
    WORKER_ENDED,
    WORKER_GRACE_S,
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
from .docker_engine import INTERNAL_TIMEOUT_S, Engine
from .docker_stream import (
    PATH_HELPER,
    RUN,
    SHELL,
    WORKER_USER,
    ExecStream,
    Run,
    converse,
    first_line,
    retrieve,
    send_and_close,
    worker_argv,
)
from .settings import SandboxSettings

__all__ = ["DockerSandbox"]

_T = TypeVar("_T")
_GRACE_S = 1.0
"""The host-side watchdog fires this long after the in-container timeout should have."""


@dataclass(slots=True)
class _Worker:
    """The Python worker in use: its stream, how to kill it, and how its end shows."""

    stream: ExecStream
    run: Run
    exec_id: str | None
    """Its exec, whose exit code is the worker's; None for the container's own worker."""
    ended: str | None = None
    """The container's own worker: the line its shell prints once it has ended (the stream stays open)."""


class DockerSandbox(Sandbox):
    """A container made on `start()` and removed, with its volume, on `close()`."""

    kind = "docker"

    def __init__(self, settings: SandboxSettings | None = None) -> None:
        self.settings = settings or SandboxSettings()
        self.workspace = self.settings.workspace
        self.python = "python3"
        self.default_timeout = self.settings.timeout
        self.session_id = uuid.uuid4().hex[:12]
        self._engine: Engine | None = None
        self._lifecycle = threading.Lock()  # start and destroy never overlap
        self._closed = False
        self._closing: asyncio.Future[None] | None = None
        self._shell: tuple[ExecStream, str, Run] | None = None  # stream, exec id, how to kill it
        self._shell_lock = asyncio.Lock()
        self._worker: _Worker | None = None
        self._worker_lock = asyncio.Lock()
        self._oom_seen = 0
        self._abandoned: weakref.finalize[..., DockerSandbox] | None = None
        """Removes the container if the sandbox is dropped, or the interpreter exits, without `close()`."""

    @property
    def container_name(self) -> str:
        """Also the name of its volume."""
        return f"agentfsm-sandbox-{self.session_id}"

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        if self._closed:
            raise SandboxError("this sandbox was closed; create a new one")
        if self._engine is not None:
            return
        try:
            await asyncio.to_thread(self._start_sync)
        except BaseException:
            await self.close()  # also when cancelled: waits for the half-made container, then removes it
            raise

    def _start_sync(self) -> None:
        with self._lifecycle:
            if self._closed:
                raise SandboxError("this sandbox was closed while starting")
            if self._engine is None:
                self._engine = Engine.create(self.settings, self.session_id)
                self._oom_seen = 0  # a new container's memory cgroup has killed nothing yet
                self._abandoned = weakref.finalize(self, _abandon, self._engine)
                event("sandbox_started", kind="docker", session=self.session_id, image=self.settings.image)

    async def close(self) -> None:
        if self._closing is None:
            self._closed = True
            self._drop_shell()
            self._drop_worker()
            self._closing = asyncio.ensure_future(asyncio.to_thread(self._destroy_sync))
        await finish_despite_cancellation(self._closing)  # a cancelled caller waits for the removal

    def _destroy_sync(self) -> None:
        with self._lifecycle:
            if self._abandoned is not None:
                self._abandoned.detach()
            engine, self._engine = self._engine, None
            if engine is not None:
                engine.destroy()

    async def _started(self) -> Engine:
        if self._engine is None:
            await self.start()
        if self._closed or self._engine is None:
            raise SandboxError("this sandbox was closed; create a new one")
        return self._engine

    # -- commands -------------------------------------------------------------------

    async def exec(
        self, argv: list[str], *, timeout: float | None = None, stdin: str | None = None
    ) -> ExecResult:
        engine = await self._started()
        limit = self.default_timeout if timeout is None else timeout
        run = Run(new_tag())
        out, err = OutputCapture(self.settings.output_limit), OutputCapture(self.settings.output_limit)
        wrapped = ["sh", "-c", RUN, f"{limit:.3f}", *argv]
        data = stdin.encode() if stdin is not None else None
        began = time.monotonic()
        code, cut = await self._supervised(
            lambda: _exec_sync(engine, run, wrapped, data, out, err), run, limit + _GRACE_S
        )
        oom = code == 137 and await asyncio.to_thread(self._oom_happened, engine)
        timed_out = cut or (code == 137 and not oom and time.monotonic() - began >= limit)
        return finish(
            code, out, err, began=began, timed_out=timed_out, limit=limit, oom_limit=self._oom_note(oom)
        )

    async def bash(self, command: str, *, timeout: float | None = None) -> ExecResult:
        engine = await self._started()
        limit = self.default_timeout if timeout is None else timeout
        async with self._shell_lock:
            stream, exec_id, run = await asyncio.to_thread(self._ensure_shell, engine)
            script = SessionScript(command)
            out, err = script.captures(self.settings.output_limit)
            began = time.monotonic()
            try:
                finished, cut = await self._supervised(
                    lambda: converse(stream, script.script, out, err), run, limit
                )
            except BaseException:
                self._drop_shell()
                raise
            if cut:
                self._drop_shell()
                return finish(None, out, err, began=began, timed_out=True, limit=limit, note=RESTARTED)
            code = out.status
            if not finished:
                self._drop_shell()
                code = await asyncio.to_thread(engine.exit_code, exec_id)
            oom = code == 137 and await asyncio.to_thread(self._oom_happened, engine)
            note = "" if finished else SHELL_EXITED
            return finish(code, out, err, began=began, oom_limit=self._oom_note(oom), note=note)

    async def run_python(self, code: str, *, timeout: float | None = None) -> ExecResult:
        """The snippet in a child of the sandbox's Python worker: the container's own, then exec'd ones.

        The worker kills a snippet at its timeout and stays; the host-side
        watchdog (a moment later) and cancellation kill the worker and all it
        started, and the next call starts a new one, as does a worker that
        died (the memory limit, a snippet that killed it); what a dead
        worker's calls left running is killed with it.
        """
        engine = await self._started()
        limit = self.default_timeout if timeout is None else timeout
        async with self._worker_lock:
            worker = await asyncio.to_thread(self._ensure_worker, engine)
            request = WorkerRequest(code, limit)
            out, err = request.captures(self.settings.output_limit, worker.ended)
            began = time.monotonic()
            try:
                talk = functools.partial(converse, worker.stream, request.data, out, err)
                _, cut = await self._supervised(talk, worker.run, limit + WORKER_GRACE_S)
            except BaseException:
                self._drop_worker()
                raise
            if cut:
                self._drop_worker()
                return finish(None, out, err, began=began, timed_out=True, limit=limit)
            status = out.status
            answered = request.answered(out, err)
            if not answered:  # the worker ended: its status is its shell's word, or its exec's
                self._drop_worker()
                if not out.found and worker.exec_id is not None:
                    status = await asyncio.to_thread(engine.exit_code, worker.exec_id)
                await self._abort(Run(worker.run.tag, snippets=True))
            if status == WorkerRequest.TIMED_OUT:
                return finish(None, out, err, began=began, timed_out=True, limit=limit)
            oom = status in (137, None) and await asyncio.to_thread(self._oom_happened, engine)
            note = "" if answered else WORKER_ENDED
            return finish(status, out, err, began=began, oom_limit=self._oom_note(oom), note=note)

    def _ensure_worker(self, engine: Engine) -> _Worker:
        if self._worker is None:
            own = engine.take_worker()
            if own is not None:
                try:
                    group = int(first_line(own, "Python worker", "python3"))
                except (SandboxError, ValueError):  # it did not start: one through exec says why
                    own.close()
                else:
                    run = Run(engine.worker_tag, own, group, snippets=True)
                    self._worker = _Worker(own, run, None, engine.worker_ended)
                    return self._worker
            prefix = new_tag() + "."  # the worker is PREFIX.worker, each call's processes PREFIX.N
            argv = worker_argv(self.settings.user)
            exec_id, stream = engine.open_exec(argv, prefix + "worker", stdin=True, user=WORKER_USER)
            try:
                group = int(first_line(stream, "Python worker", "python3"))
            except (SandboxError, ValueError):
                stream.close()
                raise
            self._worker = _Worker(stream, Run(prefix, stream, group, snippets=True), exec_id)
        return self._worker

    def _drop_worker(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.stream.close()

    def _ensure_shell(self, engine: Engine) -> tuple[ExecStream, str, Run]:
        if self._shell is None:
            tag = new_tag()
            exec_id, stream = engine.open_exec(SHELL, tag, stdin=True, user=self.settings.shell_identity)
            try:
                group = int(first_line(stream))
            except (SandboxError, ValueError):
                stream.close()
                raise
            self._shell = (stream, exec_id, Run(tag, stream, group))
        return self._shell

    def _drop_shell(self) -> None:
        shell, self._shell = self._shell, None
        if shell is not None:
            shell[0].close()

    async def _supervised(self, work: Callable[[], _T], run: Run, deadline: float) -> tuple[_T | None, bool]:
        """Run blocking `work` in a thread; past `deadline` s (or on cancellation) kill its processes.

        Returns (its result, False), or (None, True) when the watchdog had to cut it.
        """
        task = asyncio.ensure_future(asyncio.to_thread(work))
        task.add_done_callback(retrieve)
        try:
            done, _ = await asyncio.wait({task}, timeout=deadline)
        except asyncio.CancelledError:
            await self._abort(run)
            raise
        if done:
            return task.result(), False
        await self._abort(run)
        await asyncio.wait({task}, timeout=INTERNAL_TIMEOUT_S)
        return None, True

    async def _abort(self, run: Run) -> None:
        """Kill every process carrying the run's tag, then cut its stream. Never raises."""
        try:
            engine = self._engine
            if engine is not None:
                await asyncio.to_thread(
                    functools.partial(engine.kill, run.tag, run.group, snippets=run.snippets)
                )
        except Exception as exc:  # the container may be gone already: nothing left to kill
            event("sandbox_kill_failed", level=logging.WARNING, session=self.session_id, error=str(exc))
        finally:
            run.abort()

    def _oom_happened(self, engine: Engine) -> bool:
        """Whether the memory limit killed something since the last check (exit 137 alone is ambiguous)."""
        count = engine.oom_count()
        happened, self._oom_seen = count > self._oom_seen, max(count, self._oom_seen)
        return happened

    def _oom_note(self, oom: bool) -> str | None:
        return self.settings.memory if oom else None

    # -- files ----------------------------------------------------------------------

    async def resolve(self, path: str) -> str:
        return await self._resolve(path, "r")

    async def _resolve(self, path: str, mode: str) -> str:
        """Refuse lexically first (no round trip), then resolve symlinks where they live: in the container."""
        lexical = posixpath.normpath(posixpath.join(self.workspace, path))
        if lexical != self.workspace and not lexical.startswith(self.workspace + "/"):
            raise outside_workspace(path, self.workspace)
        engine = await self._started()
        argv = ["python3", "-c", PATH_HELPER, self.workspace, path, mode]
        code, stdout, stderr = await asyncio.to_thread(engine.simple, argv)
        if code == 3:
            raise outside_workspace(path, self.workspace)
        if code == 4:
            raise NotAFileError(f"{path!r} is the workspace directory itself, not a file")
        if code != 0:
            problem = stderr.decode(errors="replace").strip()
            raise SandboxPathError(f"cannot resolve {path!r} in the sandbox: {problem}")
        return stdout.decode()

    async def read_file(self, path: str) -> bytes:
        real = await self._resolve(path, "r")
        return await asyncio.to_thread(self._need_engine().get, path, real)

    async def write_file(self, path: str, data: bytes) -> None:
        real = await self._resolve(path, "w")
        await asyncio.to_thread(self._need_engine().put, real, data)

    def _need_engine(self) -> Engine:
        if self._engine is None:
            raise SandboxError("the sandbox container is gone (closed, or never started)")
        return self._engine


def _abandon(engine: Engine) -> None:
    """A sandbox dropped or left open at exit: remove its container and volume.

    Run by `weakref.finalize` (garbage collection, or the interpreter's exit),
    so it blocks: it is the safety net of a sandbox whose owner never called
    `close()`, such as an agent kept alive between runs and never closed. What
    even this misses (the process killed) the next process's sweep removes.
    """
    event("sandbox_abandoned", level=logging.WARNING, session=engine.session, hint="close the agent (aclose)")
    engine.destroy()


def _exec_sync(
    engine: Engine, run: Run, argv: list[str], stdin: bytes | None, out: OutputCapture, err: OutputCapture
) -> int | None:
    """Stream one command's output into the captures; its exit code (None if it was cut)."""
    exec_id, stream = engine.open_exec(argv, run.tag, stdin=stdin is not None)
    run.attach(stream)
    try:
        if stdin is not None:
            threading.Thread(target=send_and_close, args=(stream, stdin), daemon=True).start()
        while (frame := stream.read_frame()) is not None:
            (err if frame[0] == 2 else out).feed(frame[1])
    finally:
        stream.close()
    return engine.exit_code(exec_id)
