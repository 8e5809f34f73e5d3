"""A durable run's events in the database: written by its worker, read from any process.

What a reader of `agentfsm.runs.Runs.events` gets in one process, `DurableRuns.events` gives
across processes: every event of the run's agent as a `RunEvent` (`seq` from 1, its kind, its
data, the very encoding of `agentfsm.runs.events.encode`), the recorded ones first, then the
live ones, until the run ends. They live in a table beside DBOS's, in the same database
(``agentfsm_events``, as the workers' heartbeats do), and not in a DBOS stream: a stream
written by the workflow is one more recorded operation a write (it would change the step
layout, `agentfsm.durable.run.LAYOUT`, and put a transaction on the run's path), and one
written from inside a step is appended again whenever a step runs twice.

Exactly once, under replay. A recovered (or resumed, or taken over) run is executed again
from its start, and its agent emits its events again: the same events between the same
places, since every recorded step gives back its output (`agentfsm.durable.run`). So a run's
events are handed over in *segments*: those emitted since the place the run drew last (a
step, the start of a call or of a batch of concurrent calls, a message received, an event
published), numbered by the place that
ends them, the same in every execution, and those after its last place, at its end. A write
takes, of a run's segments, those numbered above the highest its rows cover, and keeps them
as one row (their events in order, the first seq one past the run's last, the number of the
last segment). A segment written before, by an earlier execution or by one that lost its run
to another worker, is not written again, whatever the new version holds; every execution
hands its segments over in order, so the numbers below the highest covered are all written
(or were empty). Two versions of a segment differ only in what is not recorded: the pieces of
a streamed reply and the retries of a model call emitted while the step ran (a replay reads
the step back), the order in which concurrent calls completed, and timings. Readers see the
first version written, whole.

Numbering. A row's first seq is one past the highest its run has, read in the transaction
that writes it, so the seqs are gapless and increasing whichever execution writes. The
table's keys, on (run, first seq) and on (run, last segment), refuse a row written beside
another one the writer did not see (two executions at once): the later write reads again
and writes what is still new, on the seqs that are still free.

Cost. The run does not wait for its segments: it hands each to the worker's one writer thread
(`EventWriter`) and goes on with its step; the segments waiting together, lingering a little
for others, are written in one transaction, a row a run. A run waits only at its end, for
its last segment, so that once the database says a run ended, all its events are there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ..errors import RecordingError
from ..log import event
from ..recording.files import escape_surrogates, json_text
from ..runs.events import RunEvent
from .heartbeat import sqlalchemy_url

__all__ = ["EventTable", "EventWriter", "Segment"]

_TABLE = "agentfsm_events"
RETRY_MAX_S = 5.0
"""The longest wait between two attempts at a write the database refused."""
LINGER_S = 0.25
"""How long a segment waits for others to share its transaction (`EventWriter`): what a reader
may wait more for an event, beside its own polling. Each transaction costs the worker's CPU about
what a step of DBOS's does; at 4 workers of 8 one-tool runs, 50 ms raised the worker's CPU a run
from 1.3x bare DBOS's to 1.46x, 0.25 s to 1.37x (`tools/bench_durable.py`, docs/benchmarks-log.md)."""
CONFLICT_TRIES = 100
"""How often an insert whose first seq another execution took at that moment is tried again."""

_ENDS = sa.text(
    f"SELECT COALESCE(MAX(first_seq + count), 1), COALESCE(MAX(last_segment), 0) FROM {_TABLE} "
    "WHERE run_id = :run_id"
)
"""Where a run's events end: the seq after its last (1 when it has none), and the highest segment
its rows cover (0: none)."""
_INSERT = sa.text(
    f"INSERT INTO {_TABLE} (run_id, first_seq, last_segment, count, events) "
    "VALUES (:run_id, :first_seq, :last_segment, :count, :events) "
    "ON CONFLICT DO NOTHING RETURNING first_seq"
)
"""A row's insert, or nothing when another one took its first seq or its last segment meanwhile.
The same SQL on PostgreSQL and SQLite, as text: SQLAlchemy building and compiling such a
statement in its expression language cost about as much again as the database's own work."""

Segment = list[tuple[str, dict[str, Any]]]
"""The events of one segment: each one's kind and data (`agentfsm.runs.events.encode`)."""


