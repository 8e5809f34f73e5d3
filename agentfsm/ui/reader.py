"""The inspector's catalogue: the runs under the paths it was given and those of the run managers
it was given (an app's `Runs`, a durable database), each read once while it is unchanged.

Why: stepping through a run asks for its memory at each transition, and a page reload asks for the
whole run again; parsing a long trace each time would cost the page its speed. A run is named by its
key in the list (`RunRow.key`), never by a path: the page reads nothing it was not given.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import cast

from ..errors import AgentfsmError, InspectorError, KeyNotFoundError
from .managed import Forks, Managed
from .reading import RunRow, RunView, find_runs, read_file

__all__ = ["Reader"]

_FORKS = ("trace", "checkpoint", "flow trace", "flow checkpoint")
"""The kinds of file a run forks from (`Runs.fork`), into an app's runs."""


class Reader:
    """The runs under the paths given and those of the managers given (`managed`: an app's `Runs`, a
    durable database), each parsed once while it is unchanged (a file by its size and modification
    time, a managed run once it ended). Files are read in a thread, so a long trace never stalls
    the server."""

    def __init__(self, paths: list[Path], *, managed: Sequence[Managed] = ()) -> None:
        self.paths = paths
        self.managed = tuple(managed)
        self._rows: dict[str, RunRow] = {}
        self.more: dict[str, int] = {}
        """Each manager whose runs have another page, and where it begins."""
        self._views: dict[str, tuple[object, RunView]] = {}

    async def rows(self) -> list[RunRow]:
        """The runs found now (the folders and the managers are read again: a run since shows): every
        file's, and each manager's first page; `more` says where each manager's next page begins."""
        rows = await asyncio.to_thread(find_runs, self.paths)
        self.more = {}
        for source in self.managed:
            page, after = await source.rows()
            rows |= page
            if after is not None:
                self.more[source.prefix] = after
        self._rows = rows
        return list(rows.values())

    async def more_rows(self, prefix: str, offset: int) -> list[RunRow]:
        """The page of the manager `prefix` names that begins at `offset` (`more` says where the next
        one begins, or that there is none)."""
        source = next((s for s in self.managed if s.prefix == prefix), None)
        if source is None:
            raise KeyNotFoundError(
                f"no run manager {prefix!r} here; the list's sources: {[s.prefix for s in self.managed]}"
            )
        page, after = await source.rows(offset)
        self._rows |= page
        if after is None:
            self.more.pop(prefix, None)
        else:
            self.more[prefix] = after
        return list(page.values())

    def fork_target(self) -> Managed | None:
        """The app's runs a trace of the paths is forked into (the first `Runs` given), if any."""
        return next((s for s in self.managed if s.kind == "app" and isinstance(s.manager(), Forks)), None)

    def source(self, key: str) -> tuple[Managed, str] | None:
        """The manager that holds the run `key` names, and its id; None for a file's run."""
        for source in self.managed:
            run_id = source.run_id(key)
            if run_id is not None:
                return source, run_id
        return None

    async def view(self, key: str) -> RunView:
        """The run named `key`, one of `rows()`'s: never a path of the caller's choosing.
        `KeyError` for an unknown key; an `AgentfsmError` for a run that cannot be read (its
        message's first line says why: `InspectorError`, `TraceError`, `CheckpointError`)."""
        base, _, part = key.partition("~")
        if part:  # a flow's agent run: ``KEY~AGENT~STEP``
            agent, _, step = part.rpartition("~")
            if not step.isdigit():
                raise KeyNotFoundError(f"no run {key!r}: an agent's run in a flow is KEY~AGENT~STEP")
            return (await self.view(base)).agent_run(agent, int(step))
        if key not in self._rows:
            await self.rows()
        row = self._rows[key]
        if row.problem is not None:
            raise InspectorError(row.problem)
        held = self._views.get(key)
        managed = self.source(key)
        try:
            if managed is not None:
                stamp: object = await managed[0].stamp(row)
                if held is not None and stamp is not None and held[0] == stamp:
                    return held[1]
                view = await managed[0].view(row)
            else:
                stat = os.stat(row.path)
                stamp = (stat.st_size, stat.st_mtime_ns)
                if held is not None and held[0] == stamp:
                    return held[1]
                view = await asyncio.to_thread(read_file, row)
                target = self.fork_target()
                if row.kind in _FORKS and target is not None:
                    agents = sorted(cast(Forks, target.manager()).agents)
                    view.fork = {"into": target.prefix, "agents": agents}
                    if row.kind in ("checkpoint", "flow checkpoint") and isinstance(
                        view.header.get("edges"), int
                    ):
                        view.fork["at"] = view.header["edges"] - 1  # its last state: no timeline
        except AgentfsmError as exc:  # its row says so from now on
            self._rows[key] = replace(row, problem=str(exc).splitlines()[0])
            raise
        self._views[key] = (stamp, view)
        return view

    def close(self) -> None:
        """Let go of the managers this reader's sources opened (a database's connections)."""
        for source in self.managed:
            source.close()
