"""Runs a run manager holds, as the inspector lists, reads, follows and steers them: an app's `Runs`
(`agentfsm.ui.serve(runs)`) or a durable database's `DurableRuns` (`agentfsm ui --db URL`).

Why one module for both: the two managers have the same verbs and the same `RunStatus` (an app
moves from one to the other by changing a constructor), so the page reads and steers either the
same way. The list is `list()`, a page at a time: every run with its state, worker, steps and stop
reason. A run's page is its trace (`trace()`: the trace so far in one process, the whole one once
ended on DBOS), with where the run stands now (`status()`: what a paused run waits for); the page
follows a run that has not ended through `events()`; approve, reject, answer and cancel (and a
flow's plan review, for an app's runs) are the manager's own verbs, so a decision the page sends
is checked as an app's is (a stale or duplicate one is refused, naming its pause). A database's
URL is shown with its password hidden, and DBOS is loaded only when a database is given.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from ..errors import AgentfsmError
from ..recording.trace import read_trace_text
from .reading import RunRow, RunView, default_table, trace_view

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..agent.stepping import Breakpoint
    from ..questions import AnswerAction
    from ..runs.events import RunEvent
    from ..runs.flows import PlanVerdict
    from ..runs.forking import ForkMemory, ForkPoint
    from ..runs.manager import Runs
    from ..runs.status import RunStatus

__all__ = ["PAGE", "Forks", "Holds", "Managed", "Reviews", "RunManager", "app_runs", "database", "shown_url"]


class RunManager(Protocol):
    """What the inspector uses of `Runs` and `DurableRuns` (their shared verbs)."""

    async def list(
        self, *, limit: int | None = None, offset: int = 0, newest_first: bool = False
    ) -> list[RunStatus]: ...
    async def status(self, run_id: str) -> RunStatus: ...
    async def trace(self, run_id: str) -> str | None: ...
    def events(self, run_id: str, *, after: int = 0) -> AsyncIterator[RunEvent]: ...
    async def cancel(self, run_id: str) -> None: ...
    async def approve(
        self, run_id: str, call_id: str, *, arguments: dict[str, Any] | None = None, pause: int | None = None
    ) -> None: ...
    async def reject(
        self, run_id: str, call_id: str, reason: str | None = None, *, pause: int | None = None
    ) -> None: ...
    async def answer(
        self,
        run_id: str,
        call_id: str,
        content: dict[str, Any] | None = None,
        *,
        action: AnswerAction = "accept",
        key: str | None = None,
        pause: int | None = None,
    ) -> None: ...


@runtime_checkable
class Holds(Protocol):
    """A manager whose runs wait at breakpoints (`Runs`: its runs are in this process's hands)."""

    def breakpoints(self, run_id: str) -> tuple[Breakpoint, ...]: ...
    async def set_breakpoints(self, run_id: str, breakpoints: Sequence[Breakpoint]) -> None: ...
    async def step(self, run_id: str) -> None: ...
    async def proceed(self, run_id: str) -> None: ...


@runtime_checkable
class Reviews(Protocol):
    """A manager whose flows wait for a decision on their plan (`Runs`: it drives flows)."""

    async def review(
        self,
        run_id: str,
        verdict: PlanVerdict,
        steps: Sequence[str] | None = None,
        *,
        pause: int | None = None,
    ) -> None: ...


@runtime_checkable
class Forks(Protocol):
    """A manager that starts a run from another's past transition (`Runs`: it holds their files,
    and runs a trace's with the factory named)."""

    agents: dict[str, Any]

    async def fork_point(self, source: str | os.PathLike[str], transition: int) -> ForkPoint: ...
    async def fork(
        self,
        source: str | os.PathLike[str],
        transition: int,
        *,
        agent: Any = None,
        memory: ForkMemory | None = None,
        fork_id: str | None = None,
        breakpoints: Sequence[Breakpoint] = (),
    ) -> str: ...


PAGE = 1000
"""Runs a managed source lists at a time (the page asks for the next as it scrolls)."""


def shown_url(url: str) -> str:
    """`url` with its password (if any) hidden."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


class Managed:
    """The runs of a manager, keyed ``{prefix}/RUN_ID``, shown as coming from `where`.

    `open_manager` makes the manager when first needed (a database is opened only when read);
    `close_manager`, set by a source that made its manager, lets go of it (an app's `Runs` is the
    app's to close).
    """

    def __init__(self, open_manager: Callable[[], RunManager], *, prefix: str, where: str, kind: str) -> None:
        self._open = open_manager
        self._manager: RunManager | None = None
        self.prefix, self.where, self.kind = prefix, where, kind
        self.close_manager: Callable[[], None] | None = None
        self._read: dict[str, tuple[int, RunView]] = {}
        """Each run's trace as last read, by its length (a trace only grows): a page following a
        run asks for it several times between two of its records."""

    def manager(self) -> RunManager:
        if self._manager is None:
            self._manager = self._open()
        return self._manager

    def run_id(self, key: str) -> str | None:
        """The run a key names, if it is one of these runs'."""
        head, _, run_id = key.partition("/")
        return run_id if head == self.prefix and run_id else None

    async def rows(self, offset: int = 0) -> tuple[dict[str, RunRow], int | None]:
        """A page of the runs' rows (`PAGE` of them, the newest first, from `offset`), by key, and the
        offset of the next page (None: no more); a manager that cannot be read is one row saying why.
        A database of many runs is read a page at a time: the list opens as fast for 10,000 as for 10."""
        try:
            statuses = await self.manager().list(limit=PAGE, offset=offset, newest_first=True)
        except Exception as exc:  # the database's own errors (SQLAlchemy's, DBOS's): shown, in one line
            problem = f"cannot read the runs in {self.where}: {_first_line(exc)}"
            return {
                self.prefix: RunRow(key=self.prefix, path=self.where, kind=self.kind, problem=problem)
            }, None
        rows = {f"{self.prefix}/{status.run_id}": self._row(status) for status in statuses}
        return rows, offset + PAGE if len(statuses) == PAGE else None

    def _row(self, status: RunStatus) -> RunRow:
        result = status.result
        return RunRow(
            key=f"{self.prefix}/{status.run_id}",
            path=self.where,
            kind=self.kind,
            run_id=status.run_id,
            request=status.task,
            state=status.state,
            step=None if result is None else result.steps,
            stop_reason=None if result is None else str(result.stop_reason),
            worker=status.worker,
            live=True,
        )

    async def stamp(self, row: RunRow) -> object | None:
        """What tells whether a run's view is still current: its state once it ended (an ended run
        changes no more); None while it has not (it is read again each time)."""
        status = await self.manager().status(str(row.run_id))
        return status.state if status.ended else None

    async def view(self, row: RunRow) -> RunView:
        """The run: its trace so far, and where it stands now."""
        manager = self.manager()
        status = await manager.status(str(row.run_id))
        row = self._row(status)
        text = await manager.trace(status.run_id)
        held = self._read.get(status.run_id)
        if text and held is not None and held[0] == len(text):  # nothing written since: read once
            view = replace(held[1], row=row)
        elif text:
            name = f"the trace of run {status.run_id} in {self.where}"
            header, records = await asyncio.to_thread(read_trace_text, text, name)
            view = trace_view(row, header, records)
            self._read[status.run_id] = (len(text), view)
        else:
            table, source = default_table(self.kind, [])
            view = RunView(row, {"request": status.task}, table, source)
        if view.result is None and status.result is not None:
            view.result = status.result.model_dump(mode="json")
        view.status = {
            "state": status.state,
            "pause": status.pause,
            "decided": list(status.decided),
            "pending_approval": [c.model_dump(mode="json") for c in status.pending_approval],
            "pending_input": [
                {"call": call.model_dump(mode="json"), "question": question.model_dump(mode="json")}
                for call, question in status.pending_input
            ],
            "held": status.held,
            "plan": status.plan,
        }
        if isinstance(manager, Holds) and status.result is None:
            view.status["breakpoints"] = [point.to_json() for point in manager.breakpoints(status.run_id)]
        view.fork = {"into": self.prefix} if isinstance(manager, Forks) else None
        return view

    def close(self) -> None:
        """Let go of the manager if this source made it (a database's connections)."""
        close, self.close_manager, self._manager = self.close_manager, None, None
        if close is not None:
            close()


def app_runs(runs: Runs) -> Managed:
    """An app's `Runs`, keyed ``app/RUN_ID`` (the app closes them)."""
    return Managed(lambda: runs, prefix="app", where=str(runs.directory), kind="app")


def database(url: str) -> Managed:
    """The durable database at `url` (``sqlite:///FILE`` or ``postgresql://...``), keyed ``db/RUN_ID``,
    opened when first read."""

    def open_database() -> RunManager:
        from ..durable.client import DurableRuns  # DBOS, loaded only when a database is given

        runs = DurableRuns(url)
        source.close_manager = runs.close
        return runs

    source = Managed(open_database, prefix="db", where=shown_url(url), kind="durable")
    return source


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return first if isinstance(exc, AgentfsmError) else f"{type(exc).__name__}: {first}"
