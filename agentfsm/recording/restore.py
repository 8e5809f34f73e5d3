"""A checkpoint read back: its journal replayed into the state of its last record, checked, and
put into an agent that resumes it (`restore`).

The journal's format is `agentfsm.recording.checkpoint`'s, which writes it (and re-exports
`read_checkpoint` and `restore`, where they were first). Reading is kept apart from writing:
a resume, `agentfsm resume`, a flow's checkpoint and the tests read journals that nothing in
the process writes, and every part of a record is checked as it is read (a damaged journal is
one line naming the file and the field, never an exception from inside a run).
"""

from __future__ import annotations

import json
import os
from typing import Any, TypeVar, get_args

from ..errors import AgentfsmError, CheckpointError, WrongValueError
from ..memory import ChangeKind, Memory, MemorySnapshot, apply_change
from ..run.result import StopReason
from ..run.state import RunState
from ..run.view import Recorded
from .files import RecordPath
from .kinds import file_kind, not_a

__all__ = [
    "CHECKPOINT_PARTS",
    "CHECKPOINT_SCHEMA",
    "config_differences",
    "damaged",
    "read_checkpoint",
    "read_journal",
    "read_journal_text",
    "read_memory",
    "read_run_state",
    "restore",
]

S = TypeVar("S", bound=RunState)
"""A run state's class: `RunState`, or the subclass a kind of machine adds its fields with."""

CHECKPOINT_SCHEMA = 3
"""The journal's schema version (the module docstring of `agentfsm.recording.checkpoint`).
3: an agent's step in a record of its own (`AgentRunState.turn`)."""
READ_SCHEMAS = (2, CHECKPOINT_SCHEMA)
"""The schemas a resume reads: 2 holds the step's fields beside the run's, which
`AgentRunState.model_validate` reads too."""
CHECKPOINT_PARTS = ("agent_class", "config", "run_state", "memory")
"""What a checkpoint read back holds (and `write_checkpoint` needs)."""
_UNCHECKED = frozenset({"llm", "mcp_tools", "sandbox", "built_by"})
"""Config keys a resume may change: the model and its settings (a run may resume on another
server), the tools MCP servers offer (`agentfsm.mcp.tools.MCPServers.recorded`), Manus's
``sandbox``, which the agent takes up instead (`BaseAgent.prepare_resume`), and how the command
line built it (``built_by``: an app resuming in Python builds it its own way; the class and the
options are what must match)."""
_CHANGES: dict[str, ChangeKind] = {kind: kind for kind in get_args(ChangeKind)}
"""The ``op`` of each change a journal may hold, but ``snapshot`` (the whole memory)."""


def _schema_error(name: str, found: object) -> CheckpointError:
    return CheckpointError(
        f"{name}: checkpoint schema {found!r} is not supported; this agentfsm reads schemas "
        f"{' and '.join(map(str, READ_SCHEMAS))}; finish that run with the agentfsm that wrote it, "
        "or start it again"
    )


def _parse(name: str, number: int, line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"the checkpoint {name} is not JSON Lines (line {number}: {exc})") from None
    except RecursionError:  # json's parser recurses: arrays or objects nested thousands deep
        raise CheckpointError(
            f"the checkpoint {name} is damaged: line {number} is nested too deeply to read; {_FIX}"
        ) from None
    if not isinstance(record, dict):
        raise CheckpointError(f"the checkpoint {name} is not JSON Lines of objects (line {number})")
    return record


