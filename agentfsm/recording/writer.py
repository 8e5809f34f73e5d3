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

Each writer owns its thread: made on the first job, ended by `close()` once
what was handed over is written. So nothing outlives the recording that
needed it, and no pool is shared behind the runs' backs.

Awaiting the writer waits (in the loop, without blocking it) until every
record handed over so far is written; it raises `RecordingError` once a
write failed (the writer then takes no more records: the run ends with that
error).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Generator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..errors import RecordingError
from .files import RecordPath, write_failed

__all__ = ["Batch", "BatchWrite", "RecordWriter"]

Batch = list[tuple[str, bool]]
"""Records handed over since the last job, in order: each text, and whether it begins the file."""
BatchWrite = Callable[[RecordPath, Batch], None]
"""Writes a batch to the file at the path and makes it durable (raises `OSError` when it cannot)."""


class RecordWriter:
    """The writes of one recording at `path`, made by `write` in a thread of the writer's own."""

    def __init__(self, path: RecordPath, write: BatchWrite, *, what: str = "checkpoint") -> None:
        self.path = path
        self.what = what
        self._write = write
        self._lock = threading.RLock()  # a job that finished at once calls back under it
        self._waiting: Batch = []
        self._added = 0
        self._written = 0
        self._job: Future[int] | None = None
        self._thread: ThreadPoolExecutor | None = None
        self.error: RecordingError | None = None

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
        """End the writer's thread once the jobs handed to it are done (the loop does not wait)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.shutdown(wait=False)

    def _start(self) -> None:
        batch, self._waiting = self._waiting, []
        if self._thread is None:
            self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"agentfsm-{self.what}")
        job = self._job = self._thread.submit(self._run, batch, self._written + len(batch))
        job.add_done_callback(self._done)

    def _run(self, batch: Batch, written: int) -> int:
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
