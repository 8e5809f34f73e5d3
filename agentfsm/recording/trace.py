"""JSON Lines traces of a run: everything needed to read it, and to replay it offline.

Why JSON Lines, written record by record and flushed: a run killed midway
leaves a readable prefix, and `agentfsm replay` re-drives the machine from
that prefix as far as it goes. The records come from the engine's one event
stream (`BaseAgent.on_event`), so a trace holds exactly what a debugger sees.
Why messages are numbered: each request resends the conversation, and a
trace that wrote every request whole would grow with the square of the
run's length. Each distinct message is written once; requests name theirs.

Schema version `TRACE_SCHEMA` = 3. One JSON object per line; every one has a `kind`:

- ``header`` (first): ``schema``, ``run_id``, ``agent`` (name), ``agent_class``
  (``module.QualName``), ``config`` (the agent's `trace_config()`: limits,
  prompts, tool choice, tool declarations, the LLM's model and settings; never
  its API key), ``table`` (the machine the run ran, `MachineTable.describe()`: so a reader
  draws the run's own states and edges without its classes; a trace written before the field came has none),
  ``request``, ``history`` (messages in memory before this run;
  they are the trace's messages number 0, 1, ...), ``started_at`` (ISO 8601, UTC); a forked
  run's (`agentfsm.runs.Runs.fork`) has ``forked_from`` (the parent's ``run_id``, the
  ``transition``, and its ``trace`` or ``checkpoint`` when it was forked from a file), and one
  forked from a checkpoint file alone, whose history no trace holds, has ``begins_after``
  (``edges`` and ``edits``: how far the run had gone before its first record; it does not replay).
- ``transition``: ``step``, ``source``, ``dest``, ``trigger``, ``guards``
  (``[{"name", "held"}]`` in table order), ``stop_reason``, ``error``, ``duration_s``.
- ``llm``: ``step``, ``new_messages`` (the messages of this request the trace
  did not hold yet, numbered on from the last one), ``request`` (``messages`` and
  ``system_msgs`` as sent, each a list of runs ``[first, count]``: the messages
  numbered ``first`` to ``first + count - 1``, in order; ``tools``, or null for the
  same tools as the previous ``llm`` record; ``tool_choice``), ``reply`` (content,
  tool_calls, usage, model, finish_reason, provider_fields; null when the call raised), ``usage``,
  ``error`` (null or ``{"type", "message"}``), ``duration_s``.
- ``tool``: ``step``, ``call_id``, ``name``, ``arguments`` (the raw JSON string),
  ``observation``, ``base64_image``, ``is_error``, ``duration_s``, and for a call that
  asked for input instead of finishing, ``input_required`` (its questions), and for a
  valid ``final_result`` call, ``output`` (the answer's JSON), and for a tool that asked a
  model itself, ``usage`` (what it spent, counted in the run's); written just
  before each transition out of ACTING, as the tools returned them (before edits). A call
  that asked for input has a record per round, in order (and a call of that step that
  finished, one per transition out of ACTING).
- ``edit``: ``step``, ``edit`` (``pending_calls``, ``observation``, ``approval`` or
  ``answer``), ``call_id``, ``before``, ``after`` (call lists, or observation texts; for an
  approval, the call as the model made it and the `Decision`; for an answer, the
  question's key and the `Answer`).
- ``result`` (last, when the run ended): ``result``, the `RunResult`. A run paused
  for approval or input writes its paused result (``stop_reason`` ``awaiting_approval``
  or ``awaiting_input``);
  `resume(trace=...)` appends the rest of the run after it.

The events `LLMCallStarted`, `LLMRetry` (see why there), `RunPaused` and a streaming reply's
deltas are not written as records of their own: the ``llm`` record says the call whole, and
a pause writes its paused result.

Messages, calls and results are the pydantic JSON dumps of the engine's types.
A message is the same message wherever it appears (one object, or equal
values: a next-step prompt built again for each request is written once), so
a request costs the trace its new messages and a few runs, however long the
history; the order of the runs can express any request, not only a longer
one (memory trims from the front, keeps the first request, and a transient
prompt ends each request or its system message). `read_trace` gives each request back whole.
"""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from ..errors import RecordingError, TraceError
from ..log import event
from ..messages import Message
from ..questions import Answer
from ..run.events import AgentEvent, Edit, LLMCall, Transition
from ..run.result import RunResult
from ..run.state import Decision
from ..run.view import Recorded
from .files import RecordPath, check_writable, escape_surrogates, json_line, write_failed
from .kinds import file_kind, not_a