class EventTable:
    """The events table of the database at `url` (created on first use)."""

    def __init__(self, url: str) -> None:
        self._engine = sa.create_engine(sqlalchemy_url(url), pool_size=2, max_overflow=4)
        if self._engine.dialect.name == "sqlite":
            # As DBOS opens SQLite: a writer takes the lock at BEGIN, and waits for it rather
            # than failing after the driver's 5 s while a worker's steps hold it.
            @sa.event.listens_for(self._engine, "connect")
            def _immediate(connection: Any, record: Any) -> None:
                connection.isolation_level = "IMMEDIATE"
                connection.execute("PRAGMA busy_timeout=30000")

        meta = sa.MetaData()
        self._table = sa.Table(
            _TABLE,
            meta,
            sa.Column("run_id", sa.Text, primary_key=True),
            sa.Column("first_seq", sa.BigInteger, primary_key=True, autoincrement=False),
            sa.Column("last_segment", sa.BigInteger, nullable=False),
            sa.Column("count", sa.Integer, nullable=False),
            sa.Column("events", sa.Text, nullable=False),
            sa.UniqueConstraint("run_id", "last_segment", name=f"{_TABLE}_last_segment"),
        )
        self._meta = meta
        self.create()

    def create(self) -> None:
        """Create the table unless it is there (a database no worker of this release opened yet)."""
        try:
            self._meta.create_all(self._engine, checkfirst=True)
        except sa.exc.DBAPIError:
            # Processes opening a new database at once: one created the table, the others'
            # CREATE TABLE was refused. Then it is there.
            if not sa.inspect(self._engine).has_table(_TABLE):
                raise

    def close(self) -> None:
        self._engine.dispose()

    def append(self, segments: Sequence[tuple[str, int, Segment]]) -> None:
        """Write, in one transaction, each (run id, segment number, events) its run does not cover
        yet: one row a run, its new segments' events in the order of their numbers."""
        runs: dict[str, dict[int, Segment]] = {}
        for run_id, number, events in segments:
            runs.setdefault(run_id, {}).setdefault(number, events)  # two executions here: the first's
        with self._engine.begin() as db:
            for run_id, numbered in runs.items():
                self._append(db, run_id, sorted(numbered.items()))

    def _append(self, db: sa.Connection, run_id: str, numbered: list[tuple[int, Segment]]) -> None:
        for _ in range(CONFLICT_TRIES):
            next_seq, covered = db.execute(_ENDS, {"run_id": run_id}).one()
            new = [(number, events) for number, events in numbered if number > covered and events]
            if not new:
                return  # written by an earlier execution of the run: its versions stay
            events = [one for _, segment in new for one in segment]
            row = {
                "run_id": run_id,
                "first_seq": next_seq,
                "last_segment": new[-1][0],
                "count": len(events),
                "events": escape_surrogates(json_text(events)),  # UTF-8 holds no half a character
            }
            if db.execute(_INSERT, row).first() is not None:
                return
        raise RecordingError(
            f"the events of run {run_id!r} found their seqs taken {CONFLICT_TRIES} times in a row in "
            f"{_TABLE}: is another process writing this run's events in a loop?"
        )

    def read(self, run_id: str, after: int) -> list[RunEvent]:
        """The run's events after seq `after`, in order, up to the first seq not written yet."""
        table = self._table
        query = (
            sa.select(table.c.first_seq, table.c.events)
            .where(table.c.run_id == run_id, table.c.first_seq + table.c.count > after)
            .order_by(table.c.first_seq)
        )
        with self._engine.connect() as db:
            rows = db.execute(query).all()
        found: list[RunEvent] = []
        for first, text in rows:
            if first > after + len(found) + 1:
                break  # a gap (the keys make none): no further than the seqs in a row
            for seq, (kind, data) in enumerate(json.loads(text), start=first):
                if seq > after:
                    found.append(RunEvent(run_id, seq, kind, data))
        return found


@dataclass(slots=True)
class _Waiting:
    run_id: str
    number: int
    events: Segment
    done: asyncio.Future[None] | None
    """Set for a segment the run waits for (urgent): done once it, and all before it, are written."""
    loop: asyncio.AbstractEventLoop | None
    at: float
    """When it was handed over (`time.monotonic`)."""


