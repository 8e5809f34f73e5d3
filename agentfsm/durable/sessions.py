"""`DatabaseSession`: a conversation kept in the durable database (`agentfsm chat --db URL`), beside
the runs of the same deployment, on SQLite or PostgreSQL.

Why a table of its own and not a file: an app on several machines (or the durable workers and the
chat at a terminal) shares one database, not one folder. A session is one row, its name the key and
its memory (`MemorySnapshot` as JSON) replaced whole at each save, in one statement: a save is all
or nothing, and the last one wins, as a `FileSession`'s. The queries run in the writers' threads
(`off_loop`): a database round trip never stalls the event loop.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa

from ..errors import SessionError
from ..memory import MemorySnapshot
from ..recording.writer import off_loop
from .heartbeat import sqlalchemy_url

__all__ = ["DatabaseSession"]

_TABLE = "agentfsm_sessions"


class DatabaseSession:
    """The conversation `name` in the database at `url` (``sqlite:///FILE`` or ``postgresql://...``;
    its table made on first use). `close()` lets go of its connections."""

    def __init__(self, url: str, name: str) -> None:
        if not name or len(name) > 200:
            raise SessionError(f"session name {name!r} must be 1 to 200 characters; give another")
        self.name = name
        self._engine = sa.create_engine(sqlalchemy_url(url), pool_size=1, max_overflow=1, pool_pre_ping=True)
        meta = sa.MetaData()
        self._table = sa.Table(
            _TABLE,
            meta,
            sa.Column("name", sa.String(200), primary_key=True),
            sa.Column("memory", sa.Text, nullable=False),
            sa.Column("saved_at", sa.String(40), nullable=False),
        )
        self._meta = meta
        self._made = False

    def __repr__(self) -> str:
        return f"DatabaseSession({self.name!r})"

    async def load(self) -> MemorySnapshot | None:
        return await off_loop(self._load)

    async def save(self, memory: MemorySnapshot) -> None:
        text = memory.model_dump_json()
        await off_loop(lambda: self._save(text))

    async def clear(self) -> None:
        await off_loop(self._clear)

    def close(self) -> None:
        self._engine.dispose()

    def _make(self) -> None:
        """The table, made on first use; on PostgreSQL the database too, as DBOS makes a worker's."""
        if self._made:
            return
        try:
            self._create_table()
        except sa.exc.OperationalError as exc:
            url = self._engine.url
            if url.get_backend_name() != "postgresql" or "does not exist" not in str(exc.orig):
                raise SessionError(
                    f"cannot reach the session database at {url.render_as_string(hide_password=True)}: "
                    f"{str(exc.orig).strip().splitlines()[0]}; start it, or give --db another URL"
                ) from None
            admin = sa.create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
            try:
                with admin.connect() as connection:
                    connection.execute(sa.text(f'CREATE DATABASE "{url.database}"'))
            except sa.exc.ProgrammingError:  # another process made it meanwhile
                pass
            finally:
                admin.dispose()
            self._create_table()
        self._made = True

    def _create_table(self) -> None:
        try:
            self._meta.create_all(self._engine, checkfirst=True)
        except sa.exc.IntegrityError:  # another process made it meanwhile
            if not sa.inspect(self._engine).has_table(_TABLE):
                raise

    def _load(self) -> MemorySnapshot | None:
        self._make()
        with self._engine.connect() as connection:
            found = connection.execute(
                sa.select(self._table.c.memory).where(self._table.c.name == self.name)
            ).scalar_one_or_none()
        if found is None:
            return None
        try:
            return MemorySnapshot.model_validate_json(found)
        except ValueError as exc:
            raise SessionError(
                f"the session {self.name!r} in the database holds no conversation agentfsm wrote "
                f"({' '.join(str(exc).split())[:200]}); clear it (/reset), or give another session"
            ) from None

    def _save(self, text: str) -> None:
        self._make()
        row = {"name": self.name, "memory": text, "saved_at": datetime.now(UTC).isoformat()}
        for attempt in (1, 2):  # two saves at once: one inserts first, the other replaces it then
            try:
                with self._engine.begin() as connection:  # one transaction: the row replaced whole
                    connection.execute(sa.delete(self._table).where(self._table.c.name == self.name))
                    connection.execute(sa.insert(self._table).values(**row))
                return
            except sa.exc.IntegrityError:
                if attempt == 2:
                    raise

    def _clear(self) -> None:
        self._make()
        with self._engine.begin() as connection:
            connection.execute(sa.delete(self._table).where(self._table.c.name == self.name))