def read_checkpoint(path: RecordPath, *, resuming: bool = False) -> dict[str, Any]:
    """The run in the journal at `path` as of its last whole record; `CheckpointError` otherwise.

    The journal is replayed into one snapshot: ``schema``, ``agent``,
    ``agent_class``, ``config`` (the one in force), ``run_state`` (the last
    record's), ``memory`` (the `MemorySnapshot` dump that memory's changes
    add up to) and ``written_at``. A last line without its newline (a write
    cut short) is ignored. `resuming`: the state a resume continues from, where
    the record of a cancellation is left out (see `_cancellation`).

    Everything a resume reads is checked here (`_check`), so that a damaged
    journal is one `CheckpointError` naming the file and what is wrong with it,
    never another library's exception from deep inside the resume: the run
    state and memory read back as the engine's types, memory's invariants hold
    (every tool message answers a call, a limit of at least two messages).
    A trace or a flow's checkpoint given for it is said to be one.
    """
    try:
        data = read_journal(path, resuming=resuming)
    except CheckpointError:
        found = file_kind(path)
        if found is not None and found != "checkpoint":
            raise CheckpointError(not_a(path, "checkpoint", found)) from None
        raise
    if "parts" in data:  # a flow's journal (`agentfsm.flow.checkpoint`)
        raise CheckpointError(not_a(path, "checkpoint", "flow checkpoint"))
    step = data["run_state"]["step"]  # an agent's counts its steps from 1 (a flow's, executed ones, from 0)
    if step < 1:
        raise damaged(os.fspath(path), f"its run is at step {step!r}; a run's steps count from 1")
    return data


def read_journal(path: RecordPath, *, resuming: bool = False) -> dict[str, Any]:
    """`read_checkpoint`'s replay of any journal, an agent's or a flow's (whose records hold its
    plan and agents, the last one's under ``parts``), without naming another kind of file."""
    return _read(path, resuming)


