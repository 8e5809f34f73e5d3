"""One agent's sandbox and its lifetime: created on first use, destroyed by rule.

Upstream keeps one global sandbox for the process, destroys it after every
run and leaks it when a run raises. Here each agent owns a `SandboxSession`:
the first tool that needs the sandbox creates it (exactly once, even when
several tools ask at the same time); the agent calls `end_run()` at the end
of every run, which keeps it when ``keep_alive`` is on (the default) and the
run went well, and destroys it otherwise (always when the run failed or was
cancelled); `close()` (the agent's
``aclose()`` / ``async with``) destroys it for good. A session can be used
again after `close()`: the next `get()` makes a fresh sandbox.

The kind of sandbox is decided once per session: by the mode, or, for
``auto``, at the first sandbox (Docker when an engine answers and the image
exists, else local, with one warning), and every later sandbox of the session
is of that kind. So a session that ran in Docker never goes on on the host
because the engine went away between two runs (its tools fail instead);
`record` is what a checkpoint keeps of that decision, and `resume_from` puts a
checkpoint's back before a resumed run (`agentfsm.sandbox.record`).

A sandbox kept between runs whose agent is never closed is closed with its
event loop: the session holds a small async generator, started with the
sandbox, whose ``finally`` closes it, and `asyncio.run` (like any loop
shut down by the book) closes every open async generator before the loop
ends (`loop.shutdown_asyncgens`), while it can still run the close.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator

from ..errors import CheckpointError
from ..log import event
from .base import Sandbox, finish_despite_cancellation
from .local import LocalSandbox
from .record import SandboxRecord, resumed_settings
from .settings import SandboxSettings

__all__ = ["SandboxSession", "docker_unavailable"]


class SandboxSession:
    """The sandbox of one agent, made on demand according to `settings.mode`."""

    def __init__(self, settings: SandboxSettings | None = None) -> None:
        self.settings = settings or SandboxSettings()
        self._given = self.settings
        """The settings the session was made with: each resume starts from them, not from the last's."""
        self._sandbox: Sandbox | None = None
        self._lock = asyncio.Lock()
        self._guard: _LoopEndGuard | None = None
        self._kind: str | None = None
        """The kind ``auto`` decided at the session's first sandbox (None: not yet, or not auto)."""

    @property
    def record(self) -> SandboxRecord | None:
        """Where this session's commands run (`SandboxRecord`), as a checkpoint records it: the
        mode's kind, or the one ``auto`` decided; None while ``auto`` has not decided yet."""
        return SandboxRecord.of(self.settings, self._kind)

    def resume_from(self, record: SandboxRecord | None) -> None:
        """Before a run resumed from a checkpoint: run where `record` (the checkpoint's) says, under
        `resumed_settings`. `CheckpointError` if this session has a sandbox open that is not there."""
        settings = resumed_settings(self._given, record)
        if settings == self.settings:
            return
        now = self.record
        if self._sandbox is not None and now != SandboxRecord.of(settings):
            raise CheckpointError(
                f"the checkpoint's run used {record.describe() if record else 'another sandbox'}, but this "
                f"agent has {now.describe() if now else 'a sandbox'} open: close the agent (aclose) before "
                "resuming, or resume on a new agent"
            )
        self.settings, self._kind = settings, None

    @property
    def active(self) -> bool:
        """Whether a sandbox exists now (made and not yet destroyed)."""
        return self._sandbox is not None

    @property
    def keep_alive(self) -> bool:
        return self.settings.keep_alive

    async def get(self) -> Sandbox:
        """The sandbox, made and started on the first call."""
        sandbox = self._sandbox
        if sandbox is not None:
            return sandbox
        async with self._lock:
            if self._sandbox is None:
                made = await self._make()
                try:
                    await made.start()
                except BaseException:
                    await finish_despite_cancellation(asyncio.ensure_future(made.close()))
                    raise
                self._sandbox = made
                self._guard = await _LoopEndGuard.start(self)
            return self._sandbox

    async def _make(self) -> Sandbox:
        mode = self._kind or self.settings.mode
        if mode == "auto":  # decided once: the session's later sandboxes are of the same kind
            reason = await asyncio.to_thread(docker_unavailable, self.settings.image)
            if reason is not None:
                event(
                    "sandbox_fallback_local",
                    level=logging.WARNING,
                    reason=reason,
                    hint="commands run on this machine, without memory, process or network limits; "
                    "set [sandbox] mode = 'docker' to require Docker",
                )
            mode = self._kind = "local" if reason else "docker"
        if mode == "docker":
            from .docker import DockerSandbox

            return DockerSandbox(self.settings)
        return LocalSandbox(
            self.settings.local_dir, output_limit=self.settings.output_limit, timeout=self.settings.timeout
        )

    async def end_run(self, *, failed: bool = False) -> None:
        """The end of one agent run: destroy the sandbox unless it is kept alive and the run went well."""
        if failed or not self.settings.keep_alive:
            await self.close()

    async def close(self) -> None:
        """Destroy the sandbox, if there is one (idempotent; waits for one being made).

        The session keeps the sandbox until its close has finished, and the
        close runs to its end even when the caller is cancelled again meanwhile
        (the cancellation is delivered afterwards): a sandbox forgotten half
        closed would leak its workspace and its processes.
        """
        async with self._lock:
            guard, self._guard = self._guard, None
            if guard is not None:
                await guard.disarm()
            sandbox = self._sandbox
            if sandbox is None:
                return
            closing = asyncio.ensure_future(sandbox.close())
            try:
                await finish_despite_cancellation(closing)
            finally:
                if closing.done():
                    self._sandbox = None

    async def __aenter__(self) -> SandboxSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _LoopEndGuard:
    """Closes its session when the event loop shuts its async generators down, unless disarmed first."""

    def __init__(self) -> None:
        self.armed = True
        self._generator: AsyncGenerator[None, None] | None = None

    @classmethod
    async def start(cls, session: SandboxSession) -> _LoopEndGuard:
        guard = cls()
        guard._generator = guard._watch(session)
        await guard._generator.asend(None)  # the loop now knows it (asyncio's first-iteration hook)
        return guard

    async def _watch(self, session: SandboxSession) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            if self.armed:  # the loop is shutting down with the sandbox still open
                self.armed = False
                event("sandbox_closed_with_the_loop", hint="close the agent (aclose) when done with it")
                await session.close()

    async def disarm(self) -> None:
        """The session closes the sandbox itself: end the generator without its close."""
        if self.armed and self._generator is not None:
            self.armed = False
            await self._generator.aclose()


def docker_unavailable(image: str) -> str | None:
    """Why the Docker sandbox cannot run here (no SDK, no engine, no image), or None if it can."""
    from .docker_engine import unavailable  # the docker SDK is imported there, and only there

    return unavailable(image)
