"""Workers' heartbeats: a table beside DBOS's in the same database. The only module that imports sqlalchemy.

Why a table of our own: DBOS records which worker (executor) holds each run,
but not whether that worker is alive; its own ways of moving a dead worker's
runs are a deprecated admin endpoint and a paid controller. Each worker counts
up its row every beat; another worker that sees a row's count stand still for
longer than its bound (by its own clock: no two machines' clocks are compared)
claims the row, and with it the dead worker's runs (`agentfsm.durable.worker`).

The claim is a conditional delete of the row as it was seen: of several
workers that see the same dead one, exactly one wins.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

__all__ = ["Beat", "Heartbeats"]

_TABLE = "agentfsm_workers"


@dataclass(frozen=True, slots=True)
class Beat:
    """One worker's row: who, on which queue, which application version, and its count."""

    worker_id: str
    queue: str
    app_version: str
    count: int


def _engine_url(url: str) -> str:
    """DBOS's URL as SQLAlchemy takes it: PostgreSQL through psycopg 3 (the driver DBOS installs)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


class Heartbeats:
    """The heartbeat table of the database at `url` (created on first use)."""

    def __init__(self, url: str) -> None:
        self._engine = sa.create_engine(_engine_url(url), pool_size=1, max_overflow=1, pool_pre_ping=True)
        meta = sa.MetaData()
        self._table = sa.Table(
            _TABLE,
            meta,
            sa.Column("worker_id", sa.String(200), primary_key=True),
            sa.Column("queue", sa.String(200), nullable=False),
            sa.Column("app_version", sa.String(200), nullable=False),
            sa.Column("count", sa.BigInteger, nullable=False),
        )
        meta.create_all(self._engine, checkfirst=True)

    def close(self) -> None:
        self._engine.dispose()

    def beat(self, worker_id: str, queue: str, app_version: str) -> bool:
        """Count this worker's row up (creating it on the first beat); whether the row was there
        (after the first beat, a missing row is one another worker claimed)."""
        table = self._table
        with self._engine.begin() as db:
            done = db.execute(
                table.update()
                .where(table.c.worker_id == worker_id)
                .values(count=table.c.count + 1, queue=queue, app_version=app_version)
            )
            if done.rowcount == 0:
                db.execute(
                    table.insert().values(worker_id=worker_id, queue=queue, app_version=app_version, count=1)
                )
                return False
            return True

    def beats(self) -> list[Beat]:
        table = self._table
        with self._engine.connect() as db:
            rows = db.execute(sa.select(table.c.worker_id, table.c.queue, table.c.app_version, table.c.count))
            return [Beat(row[0], row[1], row[2], row[3]) for row in rows]

    def claim(self, beat: Beat) -> bool:
        """Take the row of a worker seen dead at `beat`: True for the one worker that wins it."""
        table = self._table
        with self._engine.begin() as db:
            done = db.execute(
                table.delete().where(table.c.worker_id == beat.worker_id, table.c.count == beat.count)
            )
            return done.rowcount == 1
