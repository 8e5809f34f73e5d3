"""Checkpoints: a run's whole state as a journal, one record appended after every transition.

Why: a run killed at any point (SIGKILL, a lost machine) continues with
`BaseAgent.resume(path)` or `agentfsm resume PATH` from its last record,
instead of starting over and running its tools again. Why a journal: a
write costs what changed since the one before (the run state, and memory's
changes as `Memory.watch` reports them), never the whole history again,
however long the conversation.

Schema version `CHECKPOINT_SCHEMA` = 3 (2 is read too). JSON Lines; every record has a ``kind``:

- ``header`` (first): ``schema``, ``agent`` (name), ``agent_class``
  (``module.QualName``), ``config`` (the agent's `trace_config()`, as a
  trace's header records it; never an API key; checked on resume against
  the agent that resumes; Manus's holds ``sandbox``, ``{"kind": "docker",
  "image": NAME}`` or ``{"kind": "local"}``, once the kind is known, so the
  record after its first sandbox may carry the config again, and a resume
  runs there: `agentfsm.sandbox.record`; the field came within schema 2, and
  a checkpoint without it resumes under the sandbox settings given, as a new
  run would), ``started_at`` (ISO 8601, UTC).
- ``checkpoint`` (one per write): ``run_state`` (the run state's dump, an
  agent's `AgentRunState`: machine state, step, usage, stuck counters, and the
  step's record ``turn`` with its pending calls, observations, started and
  completed calls; schema 2 held the step's fields beside the run's; its
  ``seen``, stuck detection's count of
  each assistant turn of the run, only in the first record of a run or of a
  resume, else left out), ``seen`` (the entries of ``seen`` added or counted up
  since the record before), ``memory`` (memory's changes since the record
  before, in order; below), ``config`` (only when it is not the one in force:
  the first record of a resumed run, which may use another model),
  ``written_at`` (ISO 8601, UTC).

Memory's changes, each an object with an ``op``: ``snapshot`` with ``memory``
(the whole `MemorySnapshot`: the first record of a run or of a resume, or
after `agent.memory` was replaced), ``add`` with ``message`` (appended),
``request`` with ``message`` (appended and pinned: a run's request),
``drop`` with ``at`` and ``count`` (removed by trimming), ``replace_last``
with ``message`` (the pending calls were replaced), ``clear``.

Each record is one line, appended with one write and fsynced, in order, by the
journal's `RecordWriter` (`agentfsm.recording.writer`), in a thread off the
event loop: an fsync takes about a millisecond, a step writes about five
records, and while a file system commits an fsync an append to it may wait
too; a loop that did either would stall every other run in it. So does the
lease's check before each append (a ``stat``), and a run leases its journal
off the loop before it starts (`lease_checkpoint`). The run awaits
that thread (without blocking the loop) where it matters: a tool call's start
record is durable before the tool runs (so no call runs twice, whatever
crashes), its completion record before its result can enter memory, every
record of a run before `run()` returns or pauses, and each transition's
records before `iter()` yields it. A kill loses at most the records of the
edges since the last of these points; a resume then runs a phase again
(THINKING asks the model again), never a tool. A kill in the middle of a write
leaves at most part of the last line, without its newline: readers ignore it
(the record before it is the checkpoint), and a resume cuts it off before
appending. A run's `start` edge begins a new journal (an existing file is
truncated); a resumed run appends to the journal it was restored from,
beginning with a snapshot of memory. `read_checkpoint` replays a journal into
the state of its last record. The engine holds no random state, so nothing
else is needed.

A journal has one writer at a time: a `Checkpointer` holds the checkpoint's
`Lease` (`agentfsm.recording.lease`) from its creation until it closes, and
checks it before every append, so a second run or resume of the checkpoint
is refused (`CheckpointLeasedError`) instead of running its tools again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ..errors import CheckpointError
from ..memory import MemoryChange, MemoryWatch
from ..run.events import (
    AgentEvent,
    LLMCall,
    LLMCallStarted,
    LLMRetry,
    RunPaused,
    TextDelta,
    ToolCallDelta,
    Transition,
)
from ..run.state import RunState
from ..run.view import Recorded
from .files import RecordPath, check_writable, escape_surrogates, json_line, write_failed
from .lease import Lease
from .restore import (
    CHECKPOINT_PARTS,
    CHECKPOINT_SCHEMA,
    config_differences,
    damaged,
    read_checkpoint,
    read_memory,
    read_run_state,
    restore,
)
from .writer import Batch, RecordWriter

__all__ = [
    "CHECKPOINT_SCHEMA",
    "CheckpointError",
    "Checkpointer",
    "append_record",
    "config_differences",
    "damaged",
    "lease_checkpoint",
    "open_checkpoint",
    "read_checkpoint",
    "read_memory",
    "read_run_state",
    "restore",
    "write_checkpoint",
]


def append_record(path: RecordPath, text: str, *, new: bool = False) -> None:
    """Append `text` (whole lines) to the journal at `path` with one write, into the OS (a kill of
    the process after this returned loses nothing); `fsync_journal` makes it durable.

    `new`: start the journal over (create the file, or truncate it). A lone
    surrogate (not encodable in UTF-8) is written as its JSON escape.
    """
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:
        encoded = escape_surrogates(text).encode("utf-8")
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if new else os.O_APPEND)
    fd = os.open(path, flags, 0o666)
    try:
        data = memoryview(encoded)
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


def fsync_journal(path: RecordPath, directory: bool) -> None:
    """Make every append to the journal at `path` so far durable; `directory`: its creation too
    (an fsync of the folder). An fsync through any descriptor covers the file's every write."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    if directory:
        folder = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def _write_batch(path: RecordPath, batch: Batch) -> None:
    """Append `batch` to the journal at `path` in order, then fsync it once (a `RecordWriter`'s job)."""
    created = False
    for text, new in batch:
        append_record(path, text, new=new)  # looked up here, so a test's hook of it applies
        created |= new
    fsync_journal(path, directory=created)