__all__ = [
    "TRACE_SCHEMA",
    "MemoryTrace",
    "TraceError",
    "TraceWriter",
    "cut_for_resume",
    "edit_record",
    "read_header",
    "read_trace",
    "read_trace_text",
    "transition_record",
]

TRACE_SCHEMA = 3
"""3: the step prompt ends the system message after tool results, messages and calls carry
`provider_fields`; a schema-2 trace's requests cannot be rebuilt the same way, so it is refused."""


class MemoryTrace:
    """A trace kept in memory instead of a file: ``agent.run(trace=MemoryTrace())`` writes it
    record by record as it writes a file, `text` is what the file would hold (JSON Lines), and
    a paused run's ``resume(trace=...)`` goes on in the same object.

    For a process that keeps the trace somewhere else (a durable run stores it in its database):
    no file is made, and no record waits for a disk to flush it (on a slow file system a trace's
    flushes cost more than the run's own work)."""

    def __init__(self) -> None:
        self._buffer = io.StringIO()

    @property
    def text(self) -> str:
        """The trace so far, JSON Lines as `agentfsm replay` reads from a file."""
        return self._buffer.getvalue()

    def __str__(self) -> str:
        return "<trace in memory>"

    def open(self, *, append: bool) -> io.TextIOBase:
        """The end a `TraceWriter` writes to: on from the text so far (`append`), or afresh."""
        if not append:
            self._buffer = io.StringIO()
        return _MemoryFile(self._buffer)


class _MemoryFile(io.TextIOBase):
    """The writer's end of a `MemoryTrace`: writes go into its buffer, closing leaves the buffer be."""

    def __init__(self, buffer: io.StringIO) -> None:
        super().__init__()
        self._buffer = buffer

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        return self._buffer.write(text)


Trace = RecordPath | MemoryTrace
"""Where a run's trace goes: a file's path, or a `MemoryTrace`."""