class EventWriter:
    """A worker's writer of its runs' segments: one thread, off the runs' event loop, writing
    what waits in one transaction, again and again (logged) while the database refuses it.

    A segment waits up to `linger_s` for others to share its transaction, unless it is urgent
    (a run that pauses, or ends): a transaction costs about as much as the segments it writes
    (0.4 ms of CPU a segment on PostgreSQL, here), and a run that hands over two segments a step
    would otherwise pay for two transactions beside each of its steps' own."""

    def __init__(self, table: EventTable, *, linger_s: float = LINGER_S) -> None:
        self.table = table
        self.linger_s = linger_s
        self._lock = threading.Condition()
        self._waiting: list[_Waiting] = []
        self._urgent = False
        self._closing = False
        self._thread = threading.Thread(target=self._work, name="agentfsm-events", daemon=True)
        self._thread.start()

    def write(
        self, run_id: str, number: int, events: Segment, *, urgent: bool = False
    ) -> asyncio.Future[None] | None:
        """Hand over the segment `number` of run `run_id` (no row when `events` is empty). `urgent`:
        written at once, and a future that is done once it and every segment handed over before it
        are written (or were, by an earlier execution), failing with `RecordingError` if the writer
        stopped first."""
        done: asyncio.Future[None] | None = None
        loop: asyncio.AbstractEventLoop | None = None
        if urgent:
            loop = asyncio.get_running_loop()
            done = loop.create_future()
            done.add_done_callback(_retrieved)
        with self._lock:
            if self._closing:
                if done is not None:
                    stopped = f"the events of run {run_id!r} came after the worker stopped writing events"
                    done.set_exception(RecordingError(stopped))
                return done
            self._waiting.append(_Waiting(run_id, number, events, done, loop, time.monotonic()))
            if urgent or len(self._waiting) == 1:
                self._urgent = self._urgent or urgent
                self._lock.notify()
        return done

    def close(self, timeout_s: float = 10.0) -> None:
        """Write what waits (up to `timeout_s`), then stop; what could not be written fails."""
        with self._lock:
            self._closing = True
            self._lock.notify()
        self._thread.join(timeout_s)

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._waiting and not self._closing:
                    self._lock.wait()
                if not self._waiting:
                    return
                until = self._waiting[0].at + self.linger_s
                while not (self._urgent or self._closing) and (left := until - time.monotonic()) > 0:
                    self._lock.wait(left)
                batch, self._waiting, self._urgent = self._waiting, [], False
            self._write(batch)

    def _write(self, batch: list[_Waiting]) -> None:
        wait = 0.05
        segments = [(w.run_id, w.number, w.events) for w in batch if w.events]
        while True:
            try:
                if segments:
                    self.table.append(segments)
            except Exception as exc:
                event(
                    "durable_events_write_failed",
                    level=logging.WARNING,
                    runs=sorted({w.run_id for w in batch}),
                    error=f"{type(exc).__name__}: {exc}",
                )
                with self._lock:
                    if not self._closing:
                        self._lock.wait(wait)
                    closing = self._closing
                if closing:
                    runs = ", ".join(sorted({repr(w.run_id) for w in batch}))
                    stopped = (
                        f"the worker stopped before it could write events of run {runs} ({exc}): the run's "
                        "next execution writes them (its outcome was not recorded either)"
                    )
                    _settle(batch, RecordingError(stopped))
                    return
                wait = min(wait * 2, RETRY_MAX_S)
                with contextlib.suppress(Exception):  # dropped by hand meanwhile: made again, as at launch
                    self.table.create()
                continue
            _settle(batch, None)
            return


def _settle(batch: list[_Waiting], error: Exception | None) -> None:
    for waiting in batch:
        if waiting.done is None or waiting.loop is None:
            continue
        with contextlib.suppress(RuntimeError):  # its event loop is closed: nobody waits any more
            waiting.loop.call_soon_threadsafe(_done, waiting.done, error)


def _done(done: asyncio.Future[None], error: Exception | None) -> None:
    if done.done():
        return
    if error is None:
        done.set_result(None)
    else:
        done.set_exception(error)


def _retrieved(done: asyncio.Future[None]) -> None:
    """A run awaits only its last segment: the failure of another urgent one (a pause's) was logged
    by the writer already, and is not reported again as never retrieved."""
    if not done.cancelled():
        done.exception()