def _cut_torn_tail(path: RecordPath) -> bool:
    """Drop a last line cut short by a kill (it has no newline), so the next record starts a line
    of its own. False when there is no journal to append to (missing or empty)."""
    if not os.path.exists(path):
        return False
    with open(path, "rb+") as journal:
        end = journal.seek(0, os.SEEK_END)
        if end == 0:
            return False
        journal.seek(end - 1)
        if journal.read(1) == b"\n":
            return True
        start = end
        while start > 0:  # backwards, a block at a time, to the last newline
            block_start = max(0, start - 65536)
            journal.seek(block_start)
            newline = journal.read(start - block_start).rfind(b"\n")
            if newline >= 0:
                journal.truncate(block_start + newline + 1)
                break
            start = block_start
        else:
            journal.truncate(0)
        journal.flush()
        os.fsync(journal.fileno())
        return journal.seek(0, os.SEEK_END) > 0


_line = json_line


def _record_line(run: RunState, rest: dict[str, Any], *, whole_seen: bool) -> str:
    """A ``checkpoint`` record's journal line: the dump of `run` (without ``seen`` unless
    `whole_seen`), then `rest`'s keys. Pydantic writes the run state straight to JSON, in a fifth
    of the time of a dump to Python values and `json.dumps`: this is on the loop at every record."""
    try:
        state = run.model_dump_json(exclude=None if whole_seen else {"seen"})
    except ValueError:  # a value pydantic will not write as JSON itself (a lone surrogate): the long way
        dump = run.model_dump(mode="json")
        if not whole_seen:
            dump.pop("seen", None)
        state = json.dumps(dump, ensure_ascii=False)
    return f'{{"kind": "checkpoint", "run_state": {state}, {_line(rest)[1:]}'


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _change_record(change: MemoryChange) -> dict[str, Any]:
    if change.kind == "drop":
        return {"op": "drop", "at": change.at, "count": change.count}
    if change.message is None:
        return {"op": change.kind}
    return {"op": change.kind, "message": change.message.model_dump(mode="json")}