class TraceWriter:
    """Writes one run of `agent` to `path` while it runs (a context manager around the run).

    The file is opened at once, so a bad path fails before the run starts.
    Events before the run's `start` edge (the `reset` of the previous run) are
    not part of this run and are skipped. `append`: the agent's run was paused
    and is resumed; its records go on at the end of the file (no new header),
    and its messages are numbered on from those the file holds (its first
    request writes its messages again: this writer never saw those objects).
    """

    def __init__(self, path: Trace, agent: Recorded, *, append: bool = False) -> None:
        self.agent = agent
        self.path = path
        self.run_id: str | None = agent.run_state.run_id if append else None
        self._numbers = _Numbering(_messages_held(path) if append else 0)
        self._tools: tuple[dict[str, Any], ...] | None = None
        """The tools of the last `llm` record (the next one writes null if they are the same)."""
        self._broken: RecordingError | None = None
        """Why a write failed: the records after it would name messages the file lacks, so none follow."""
        if isinstance(path, MemoryTrace):
            self._out: TextIO | io.TextIOBase = path.open(append=append)
        else:
            check_writable(path, "trace")
            try:
                self._out = open(path, "a" if append else "w", encoding="utf-8")  # noqa: SIM115
            except OSError as exc:
                raise write_failed("trace", path, exc) from None
        for edit in agent.paused_edits if append else ():
            self._write(edit_record(edit))
        # First: each record is written (and flushed) before the checkpoint's record of the same
        # event is handed to its writer's thread, so a kill leaves the trace at or past the
        # checkpoint, and a resume from the checkpoint can cut it back (`cut_for_resume`).
        self._unsubscribe = agent.on_event(self._on_event, first=True)

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Write the result (if this run produced one), stop listening, close the file."""
        if self._out.closed:
            return
        self._unsubscribe()
        result = self.agent.last_result
        try:
            if self.run_id is not None and result is not None and result.run_id == self.run_id:
                self._write(self._result_record(result))
            self._out.close()
        except RecordingError as exc:  # the run is over and has its result; replay never reads this one
            event("trace_result_unwritten", logging.WARNING, path=_name(self.path), error=str(exc))
        except OSError:  # closing flushes what a failed write left in the buffer, and fails again
            pass

    def _write(self, record: dict[str, Any]) -> None:
        if self._broken is not None:
            raise self._broken
        line = json_line(record)
        try:
            try:
                self._out.write(line)
            except UnicodeEncodeError:  # a lone surrogate; nothing was written
                self._out.write(escape_surrogates(line))
            self._out.flush()
        except OSError as exc:
            self._broken = write_failed("trace", _name(self.path), exc)
            raise self._broken from None

    def _result_record(self, result: RunResult) -> dict[str, Any]:
        """The ``result`` record of the run that ended (or paused) with `result`."""
        return {"kind": "result", "result": result.model_dump(mode="json")}

    def _on_event(self, event: AgentEvent) -> None:
        if self._broken is not None:  # the run ends with that failure; its later records would mislead
            return
        if self.run_id is None:
            if not (isinstance(event, Transition) and event.source == self.agent.table.initial):
                return
            self.run_id = event.run_id
            self._write(self._header())
        for record in self._records_of(event):
            self._write(record)

    def _records_of(self, event: AgentEvent) -> list[dict[str, Any]]:
        """The records `event` is written as, in order (none for an event a trace does not keep)."""
        records: list[dict[str, Any]] = []
        if isinstance(event, Transition):
            for obs in event.observations:  # edges out of the phase that ran the tools carry them
                record = {
                    "kind": "tool",
                    "step": event.step,
                    "call_id": obs.call.id,
                    "name": obs.call.name,
                    "arguments": obs.call.arguments,
                    "observation": obs.content,
                    "base64_image": obs.base64_image,
                    "is_error": obs.is_error,
                    "duration_s": obs.duration_s,
                }
                if obs.input_required is not None:
                    record["input_required"] = obs.input_required.model_dump(mode="json")
                if obs.output is not None:  # a valid `final_result`'s answer, as JSON
                    record["output"] = obs.output
                if obs.usage is not None:  # what the tool spent asking a model itself
                    record["usage"] = obs.usage.model_dump(mode="json")
                records.append(record)
            records.append(transition_record(event))
        elif isinstance(event, LLMCall):
            records.append(self._llm_record(event))
        elif isinstance(event, Edit):
            records.append(edit_record(event))
        return records

    def _header(self) -> dict[str, Any]:
        agent = self.agent
        cls = type(agent)
        history = agent.memory.messages[:-1]  # at `start` the request is the last message
        self._numbers.hold(history)
        return {
            "kind": "header",
            "schema": TRACE_SCHEMA,
            "run_id": self.run_id,
            "agent": agent.name,
            "agent_class": f"{cls.__module__}.{cls.__qualname__}",
            "config": agent.trace_config(),
            "table": agent.table.describe(),
            "request": agent.run_state.request,
            "history": [m.model_dump(mode="json") for m in history],
            "started_at": datetime.now(UTC).isoformat(),
        }

    def _llm_record(self, call: LLMCall) -> dict[str, Any]:
        numbers, reply = self._numbers, call.reply
        messages, system = numbers.runs(call.messages), numbers.runs(call.system_msgs)
        tools = None if call.tools == self._tools else list(call.tools)
        self._tools = call.tools
        return {
            "kind": "llm",
            "step": call.step,
            "new_messages": numbers.take_new(),
            "request": {
                "messages": messages,
                "system_msgs": system,
                "tools": tools,
                "tool_choice": call.tool_choice,
            },
            "reply": reply.model_dump(mode="json") if reply is not None else None,
            "usage": reply.usage.model_dump(mode="json") if reply is not None else None,
            "error": {"type": call.error_type, "message": call.error} if call.error_type else None,
            "duration_s": call.duration_s,
        }


def transition_record(t: Transition) -> dict[str, Any]:
    """The ``transition`` record of `t` (replay compares its own edges in this form)."""
    return {
        "kind": "transition",
        "step": t.step,
        "source": t.source,
        "dest": t.dest,
        "trigger": t.trigger,
        "guards": [{"name": g.name, "held": g.held} for g in t.guards],
        "stop_reason": str(t.stop_reason) if t.stop_reason else None,
        "error": t.error,
        "duration_s": t.duration_s,
    }


def edit_record(edit: Edit) -> dict[str, Any]:
    """The ``edit`` record of `edit`."""

    def dump(value: tuple[Any, ...] | str | Decision | Answer) -> Any:
        if isinstance(value, Decision | Answer):
            return value.model_dump(mode="json")
        return value if isinstance(value, str) else [c.model_dump(mode="json") for c in value]

    return {
        "kind": "edit",
        "step": edit.step,
        "edit": edit.kind,
        "call_id": edit.call_id,
        "before": dump(edit.before),
        "after": dump(edit.after),
    }


class _Numbering:
    """The trace's messages by number, and each request as runs of numbers.

    A message is known by its identity (memory hands the same objects to each
    request) or else by its value, so a request costs O(new messages + runs)
    lookups. Each run is found by galloping over the ends of ever longer
    stretches, then proved by one comparison of the whole stretch (C speed,
    identity first): the runs hold exactly the messages sent, whatever
    happened to them in between.
    """

    def __init__(self, start: int) -> None:
        self.start = start
        """Messages numbered before this writer (the trace it appends to holds them)."""
        self.table: list[Message] = []
        """The messages numbered `start`, `start + 1`, ..., as first seen."""
        self._by_id: dict[int, int] = {}
        self._by_value: dict[Message, int] = {}
        self._alive: list[Message] = []
        """The messages known by identity but not in `table`, kept so that their ids stay theirs."""
        self._new: list[dict[str, Any]] = []

    def hold(self, messages: Sequence[Message]) -> None:
        """Number `messages` in order, each (equal ones too): what the trace writes whole (the history)."""
        for message in messages:
            number = self.start + len(self.table)
            self.table.append(message)
            self._by_id[id(message)] = number
            self._by_value.setdefault(message, number)

    def number(self, message: Message) -> int:
        """The number of `message`; one not held yet gets the next, and is written with the record."""
        number = self._by_id.get(id(message))
        if number is not None:
            return number
        number = self._by_value.get(message)
        if number is None:
            number = self.start + len(self.table)
            self.table.append(message)
            self._by_value[message] = number
            self._new.append(message.model_dump(mode="json"))
        else:
            self._alive.append(message)
        self._by_id[id(message)] = number
        return number

    def take_new(self) -> list[dict[str, Any]]:
        """The dumps of the messages numbered since the last call, in number order."""
        new, self._new = self._new, []
        return new

    def runs(self, sent: Sequence[Message]) -> list[list[int]]:
        """`sent` as runs ``[first, count]`` of message numbers."""
        messages = tuple(sent)
        runs: list[list[int]] = []
        i = 0
        while i < len(messages):
            first = self.number(messages[i])
            count = self._stretch(first - self.start, messages, i)
            if runs and runs[-1][0] + runs[-1][1] == first:
                runs[-1][1] += count
            else:
                runs.append([first, count])
            i += count
        return runs

    def _stretch(self, at: int, messages: tuple[Message, ...], i: int) -> int:
        """How many of `messages` from `i` on are `table` from `at` on (at least one: the first is)."""
        table = self.table
        limit = min(len(messages) - i, len(table) - at)
        good, bad, step = 1, limit + 1, 1
        while good + step <= limit:  # gallop: the ends of stretches twice as long each time
            if table[at + good + step - 1] is not messages[i + good + step - 1]:
                bad = good + step
                break
            good, step = good + step, step * 2
        else:  # the next stretch would pass the limit: try the limit itself
            if table[at + limit - 1] is messages[i + limit - 1]:
                good = limit
            else:
                bad = limit
        while bad - good > 1:  # then halve the gap between the last end that matched and the first not
            middle = (good + bad) // 2
            if table[at + middle - 1] is messages[i + middle - 1]:
                good = middle
            else:
                bad = middle
        if good > 1 and tuple(table[at : at + good]) != messages[i : i + good]:  # the ends, not all
            good = next(k for k in range(1, good) if table[at + k] != messages[i + k])
        return good


def _lines(path: RecordPath) -> list[tuple[int, dict[str, Any]]]:
    """The records of the trace at `path` with their line numbers, checked for the header and schema;
    a last line cut mid-write (a crash) is dropped. A checkpoint given for a trace is said to be one
    (`agentfsm.recording.kinds`), not a trace of another schema."""
    try:
        records = _records(path)
    except TraceError:
        found = file_kind(path)
        if found in ("checkpoint", "flow checkpoint"):
            raise TraceError(not_a(path, "trace", found)) from None
        raise
    found = file_kind(path)
    if found in ("checkpoint", "flow checkpoint"):  # a header of the same schema, then a journal's records
        raise TraceError(not_a(path, "trace", found))
    return records


def _name(path: Trace) -> str:
    return str(path) if isinstance(path, MemoryTrace) else os.fspath(path)


def _records(path: RecordPath) -> list[tuple[int, dict[str, Any]]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"cannot read the trace {path}: {exc}") from None
    return _parsed(text, path)


def _parsed(text: str, path: Trace) -> list[tuple[int, dict[str, Any]]]:
    """The records of the trace `text` (read from `path`, which the errors name)."""
    lines = text.splitlines()
    records: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines) and not text.endswith("\n"):
                break
            raise TraceError(f"{path}:{number}: not a JSON object") from None
        if not isinstance(record, dict) or "kind" not in record:
            raise TraceError(f"{path}:{number}: every trace record is a JSON object with a 'kind'")
        records.append((number, record))
    if not records or records[0][1]["kind"] != "header":
        raise TraceError(f"{path}: not an agentfsm trace (its first record's kind must be 'header')")
    schema = records[0][1].get("schema")
    if schema != TRACE_SCHEMA:
        raise TraceError(
            f"{path}: trace schema {schema!r} is not supported; this agentfsm reads schema {TRACE_SCHEMA}; "
            "re-record the run with this agentfsm"
        )
    return records


def cut_for_resume(path: RecordPath, run_id: str, edges: int, edits: int) -> None:
    """Cut the trace at `path` back to where the checkpoint of its run stands, so that the run
    resumed from that checkpoint (`resume(checkpoint, trace=path)`) goes on writing it as if it
    had never stopped.

    The checkpoint's run took `edges` edges and had `edits` edits (`RunState.edges`, `.edits`).
    The trace keeps its records up to that many transitions, then the edits that follow them until
    it holds that many edits (made in the phase the run resumes in, or while it was paused). What
    came after the checkpoint is dropped: the model's reply a kill cut off before its edge was
    recorded (the resumed run asks again), the paused result of a run paused there (it pauses, or
    goes on, again). A trace written up to a kill is always ahead of its checkpoint, which is
    written off the event loop, so the cut point is in it. `TraceError`, with nothing changed, when
    it is not: the trace is another run's, or stops before that edge, or lacks edits the checkpoint
    holds (decisions taken while the run was paused go into the trace only when it goes on, and
    the process stopped before that), or the checkpoint was written before runs counted their
    edges.

    A flow's trace counts the flow's own records only (its checkpoint counts its own edges): its
    agents' records (tagged ``agent``) up to the cut stay, and those after it go with the phase
    the flow enters again."""
    if edges < 1:
        raise TraceError(
            f"the checkpoint of run {run_id!r} does not say how far its run went (it was written by an "
            f"earlier release): resume it without `trace`, and the trace {path} stays as it is"
        )
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TraceError(f"cannot read the trace {path}: {exc.strerror}") from None
    lines = data.splitlines(keepends=True)
    if lines and not lines[-1].endswith(b"\n"):
        lines.pop()  # a line a kill cut short
    records: list[dict[str, Any]] = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            raise TraceError(
                f"{path}: line {len(records) + 1} is not a JSON record; not a trace to go on with"
            ) from None
        records.append(record if isinstance(record, dict) else {})
    if not records or records[0].get("kind") != "header" or records[0].get("run_id") != run_id:
        found = records[0].get("run_id") if records else None
        raise TraceError(
            f"{path} is not the trace of run {run_id!r} (its header names {found!r}); pass the trace "
            "the run wrote, or resume without `trace`"
        )
    kinds = [record.get("kind") if "agent" not in record else "tagged" for record in records]
    transitions = [at for at, kind in enumerate(kinds) if kind == "transition"]
    before = records[0].get("begins_after") or {}  # a fork's trace begun where its checkpoint stood
    edges, edits = edges - int(before.get("edges", 0)), edits - int(before.get("edits", 0))
    if len(transitions) < edges:
        raise TraceError(
            f"{path} holds {len(transitions)} edges of run {run_id!r}, its checkpoint {edges}: it is not "
            "the whole trace of that run; resume without `trace`"
        )
    end = transitions[edges - 1] + 1 if edges > 0 else 1
    kept = list(range(end))
    held = kinds[:end].count("edit")
    for at in range(end, len(records)):
        if held >= edits or kinds[at] == "transition":
            break
        if kinds[at] == "edit":
            kept.append(at)
            held += 1
    if held < edits:
        raise TraceError(
            f"{path} holds {held} of the {edits} edits of run {run_id!r} its checkpoint holds (decisions "
            "taken while it was paused reach the trace when the run goes on, and it stopped first); "
            "resume without `trace`"
        )
    if kept == list(range(len(kept))):  # a prefix: cut where it ends
        size = sum(len(lines[at]) for at in kept)
        if size < len(data):
            with open(path, "r+b") as trace:
                trace.truncate(size)
        return
    temporary = f"{os.fspath(path)}.cut"  # the prefix and edits past it: the file replaced whole
    with open(temporary, "wb") as trace:
        trace.write(b"".join(lines[at] for at in kept))
    os.replace(temporary, path)


def read_header(path: RecordPath) -> dict[str, Any]:
    """The header of the trace at `path` (`TraceError` if it is not a trace of this schema)."""
    return _lines(path)[0][1]


def _messages_held(path: Trace) -> int:
    """How many messages the trace at `path` has numbered (a writer appending to it numbers on)."""
    if isinstance(path, MemoryTrace):
        if not path.text:
            return 0
        records = _parsed(path.text, path)
    elif not os.path.exists(path):
        return 0
    else:
        records = _lines(path)
    held = len(records[0][1].get("history", ()))
    return held + sum(len(r.get("new_messages", ())) for _, r in records if r["kind"] == "llm")


def read_trace(path: RecordPath) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and the other records, each `llm` record's request whole again (its ``messages``
    and ``system_msgs`` the message dumps, its ``tools`` the list); `TraceError` if it cannot be.
    A last line cut mid-write (a crash) is dropped."""
    return _read(path, _lines(path))


