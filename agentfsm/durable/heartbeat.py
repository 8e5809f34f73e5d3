"""Workers' heartbeats: a table beside DBOS's in the same database. With the runs' events
(`agentfsm.durable.events`, the other such table), the only module that queries with sqlalchemy (the
engine imports only its exceptions, which DBOS's calls raise).

Why a table of our own: DBOS records which worker (executor) holds each run,
but not whether that worker is alive; its own ways of moving a dead worker's
runs are a deprecated admin endpoint and a paid controller. Each worker counts
up its row every beat; another worker that sees a row stand still for longer
than its bound (by its own clock: no two machines' clocks are compared)
claims the row, and with it the dead worker's runs (`agentfsm.durable.worker`).

A claim marks the row, it does not remove it: a conditional update that sets
`claimed_by` to the claimer where the row's count and `claimed_by` are still
as they were seen, so of several workers that see the same dead one exactly
one wins. The claimer puts the runs back on the queue and only then deletes
the row (`finish`, only while the claim is still its own). So a claimer that
dies half way leaves the row claimed, where every worker still sees it: a row
whose count and claim both stand still is claimed again, and its runs are put
back by whoever wins that claim. A claimed row is no longer counted by its own
worker's beats (`beat` says ``claimed``), so a worker taken for dead while
alive learns of it, and registers afresh only once the takeover is done.

A table made by a release from before claims has no `claimed_by` column:
opening it adds the column in place (SQLite and PostgreSQL), the rows kept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

import sqlalchemy as sa

__all__ = ["Beat", "BeatOutcome", "Heartbeats", "sqlalchemy_url"]

_TABLE = "agentfsm_workers"

BeatOutcome = Literal["counted", "registered", "claimed"]
"""What a beat found: the worker's own row (counted up), no row (one made), or a row another
worker (or this one) claimed (left as it is)."""


@dataclass(frozen=True, slots=True)
class Beat:
    """One worker's row: who, on which queue, which application version, its count, and who claimed it."""

    worker_id: str
    queue: str
    app_version: str
    count: int
    claimed_by: str | None = None
    """The worker taking this one's runs over, until it is done and the row is deleted."""


def sqlalchemy_url(url: str) -> str:
    """DBOS's URL as SQLAlchemy takes it: PostgreSQL through psycopg 3 (the driver DBOS installs). The
    tables beside DBOS's open their database with it."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


class Heartbeats:
    """The heartbeat table of the database at `url` (created on first use, upgraded in place)."""

    def __init__(self, url: str) -> None:
        self._engine = sa.create_engine(sqlalchemy_url(url), pool_size=1, max_overflow=1, pool_pre_ping=True)
        meta = sa.MetaData()
        self._table = sa.Table(
            _TABLE,
            meta,
            sa.Column("worker_id", sa.String(200), primary_key=True),
            sa.Column("queue", sa.String(200), nullable=False),
            sa.Column("app_version", sa.String(200), nullable=False),
            sa.Column("count", sa.BigInteger, nullable=False),
            sa.Column("claimed_by", sa.String(200), nullable=True),
        )
        try:
            meta.create_all(self._engine, checkfirst=True)
        except sa.exc.DBAPIError:
            # Workers started at once on a new database: each saw no table, one created it, and
            # PostgreSQL refused the others' CREATE TABLE (a duplicate type name). Then it is there.
            if not sa.inspect(self._engine).has_table(_TABLE):
                raise
        self._add_claimed_by()

    def _add_claimed_by(self) -> None:
        """Give a table from before claims its `claimed_by` column (NULL in every row: none claimed).
        Several workers may start at once on the old table: one adds it, the others find it there."""
        if self._has_claimed_by():
            return
        try:
            with self._engine.begin() as db:
                db.execute(sa.text(f"ALTER TABLE {_TABLE} ADD COLUMN claimed_by VARCHAR(200)"))
        except sa.exc.DBAPIError:
            if not self._has_claimed_by():
                raise

    def _has_claimed_by(self) -> bool:
        return any(column["name"] == "claimed_by" for column in sa.inspect(self._engine).get_columns(_TABLE))

    def close(self) -> None:
        self._engine.dispose()

    def beat(self, worker_id: str, queue: str, app_version: str) -> BeatOutcome:
        """Count this worker's row up, unless it is claimed; make it when there is none.

        A new row's count starts at this machine's clock in nanoseconds, not at 1: above any count the
        worker's earlier row had, so a watcher that missed a claim and its delete never finds the new
        row at the count it last saw, and never takes it for the old one standing still."""
        table = self._table
        with self._engine.begin() as db:
            done = db.execute(
                table.update()
                .where(table.c.worker_id == worker_id, table.c.claimed_by.is_(None))
                .values(count=table.c.count + 1, queue=queue, app_version=app_version)
            )
            if done.rowcount == 1:
                return "counted"
            if db.execute(sa.select(table.c.worker_id).where(table.c.worker_id == worker_id)).first():
                return "claimed"
            db.execute(
                table.insert().values(
                    worker_id=worker_id, queue=queue, app_version=app_version, count=time.time_ns()
                )
            )
            return "registered"

    def beats(self) -> list[Beat]:
        table = self._table
        columns = (table.c.worker_id, table.c.queue, table.c.app_version, table.c.count, table.c.claimed_by)
        with self._engine.connect() as db:
            return [Beat(*row) for row in db.execute(sa.select(*columns))]

    def claim(self, beat: Beat, claimer: str) -> bool:
        """Claim the row of a worker seen dead at `beat` (count and claim as seen) for `claimer`:
        True for the one worker that wins it."""
        table = self._table
        was = (
            table.c.claimed_by.is_(None) if beat.claimed_by is None else table.c.claimed_by == beat.claimed_by
        )
        with self._engine.begin() as db:
            done = db.execute(
                table.update()
                .where(table.c.worker_id == beat.worker_id, table.c.count == beat.count, was)
                .values(claimed_by=claimer)
            )
            return done.rowcount == 1

    def finish(self, worker_id: str, claimer: str) -> bool:
        """The takeover of `worker_id`'s runs by `claimer` is done: delete the row, if the claim is still
        `claimer`'s (another worker may have claimed it again meanwhile). Whether it was."""
        table = self._table
        with self._engine.begin() as db:
            done = db.execute(
                table.delete().where(table.c.worker_id == worker_id, table.c.claimed_by == claimer)
            )
            return done.rowcount == 1