class Checkpointer:
    """Appends `agent`'s run to the journal at `path` after every event that changes it.

    Every transition (but the `reset` back to the initial state, which ends the
    previous run rather than changing this one), every edit, and the start
    and the completion of every tool call. The model's calls change nothing a
    resume needs until the transition that follows them. A listener of the
    run from its start; `close()` (called when the run ends) unsubscribes.

    `lease`: the checkpoint's lease, already held (a resume takes it before it
    reads the journal); by default the checkpointer takes it, and
    `CheckpointLeasedError` says who holds it if another does. The lease is
    the checkpointer's from then on: `close()` releases it.
    """

    _writer: RecordWriter | None = None
    """The journal's appends and fsyncs, off the event loop (made on the first write)."""

    def __init__(self, path: RecordPath, agent: Recorded, *, lease: Lease | None = None) -> None:
        self.path = path
        self.agent = agent
        self.lease = lease if lease is not None else lease_checkpoint(path)
        """One writer at a time: checked before every append (in the writer's thread), released by
        `close()`."""
        self._watch: MemoryWatch | None = None
        """Memory's changes since the last record (None: the next record holds all of memory)."""
        self._config: dict[str, Any] | None = None
        """The configuration in force in the journal (None: the next record writes it)."""
        self._max_messages = 0
        """The memory limit in the journal's last snapshot of memory."""
        self._seen: dict[str, int] | None = None
        """`AgentRunState.seen` as the journal holds it (None: the next record writes it whole)."""
        self._started = False
        self._unsubscribe = agent.on_event(self._on_event)

    def close(self) -> None:
        """Stop listening, stop watching memory, end the writer's thread, and release the lease."""
        self._unsubscribe()
        self._forget()
        if self._writer is not None:
            self._writer.close()
        self.lease.release()

    def _on_event(self, event: AgentEvent) -> RecordWriter | None:
        if isinstance(
            event, LLMCall | LLMCallStarted | LLMRetry | RunPaused | TextDelta | ToolCallDelta
        ):  # nothing changed (a retry neither: see `LLMRetry`)
            return None
        if event.agent != self.agent.name:  # a flow's agent's: the flow's next record holds it
            return None
        initial = self.agent.table.initial
        if isinstance(event, Transition) and event.dest == initial:
            return None
        self.write(new=isinstance(event, Transition) and event.source == initial)
        return self._writer  # the engine awaits it before a tool runs, after one ran, and at the run's end

    def write(self, *, new: bool = False) -> None:
        """Append one record: the run state, and what changed in memory since the last record.

        The first write of a run's `start` edge (`new`) begins a new journal with
        its header; the first write of a resumed run appends to its journal.
        A write or an fsync that failed is a `RecordingError` naming the file and the cause.
        """
        agent = self.agent
        config = agent.trace_config()
        writer = self._writer
        if writer is None:
            writer = self._writer = RecordWriter(self.path, _write_batch, check=self.lease.verify)
        if writer.error is not None:
            raise writer.error
        head = ""
        if not self._started:
            try:
                new = new or not _cut_torn_tail(self.path)  # no journal to go on with: begin one
            except OSError as exc:
                raise write_failed("checkpoint", self.path, exc) from None
            if new:
                head = _line(self._header(config))
                self._config = config
        run = agent.run_state
        counted: dict[str, int] | None = getattr(run, "seen", None)  # an agent's (`AgentRunState`)
        seen = dict(counted) if counted is not None else {}
        changed: dict[str, int] | None = None
        known = self._seen
        if (
            counted is not None and known is not None and len(seen) >= len(known)
        ):  # entries are only ever added or counted up
            delta = {key: count for key, count in seen.items() if known.get(key) != count}
            if len(seen) - len(known) == sum(key not in known for key in delta):
                changed = delta
        record: dict[str, Any] = {}  # after the run state (see `_record_line`)
        if changed is not None:
            record["seen"] = changed
        record["memory"] = self._memory_changes()
        parts = agent.checkpoint_parts()
        if parts:
            record["parts"] = parts
        if config != self._config:
            record["config"] = config
        record["written_at"] = _now()
        try:
            whole_seen = counted is not None and changed is None
            writer.add(head + _record_line(run, record, whole_seen=whole_seen), new=bool(head))
        except BaseException:
            self._forget()  # what was taken from the watch is not in the journal: start whole again
            self._seen = None
            raise
        self._started, self._config, self._seen = True, config, seen

    def _header(self, config: dict[str, Any]) -> dict[str, Any]:
        cls = type(self.agent)
        return {
            "kind": "header",
            "schema": CHECKPOINT_SCHEMA,
            "agent": self.agent.name,
            "agent_class": f"{cls.__module__}.{cls.__qualname__}",
            "config": config,
            "started_at": _now(),
        }

    def _memory_changes(self) -> list[dict[str, Any]]:
        memory, watch = self.agent.memory, self._watch
        if watch is not None and watch.memory is memory and self._max_messages == memory.max_messages:
            return [_change_record(change) for change in watch.take()]
        self._forget()  # the first record, another memory object, or another limit: memory whole
        self._watch, self._max_messages = memory.watch(), memory.max_messages
        return [{"op": "snapshot", "memory": memory.snapshot().model_dump(mode="json")}]

    def _forget(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None


def lease_checkpoint(path: RecordPath) -> Lease:
    """Refuse a `path` a checkpoint cannot be written to (`RecordingError`), then lease it
    (`CheckpointLeasedError` names who holds it): what a run asks the file system before it starts.
    A run asks it off the event loop (`agentfsm.recording.writer.off_loop`): a ``stat`` or a
    create waits while the file system commits another run's fsync, and fifty runs starting at
    once would each wait on the loop."""
    check_writable(path, "checkpoint")
    return Lease.acquire(path)


def open_checkpoint(
    path: RecordPath, read: Callable[[RecordPath], dict[str, Any]] | None = None
) -> tuple[Lease, dict[str, Any]]:
    """Lease the journal at `path` (`lease_checkpoint`), then read it for a resume (`read`: the
    reader of another kind of checkpoint, a flow's): the lease first, so no other run moves on
    from what is read. Released again if the read fails."""
    lease = lease_checkpoint(path)
    try:
        return lease, read(path) if read is not None else read_checkpoint(path, resuming=True)
    except BaseException:
        lease.release()
        raise


def write_checkpoint(path: RecordPath, data: dict[str, Any]) -> None:
    """Write `data` (as `read_checkpoint` returns it) as a new journal at `path`: a header, one record.

    Reading a long journal and writing it to another path this way compacts
    it; the write is not atomic, so do not write over the journal being read.
    The write leases `path` meanwhile: a journal a run holds is not written
    over (`CheckpointLeasedError`).
    """
    missing = [key for key in CHECKPOINT_PARTS if key not in data]
    if missing:
        raise CheckpointError(
            f"a checkpoint needs {', '.join(CHECKPOINT_PARTS)}; this one lacks {', '.join(missing)}"
        )
    header = {
        "kind": "header",
        "schema": CHECKPOINT_SCHEMA,
        "agent": data.get("agent"),
        "agent_class": data["agent_class"],
        "config": data["config"],
        "started_at": _now(),
    }
    record = {
        "kind": "checkpoint",
        "run_state": data["run_state"],
        "memory": [{"op": "snapshot", "memory": data["memory"]}],
        **({"parts": data["parts"]} if "parts" in data else {}),
        "written_at": data.get("written_at") or _now(),
    }
    lease = Lease.acquire(path)
    try:
        append_record(path, _line(header) + _line(record), new=True)
        fsync_journal(path, directory=True)
    finally:
        lease.release()