def read_trace_text(text: str, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`read_trace` of a trace held as text (a durable run's, kept in its database); `name` is what
    the errors call it."""
    return _read(name, _parsed(text, name))


def _read(
    path: Trace, lines: list[tuple[int, dict[str, Any]]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from .trace_records import check_record  # pydantic, loaded by what reads a trace back

    for number, record in lines:
        check_record(path, number, record)
    (_, header), *rest = lines
    table: list[Any] = list(header.get("history", ()))
    tools: Any = None
    records: list[dict[str, Any]] = []
    for number, record in rest:
        if record["kind"] == "llm":
            table.extend(record.get("new_messages", ()))
            request = record["request"] = dict(record["request"])
            for key in ("messages", "system_msgs"):
                request[key] = _whole(path, number, table, request[key])
            if request["tools"] is None:
                if tools is None:
                    raise TraceError(
                        f"{path}:{number}: the request's tools are the previous ones, but none came before"
                    )
                request["tools"] = tools
            tools = request["tools"]
        records.append(record)
    return header, records


def _whole(path: Trace, line: int, table: list[Any], runs: Any) -> list[Any]:
    whole: list[Any] = []
    for run in runs:
        first, count = run
        if not (first >= 0 and count >= 1 and first + count <= len(table)):
            raise TraceError(
                f"{path}:{line}: the request names messages {first} to {first + count - 1}; "
                f"the trace holds {len(table)} by then"
            )
        whole.extend(table[first : first + count])
    return whole
