"""`RecordWriter`: a recording's writes and fsyncs, in a thread off the event loop, in order.

Why the writes too, not only the fsyncs: while a file system commits an
fsync, a write to a file on it can wait for that commit (measured here: up
to 20 ms each, with 30 runs checkpointing side by side), so a write made on
the loop stalls every run in it. The loop hands each record over (`add`, a
few µs); one job at a time writes what is waiting, in order, then makes it
durable once for all of it. How a batch is written is the recording's: an
agent's journal appends its records (`agentfsm.recording.checkpoint`), a
flow's checkpoint replaces its document with the last one
(`agentfsm.flow.checkpoint`).

The threads are a few, shared by the process's writers (`_Threads`), apart
from asyncio's default executor (which a model's client may keep busy): a
thread per writer would be made on the loop (a thread's start waits for it
to run) and would compete for the GIL fifty ways with fifty runs, which
doubled the loop's longest stall in `tools/bench.py`'s concurrent
checkpointed runs. Their lifetime is the writers': made when a writer first
needs one, ended when the last writer that used them closes, so nothing
lingers once no recording is open.

A writer may be given a `check`, run in its thread before each batch: a
checkpoint's lease, checked there rather than on the loop, since asking the
file system anything (a ``stat`` too) waits while it commits another
writer's fsync. `off_loop` runs the other file-system work of a run's start
(leasing its checkpoint) in the same threads, for the same reason.

Awaiting the writer waits (in the loop, without blocking it) until every
record handed over so far is written; it raises `RecordingError` once a
write failed, or the error its `check` raised (the writer then takes no
more records: the run ends with that error).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Generator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from ..errors import AgentfsmError, RecordingError
from .files import RecordPath, write_failed

__all__ = ["Batch", "BatchWrite", "RecordWriter", "off_loop"]

_T = TypeVar("_T")

_WORKERS = 4
"""Threads shared by the writers: one job at a time per writer, a few writers at once."""

Batch = list[tuple[str, bool]]
"""Records handed over since the last job, in order: each text, and whether it begins the file."""
BatchWrite = Callable[[RecordPath, Batch], None]
"""Writes a batch to the file at the path and makes it durable (raises `OSError` when it cannot)."""


class _Threads:
    """The writers' threads: made for the first writer that needs one, ended with the last one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._users = 0

    def take(self) -> ThreadPoolExecutor:
        """The threads, for a writer until it gives them back."""
        with self._lock:
            self._users += 1
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="agentfsm-recording")
            return self._pool

    def give_back(self) -> None:
        """A writer is done with them; the last one ends them (the jobs queued still run)."""
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None


_THREADS = _Threads()


async def off_loop(work: Callable[[], _T], *, abandoned: Callable[[_T], None] | None = None) -> _T:
    """`work()`, run in the writers' threads while the loop goes on; its result, or its error.

    `abandoned`: given the result of a `work` whose awaiting was cancelled while it ran (a
    lease taken for a run that will not start is released, not left to the collector)."""
    import asyncio

    threads = _THREADS.take()
    job = threads.submit(work)
    try:
        return await asyncio.shield(asyncio.wrap_future(job))
    except asyncio.CancelledError:
        if abandoned is not None:
            job.add_done_callback(lambda done: done.exception() is None and abandoned(done.result()))
        raise
    finally:
        _THREADS.give_back()


class RecordWriter:
    """The writes of one recording at `path`, made by `write` in the writers' threads, in order."""

    def __init__(
        self,
        path: RecordPath,
        write: BatchWrite,
        *,
        what: str = "checkpoint",
        check: Callable[[], None] | None = None,
    ) -> None:
        self.path = path
        self.what = what
        self._write = write
        self._check = check
        """Run before each batch, in the thread: an `AgentfsmError` it raises stops the writer."""
        self._lock = threading.RLock()  # a job that finished at once calls back under it
        self._waiting: Batch = []
        self._added = 0
        self._written = 0
        self._job: Future[int] | None = None
        self._threads: ThreadPoolExecutor | None = None
        self.error: AgentfsmError | None = None

    def add(self, text: str, *, new: bool) -> None:
        """Hand `text` over to be written (`new`: it begins the file)."""
        with self._lock:
            if self.error is not None:
                raise self.error
            self._waiting.append((text, new))
            self._added += 1
            if self._job is None:
                self._start()

    def close(self) -> None:
        """Give the threads back (the jobs handed over still run; the loop does not wait)."""
        with self._lock:
            threads, self._threads = self._threads, None
        if threads is not None:
            _THREADS.give_back()

    def _start(self) -> None:
        batch, self._waiting = self._waiting, []
        if self._threads is None:
            self._threads = _THREADS.take()
        job = self._job = self._threads.submit(self._run, batch, self._written + len(batch))
        job.add_done_callback(self._done)

    def _run(self, batch: Batch, written: int) -> int:
        if self._check is not None:
            self._check()
        self._write(self.path, batch)
        return written

    def _done(self, job: Future[int]) -> None:
        with self._lock:
            if self._job is job:
                self._job = None
            try:
                self._written = job.result()
            except OSError as exc:
                self.error = self.error or write_failed(self.what, self.path, exc)
                self._waiting.clear()
            except AgentfsmError as exc:  # the check's refusal, as it said it
                self.error = self.error or exc
                self._waiting.clear()
            except Exception as exc:  # anything else that stops the writer stops it the same way
                self.error = self.error or RecordingError(
                    f"cannot write the {self.what} {os.fspath(self.path)}: {type(exc).__name__}: {exc}"
                )
                self._waiting.clear()
            if self._waiting and self._job is None:
                self._start()  # records came while it ran

    def _until(self, target: int) -> Future[int] | None:
        """The job to wait for until `target` records are durable, or None when they are."""
        with self._lock:
            if self.error is not None:
                raise self.error
            return None if self._written >= target else self._job

    def __await__(self) -> Generator[Any, None, None]:
        return self._wait().__await__()

    async def _wait(self) -> None:
        import asyncio

        target = self._added
        while (job := self._until(target)) is not None:
            with contextlib.suppress(Exception):  # `_done` kept it; `_until` raises it
                await asyncio.shield(asyncio.wrap_future(job))  # a cancelled waiter leaves the job be