def _read(path: RecordPath, resuming: bool) -> dict[str, Any]:
    name = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as source:
            text = source.read()
    except OSError as exc:
        raise CheckpointError(f"cannot read the checkpoint {name}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"the checkpoint {name} is not JSON Lines: {exc}") from None
    return read_journal_text(text, name, resuming=resuming)


def read_journal_text(text: str, name: str, *, resuming: bool = False) -> dict[str, Any]:
    """`read_journal` of a journal's text (`name`: what errors call it), read already: a part of
    one, up to a record of the caller's choosing (a fork: `agentfsm.runs.forking`)."""
    lines = text.split("\n")
    torn = lines.pop()  # what follows the last newline: nothing, or a write cut short
    if not lines:  # one line and no newline: an older checkpoint (one object), or a first write cut short
        try:
            header = _parse(name, 1, torn)
        except CheckpointError:
            raise CheckpointError(
                f"the checkpoint {name} holds no whole record: it is not JSON Lines, "
                "or its first write was cut short"
            ) from None
    else:
        header = _parse(name, 1, lines[0])
    if header.get("kind") != "header" and "schema" not in header:  # no checkpoint of any schema
        raise CheckpointError(
            f"{name} is not an agentfsm checkpoint: its first line is no checkpoint's header; "
            "pass the file a run's --checkpoint wrote"
        )
    if header.get("schema") not in READ_SCHEMAS:
        raise _schema_error(name, header.get("schema"))
    if header.get("kind") != "header":
        raise CheckpointError(f"the checkpoint {name} does not begin with its header")
    if not lines:
        raise CheckpointError(f"the checkpoint {name} holds no whole record (its first write was cut short)")
    try:
        data = _replayed(name, header, lines, resuming)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise damaged(name, "its records do not replay", exc) from None
    _check(name, data)
    return data


_FIX = "resume from an intact copy, or start the run again"


def damaged(name: str, what: str, exc: BaseException | None = None) -> CheckpointError:
    """The one line for a damaged checkpoint (an agent's or a flow's): the file `name` (empty: data
    given in code), `what` is wrong, the cause `exc` in a few words, and the fix."""
    cause = f" ({_cause(exc)})" if exc is not None else ""
    subject = f"the checkpoint {name}" if name else "the checkpoint"
    return CheckpointError(f"{subject} is damaged: {what}{cause}; {_FIX}")


def _cause(exc: BaseException) -> str:
    """`exc` in a few words: pydantic's first error (where, what, the value), an agentfsm error's
    problem without its fix (which is for code that calls the API, not for a file), else its
    type and message."""
    errors = getattr(exc, "errors", None)
    if callable(errors):  # pydantic's ValidationError
        found = errors(include_url=False)
        first = found[0]
        where = ".".join(str(part) for part in first["loc"])
        value = first.get("input")
        text = repr(value) if value is None or isinstance(value, str | int | float | bool) else ""
        shown = f", got {text if len(text) <= 60 else text[:57] + '...'}" if text else ""
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        return f"{where}: {first['msg']}{shown}{more}"
    if isinstance(exc, AgentfsmError):
        return " ".join(str(exc).split("; ")[0].split())
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def _check(name: str, data: dict[str, Any]) -> None:
    """Refuse (`CheckpointError`) a replayed journal a resume could not put back whole."""
    if not isinstance(data["agent_class"], str):
        raise damaged(name, f"its agent_class is {data['agent_class']!r}, not a class name")
    config = data["config"]
    if not isinstance(config, dict):
        raise damaged(name, "its config is not a table")
    llm = config.get("llm", {})
    if not isinstance(llm, dict):
        raise damaged(name, f"its config's llm is {llm!r}, not a table")
    model = llm.get("model")
    if model is not None and not isinstance(model, str):
        raise damaged(name, f"its config's llm.model is {model!r}, not a model name")
    read_run_state(name, data["run_state"], RunState)  # the run's own fields (a kind's own: its reader)
    read_memory(name, data["memory"])


def read_run_state(name: str, dump: Any, cls: type[S], *, what: str = "its run state") -> S:
    """The run state of class `cls` (the machine's: `RunState`, or a subclass with what its kind
    of machine adds) a checkpoint's dump reads back as; else `CheckpointError` naming the
    checkpoint `name` (a path; empty: data given in code) and `what` does not read back."""
    try:
        return cls.model_validate(dump)
    except ValueError as exc:  # pydantic's ValidationError
        raise damaged(name, f"{what} does not read back", exc) from None


def read_memory(name: str, dump: Any, *, what: str = "its memory") -> Memory:
    """The `Memory` a checkpoint's dump of it reads back as, its invariants checked as any memory's
    (a tool message answers a pending call, the limit is at least 2); else `CheckpointError` as
    `read_run_state`'s."""
    try:
        snapshot = MemorySnapshot.model_validate(dump)
        pinned = snapshot.pinned_index
        if pinned is not None and not 0 <= pinned < len(snapshot.messages):
            raise WrongValueError(
                f"its request is message {pinned}, but it holds {len(snapshot.messages)} messages"
            )
        return Memory.from_snapshot(snapshot)
    except ValueError as exc:  # pydantic's ValidationError, ConfigError, WrongValueError
        raise damaged(name, f"{what} does not read back", exc) from None


def _cancellation(record: dict[str, Any]) -> bool:
    """The record of a run's edge into a final state on `cancelled` by an interruption (its task's
    cancellation, Ctrl-C, a shutdown): a resume's replay leaves it out, so the run is resumed from
    where it was when it was stopped (as if it had been killed there) rather than reported
    finished; the resume appends its records after it. A run ended by `cancel()` is ended for good
    (`RunState.cancelled_for_good`): its record stays, and a resume gives its result back."""
    run_state = record.get("run_state")
    return (
        isinstance(run_state, dict)
        and run_state.get("stop_reason") == StopReason.CANCELLED.value
        and not run_state.get("cancelled_for_good")
    )


def _replayed(name: str, header: dict[str, Any], lines: list[str], resuming: bool) -> dict[str, Any]:
    """`read_checkpoint`'s replay of the records after the header into one snapshot."""
    config = header.get("config")
    run_state: Any = None
    parts: Any = None
    seen: dict[str, Any] | None = None  # an agent's stuck counts (a flow's run has none)
    written_at: Any = None
    messages: list[Any] = []
    pinned: int | None = None
    max_messages: Any = None
    records = 0
    for number, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        record = _parse(name, number, line)
        if record.get("kind") != "checkpoint" or (resuming and _cancellation(record)):
            continue
        records += 1
        run_state, written_at = record.get("run_state"), record.get("written_at")
        parts = record.get("parts", parts)
        if isinstance(run_state, dict) and "seen" in run_state:
            seen = dict(run_state["seen"])
        elif "seen" in record:
            seen = {} if seen is None else seen
            seen.update(record["seen"])
        config = record.get("config", config)
        for change in record.get("memory", ()):
            op = change.get("op") if isinstance(change, dict) else None
            if op == "snapshot":
                snapshot = change["memory"]
                messages, pinned = list(snapshot["messages"]), snapshot.get("pinned_index")
                max_messages = snapshot["max_messages"]
            elif isinstance(op, str) and op in _CHANGES:
                message, at, count = change.get("message"), change.get("at", 0), change.get("count", 0)
                whole = (
                    isinstance(at, int) and isinstance(count, int) and 0 <= at < at + count <= len(messages)
                )
                if op == "drop" and not whole:  # a drop that slicing would take quietly
                    raise damaged(
                        name,
                        f"line {number} drops {count!r} messages from {at!r}, "
                        f"but memory holds {len(messages)} by then",
                    )
                pinned = apply_change(messages, pinned, _CHANGES[op], message, at=at, count=count)
            else:
                raise damaged(name, f"line {number} holds an unknown memory change {change!r}")
    if records == 0:
        raise CheckpointError(f"the checkpoint {name} holds no whole record (its first write was cut short)")
    data = {
        "schema": CHECKPOINT_SCHEMA,
        "agent": header.get("agent"),
        "agent_class": header.get("agent_class"),
        "config": config,
        "run_state": (
            {**run_state, **({} if seen is None else {"seen": seen})} if isinstance(run_state, dict) else None
        ),
        "memory": {"max_messages": max_messages, "messages": messages, "pinned_index": pinned},
        "written_at": written_at,
    }
    if parts is not None:  # a flow's plan and agents, whole in each record (`checkpoint_parts`)
        data["parts"] = parts
    missing = [key for key in CHECKPOINT_PARTS if data[key] is None] + (
        ["memory"] if max_messages is None else []
    )
    if missing:
        raise CheckpointError(f"the checkpoint {name} lacks {', '.join(missing)}")
    return data


def config_differences(current: dict[str, Any], recorded: dict[str, Any]) -> list[str]:
    """The option names whose values differ between `current` (a `trace_config()`) and `recorded`
    (the one a checkpoint holds), sorted; the model and its settings and MCP servers' tools are
    not compared (a run may resume on another server)."""
    current = json.loads(json.dumps(current))  # tuples -> lists, as in the file
    return sorted(
        key
        for key in set(current) | set(recorded)
        if key not in _UNCHECKED and current.get(key) != recorded.get(key)
    )


def restore(agent: Recorded, data: dict[str, Any], state_class: type[S]) -> tuple[S, Memory]:
    """The checkpointed run's state (of `state_class`, `agent`'s) and memory, after checking
    `agent` is the agent that wrote it; the agent puts them in place."""
    cls = type(agent)
    recorded_class = data["agent_class"]
    if recorded_class != f"{cls.__module__}.{cls.__qualname__}":
        raise CheckpointError(
            f"the checkpoint was written by a {recorded_class}, not a {cls.__qualname__}; "
            "resume it with that agent class"
        )
    differ = config_differences(agent.trace_config(), data["config"])
    if differ:
        raise CheckpointError(
            "the agent is not configured as the one that wrote the checkpoint; "
            f"these options differ: {', '.join(differ)}; build it with the options the checkpoint "
            "records (`agentfsm resume` does), or start the run again"
        )
    run_state = read_run_state("", data["run_state"], state_class)
    if run_state.state == agent.table.initial:
        raise CheckpointError("the checkpoint's run has not started; there is nothing to resume")
    if run_state.state not in agent.table.by_name:
        raise CheckpointError(
            f"the checkpoint's state {run_state.state!r} is not in {cls.__qualname__}'s machine"
        )
    if run_state.stop_reason is not None:
        run_state.stop_reason = StopReason.of(run_state.stop_reason)
    return run_state, read_memory("", data["memory"])
