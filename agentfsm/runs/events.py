"""A managed run's events, numbered, kept and fanned out: what `Runs.events` reads.

An HTTP layer needs more of a run's events than a listener gives: a page opened late (or again,
after a restart) must see what happened before it joined, any number of pages may watch one run,
and a page that stops reading must neither stall the run nor end it. So each run's events pass
through a `Feed`:

- Every event of the run's agent (`agentfsm.run.events.AgentEvent`) becomes a `RunEvent`: its
  number in the run (`seq`, from 1), its kind (``transition``, ``llm_call``, ``text_delta``, ...)
  and its JSON (`to_json()`).
- The feed appends each to the run's ``events.jsonl`` as it happens, written out before any reader
  gets it (one line each: a kill loses at most the line being written, and never an event a reader
  has seen, so a reader's last `seq` still means the same event after a restart), and keeps them in
  memory: a reader gets those from `after` on
  first, then the live ones. The file is read back when a restarted `Runs` takes the run up, so
  the history survives a restart.
- Each reader has a buffer of `buffer` events. One that falls that far behind is dropped: it gets a
  last event (``reader_dropped``, with the `seq` to rejoin from) and its iteration ends. The run
  never waits for a reader (the agent's listener only appends), and a reader that leaves takes
  nothing with it.
- A reader's iteration ends when the run has ended; a paused run has not.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, TextIO, get_args

from pydantic import TypeAdapter

from ..recording.files import escape_surrogates, json_line
from ..run.events import AgentEvent

__all__ = ["DROPPED", "Feed", "RunEvent", "encode", "event_kind"]

DROPPED = "reader_dropped"
"""The kind of the last event a reader that fell behind gets."""


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One event of a managed run: its number in the run, its kind, and its data as JSON."""

    run_id: str
    seq: int
    kind: str
    data: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "seq": self.seq, "kind": self.kind, "data": self.data}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> RunEvent:
        return cls(
            run_id=str(record["run_id"]),
            seq=int(record["seq"]),
            kind=str(record["kind"]),
            data=record["data"],
        )


def event_kind(event_class: type) -> str:
    """``Transition`` -> ``transition``, ``LLMCallStarted`` -> ``llm_call_started``."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", event_class.__name__).lower()


def _dumper(event_class: type[Any]) -> tuple[TypeAdapter[Any], set[str] | None]:
    """How an event class dumps as JSON: its fields, less those never written (a live model)."""
    unwritten = {f.name for f in dataclasses.fields(event_class) if not f.repr}
    return TypeAdapter(event_class), unwritten or None


_DUMPERS = MappingProxyType({cls: _dumper(cls) for cls in get_args(AgentEvent)})
"""Each event class's dumper, made once (read-only)."""
_KINDS = MappingProxyType({cls: event_kind(cls) for cls in get_args(AgentEvent)})


def event_json(event: AgentEvent) -> dict[str, Any]:
    adapter, unwritten = _DUMPERS[type(event)]
    data: dict[str, Any] = adapter.dump_python(event, mode="json", exclude=unwritten)
    return data


def encode(event: AgentEvent) -> tuple[str, dict[str, Any]]:
    """`event`'s kind and data, as a `RunEvent` carries them: the one encoding of an agent's event
    for readers, whoever keeps it (a `Feed` here, a durable worker's table in the database)."""
    return _KINDS[type(event)], event_json(event)


class _Reader:
    def __init__(self, buffer: int) -> None:
        self.queue: asyncio.Queue[RunEvent | None] = asyncio.Queue(buffer + 1)  # one place for the last word
        self.buffer = buffer
        self.dropped = False


class Feed:
    """One run's events: numbered, appended to `path`, kept, and given to every reader."""

    def __init__(self, run_id: str, path: Path, *, buffer: int = 1000, new: bool = False) -> None:
        """`new`: a run that has no events yet (nothing to read back)."""
        self.run_id = run_id
        self.path = path
        self.buffer = buffer
        self.history: list[RunEvent] = [] if new else _read(path)  # a line a kill cut short is cut off
        self.ended = False
        self._readers: set[_Reader] = set()
        self._out: TextIO | None = None

    def publish(self, event: AgentEvent) -> None:
        """The agent's listener: number `event`, write it, hand it to the readers. Never waits."""
        self.add(*encode(event))

    def add(self, kind: str, data: dict[str, Any]) -> None:
        item = RunEvent(self.run_id, len(self.history) + 1, kind, data)
        self.history.append(item)
        if self._out is None:
            self._out = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - open for the run's life
        line = json_line(item.to_json())
        try:
            self._out.write(line)
        except UnicodeEncodeError:  # a lone surrogate in a model's text; nothing was written
            self._out.write(escape_surrogates(line))
        self._out.flush()
        for reader in list(self._readers):
            self._give(reader, item)

    def end(self) -> None:
        """The run ended: each reader finishes once it has read what came before."""
        self.ended = True
        self.close()

    def close(self) -> None:
        """The process lets go of the unfinished run (its manager closes): the file is closed, and
        each reader's iteration ends (it rejoins from its last `seq` once the run is taken up again)."""
        if self._out is not None:
            self._out.close()
            self._out = None
        for reader in list(self._readers):
            with contextlib.suppress(asyncio.QueueFull):
                reader.queue.put_nowait(None)

    async def read(self, after: int = 0) -> AsyncIterator[RunEvent]:
        """The events after `after` (their `seq`), the kept ones first, then the live ones, until the
        run has ended (or this reader fell `buffer` events behind: see the module's docstring)."""
        seq = after
        while seq < len(self.history):  # the kept ones, straight from the history: no buffer to fill
            seq += 1
            yield self.history[seq - 1]
        if self.ended:
            return
        reader = _Reader(self.buffer)  # caught up: the live ones from here (no await in between)
        self._readers.add(reader)
        try:
            while (item := await reader.queue.get()) is not None:
                yield item
                if item.kind == DROPPED:
                    return
        finally:
            self._readers.discard(reader)

    def _give(self, reader: _Reader, item: RunEvent) -> None:
        if reader.dropped:
            return
        if reader.queue.qsize() < reader.buffer:
            reader.queue.put_nowait(item)
            return
        reader.dropped = True  # the last place left: say why, and where to rejoin from
        self._readers.discard(reader)
        note = {"reason": f"the reader fell {reader.buffer} events behind", "rejoin_after": item.seq - 1}
        reader.queue.put_nowait(RunEvent(self.run_id, item.seq, DROPPED, note))


def _read(path: Path) -> list[RunEvent]:
    """The events kept at `path` (a restarted manager's history). A last line a kill cut short is
    cut off the file, so the next event is written on a line of its own."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    found, whole = [], 0
    for line in data.split(b"\n")[:-1]:  # what follows the last newline is a line cut short, or nothing
        try:
            found.append(RunEvent.from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            break
        whole += len(line) + 1
    if whole < len(data):
        with open(path, "r+b") as kept:
            kept.truncate(whole)
    return found
