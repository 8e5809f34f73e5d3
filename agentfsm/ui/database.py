"""The runs of a durable database as the inspector lists and reads them (`agentfsm ui --db URL`).

Why through `DurableRuns`: it is the one reader of runs on DBOS (an app's, the command line's), so
the page shows what `agentfsm status` says, on SQLite as on PostgreSQL, and DBOS is loaded only when
a database is given. The list is `DurableRuns.list()`: every run with its state, its worker, its
steps and why it stopped. An ended run's page is its trace, kept in the database
(`DurableRuns.trace`); a run that has not ended shows where it is (running, paused with the calls it
waits on, queued), since its trace is whole only at its end. The URL is shown with its password
hidden.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from ..errors import AgentfsmError
from ..recording.trace import read_trace_text
from .reading import DURABLE, RunRow, RunView, default_table, trace_view

if TYPE_CHECKING:
    from ..durable.client import DurableRuns
    from ..runs.status import RunStatus

__all__ = ["Database", "shown_url"]


def shown_url(url: str) -> str:
    """`url` with its password (if any) hidden."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


class Database:
    """The runs in the durable database at `url` (``sqlite:///FILE`` or ``postgresql://...``)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.shown = shown_url(url)
        self._runs: DurableRuns | None = None

    def _client(self) -> DurableRuns:
        if self._runs is None:
            from ..durable.client import DurableRuns  # DBOS, loaded only when a database is given

            self._runs = DurableRuns(self.url)
        return self._runs

    async def rows(self) -> dict[str, RunRow]:
        """Every run's row, by key (``db/RUN_ID``); a database that cannot be read is one row saying why."""
        try:
            statuses = await self._client().list()
        except Exception as exc:  # the database's own errors (SQLAlchemy's, DBOS's): shown, in one line
            problem = f"cannot read the runs in {self.shown}: {_first_line(exc)}"
            return {"db": RunRow(key="db", path=self.shown, kind=DURABLE, problem=problem)}
        return {f"db/{status.run_id}": self._row(status) for status in statuses}

    def _row(self, status: RunStatus) -> RunRow:
        result = status.result
        return RunRow(
            key=f"db/{status.run_id}",
            path=self.shown,
            kind=DURABLE,
            run_id=status.run_id,
            request=status.task,
            state=status.state,
            step=None if result is None else result.steps,
            stop_reason=None if result is None else str(result.stop_reason),
            worker=status.worker,
        )

    async def stamp(self, row: RunRow) -> object | None:
        """What tells whether a run's view is still current: its state once it ended (an ended run
        changes no more); None while it has not (it is read again each time)."""
        status = await self._client().status(str(row.run_id))
        return status.state if status.ended else None

    async def view(self, row: RunRow) -> RunView:
        """The run: its trace once it ended, else where it stands."""
        runs = self._client()
        status = await runs.status(str(row.run_id))
        row = self._row(status)
        text = await runs.trace(status.run_id) if status.ended else None
        if text:
            name = f"the trace of run {status.run_id} in {self.shown}"
            header, records = await asyncio.to_thread(read_trace_text, text, name)
            return trace_view(row, header, records)
        table, source = default_table(DURABLE, [])
        result: dict[str, Any] | None = (
            None if status.result is None else status.result.model_dump(mode="json")
        )
        header = {
            "request": status.task,
            "pending_approval": [c.model_dump(mode="json") for c in status.pending_approval],
        }
        return RunView(row, header, table, source, [], [], result)

    def close(self) -> None:
        if self._runs is not None:
            self._runs.close()
            self._runs = None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (
        f"{type(exc).__name__}: {text[0] if text else ''}" if not isinstance(exc, AgentfsmError) else text[0]
    )
