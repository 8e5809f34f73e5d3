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
the next successful one. A beat that finds the worker's row claimed (or gone:
the takeover already done) learns that another worker claimed it, and with it
every run this process was executing at its previous successful beat: those
executions end at their next step (the caller raises the engine's "no longer
owned" error, and the engine waits for the new owner's outcome). An execution
that started after that beat may be one the worker took afterwards (a run the
claim put back on the queue, say), so it goes on: if it lost its run too, the
engine stops it when it records its step. The beats that find the row still
claimed keep the fence open (the worker is alive and reaches the database);
the claim is told once. A worker that claims its own row (its claimer died
half way, `agentfsm.durable.worker`) disowns every execution it has, since
the takeover it then does puts all of them back on the queue.

What remains possible: the body of a step that started before the beats
lapsed, still running when the takeover lands (a tool call in flight, whose
effect then happens here while the new owner reports the call interrupted; a
model call, made again by the new owner). Nothing a run records is written
twice: the engine refuses the taken-over execution's record.
"""

from __future__ import annotations

import asyncio
import math
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
        self._lost_before = -math.inf
        """Executions that started before this moment lost their runs to a claim."""

    def ticket(self) -> float:
        """The moment an execution starts, by the fence's clock: what it gives `admit` and `owns`."""
        return self._clock()

    def beaten(self, *, claimed: bool) -> None:
        """A beat succeeded (called by the heartbeat's thread). `claimed`: the worker's row was gone,
        so another worker took the runs it held at its previous successful beat."""
        with self._lock:
            if claimed:
                self._lost_before = max(self._lost_before, self._last_beat)
            self._last_beat = self._clock()

    def disown(self) -> None:
        """Every execution started so far lost its run: this worker claimed its own row and puts all the
        runs it holds back on the queue, where new executions take them."""
        with self._lock:
            self._lost_before = max(self._lost_before, self._clock())

    def lapsed(self) -> bool:
        """Whether the last successful beat is older than `stale_after_s`."""
        with self._lock:
            return self._clock() - self._last_beat > self.stale_after_s

    def owns(self, ticket: float) -> bool:
        """Whether the execution that started at `ticket` may still hold its run (no claim took it)."""
        with self._lock:
            return ticket > self._lost_before

    async def admit(self, ticket: float, *, poll_s: float = 0.05) -> bool:
        """Wait while the beats are lapsed; then whether the execution of `ticket` may take its step
        (False: another worker claimed this one's runs meanwhile, the execution must end)."""
        while self.owns(ticket) and self.lapsed():
            await asyncio.sleep(poll_s)
        return self.owns(ticket)
