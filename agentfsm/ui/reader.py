"""The inspector's catalogue: the runs under the paths it was given and in its database, each
read once while it is unchanged.

Why: stepping through a run asks for its memory at each transition, and a page reload asks for the
whole run again; parsing a long trace each time would cost the page its speed. A run is named by its
key in the list (`RunRow.key`), never by a path: the page reads nothing it was not given.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from pathlib import Path

from ..errors import AgentfsmError, InspectorError
from .database import Database
from .reading import DURABLE, RunRow, RunView, find_runs, read_file

__all__ = ["Reader"]


class Reader:
    """The runs under the paths given, and in a durable database (`db`: its URL), each parsed once
    while it is unchanged (a file by its size and modification time, a database's run once it
    ended): stepping through a run asks for its memory at each transition, and a page reload asks
    for the whole run again. Files are read in a thread, so a long trace never stalls the server."""

    def __init__(self, paths: list[Path], *, db: str | None = None) -> None:
        self.paths = paths
        self.db = None if db is None else Database(db)
        self._rows: dict[str, RunRow] = {}
        self._views: dict[str, tuple[object, RunView]] = {}

    async def rows(self) -> list[RunRow]:
        """The runs found now (the folders and the database are read again: a run since shows)."""
        rows = await asyncio.to_thread(find_runs, self.paths)
        if self.db is not None:
            rows |= await self.db.rows()
        self._rows = rows
        return list(rows.values())

    async def view(self, key: str) -> RunView:
        """The run named `key`, one of `rows()`'s: never a path of the caller's choosing.
        `KeyError` for an unknown key; an `AgentfsmError` for a run that cannot be read (its
        message's first line says why: `InspectorError`, `TraceError`, `CheckpointError`)."""
        if key not in self._rows:
            await self.rows()
        row = self._rows[key]
        if row.problem is not None:
            raise InspectorError(row.problem)
        held = self._views.get(key)
        try:
            if row.kind == DURABLE:
                assert self.db is not None
                stamp: object = await self.db.stamp(row)
                if held is not None and held[0] == stamp is not None:
                    return held[1]
                view = await self.db.view(row)
            else:
                stat = os.stat(row.path)
                stamp = (stat.st_size, stat.st_mtime_ns)
                if held is not None and held[0] == stamp:
                    return held[1]
                view = await asyncio.to_thread(read_file, row)
        except AgentfsmError as exc:  # its row says so from now on
            self._rows[key] = replace(row, problem=str(exc).splitlines()[0])
            raise
        self._views[key] = (stamp, view)
        return view

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
