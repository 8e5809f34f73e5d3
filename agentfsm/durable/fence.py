"""`Fence`: a worker whose heartbeat lapsed starts no step, and one taken for dead stops its runs.

Why: another worker takes a worker's runs once its heartbeat has stood still
for `dead_after_s` (`agentfsm.durable.worker`), but standing still is not
dying: a frozen process, a heartbeat whose connection failed, a loop held by a
tool. The workflow engine itself stops a run's execution that lost the run
only when that execution records its next step's output (DBOS checks the owner
there, not before a step starts), so without a fence the execution taken over
would still run the body of the step it is in and of the next one it starts.

So each worker fences itself, with no query per step: a run's step starts
only while the worker's last successful beat is younger than `stale_after_s`
(half the takeover threshold); a step that finds the beats lapsed waits for
the next successful one. A beat that finds the worker's row gone learns that
another worker claimed it, and with it every run this process was executing
then: those executions end at their next step (the caller raises the engine's
"no longer owned" error, and the engine waits for the new owner's outcome).
Runs this worker takes afterwards start in a new epoch and go on.

What remains possible: the body of a step that started before the beats
lapsed, still running when the takeover lands (a tool call in flight, whose
effect then happens here while the new owner reports the call interrupted; a
model call, made again by the new owner). Nothing a run records is written
twice: the engine refuses the taken-over execution's record.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

__all__ = ["Fence"]


class Fence:
    """The heartbeat's word on whether this process may start a run's next step."""

    def __init__(self, stale_after_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.stale_after_s = stale_after_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last_beat = clock()
        self._epoch = 0

    @property
    def epoch(self) -> int:
        """The current epoch: an execution started in it belongs to this worker until a claim."""
        with self._lock:
            return self._epoch

    def beaten(self, *, claimed: bool) -> None:
        """A beat succeeded (called by the heartbeat's thread). `claimed`: the worker's row was gone,
        so another worker took its runs: the executions of the epoch before end."""
        with self._lock:
            self._last_beat = self._clock()
            if claimed:
                self._epoch += 1

    def lapsed(self) -> bool:
        """Whether the last successful beat is older than `stale_after_s`."""
        with self._lock:
            return self._clock() - self._last_beat > self.stale_after_s

    def owns(self, epoch: int) -> bool:
        """Whether an execution started in `epoch` still holds its run (no claim since)."""
        with self._lock:
            return self._epoch == epoch

    async def admit(self, epoch: int, *, poll_s: float = 0.05) -> bool:
        """Wait while the beats are lapsed; then whether the execution of `epoch` may take its step
        (False: another worker claimed this one's runs meanwhile, the execution must end)."""
        while self.owns(epoch) and self.lapsed():
            await asyncio.sleep(poll_s)
        return self.owns(epoch)
