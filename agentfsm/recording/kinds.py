"""What kind of recording a file is: an agent's trace or checkpoint, or a flow's.

Why: the four are easy to mix up (``agentfsm replay`` takes traces, ``agentfsm
resume`` checkpoints, and all of them are JSON ending in ``.jsonl`` or
``.json``), and a reader that refused the other kind's file by its schema
number alone would blame the schema ("trace schema 2 is not supported") when
the file is simply of another kind, and send the user to re-record a run that
is fine. Each reader asks `file_kind` about a file that is not its own, and
`not_a` says what the file is and what to run instead.

The kind is told from the file's first two lines: an agent's trace and its
checkpoint both begin with a ``header`` record, followed by ``checkpoint``
records in a checkpoint; a header alone is a trace's when it holds the run's
``run_id``, ``request`` or ``history`` (a checkpoint's header has none: a
journal outlives the runs it resumes); a flow's trace is a trace whose
``agent_class`` is the flow's, and so is a flow's checkpoint a journal whose
``agent_class`` is the flow's; a flow's checkpoint of schema 3 or before is
one JSON document (on one line) with no ``kind``, and the flow's name
(``flow``) or state (``flow_state``).
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal

from .files import RecordPath

__all__ = ["FileKind", "Wanted", "file_kind", "not_a"]

FileKind = Literal["trace", "checkpoint", "flow trace", "flow checkpoint"]

_DESCRIBED: dict[FileKind, str] = {
    "trace": "an agent's trace",
    "checkpoint": "an agent's checkpoint",
    "flow trace": "a flow's trace",
    "flow checkpoint": "a flow's checkpoint",
}


def file_kind(path: RecordPath) -> FileKind | None:
    """The kind of recording at `path`, from its first lines; None when it cannot be read or is none
    of them (its reader then says what is wrong with it)."""
    try:
        with open(path, "rb") as source:
            first, second = _record(source.readline()), _record(source.readline())
    except OSError:
        return None
    if first is None:
        return None
    if first.get("kind") == "header":
        follows = second.get("kind") if second is not None else None
        flow = str(first.get("agent_class", "")).endswith(".PlanningFlow")
        if follows == "checkpoint" or (follows is None and not _TRACE_HEADER & set(first)):
            return "flow checkpoint" if flow else "checkpoint"
        return "flow trace" if flow else "trace"
    if "kind" not in first and ("flow_state" in first or "flow" in first):
        return "flow checkpoint"
    return None


_TRACE_HEADER = frozenset({"run_id", "request", "history"})
"""What a trace's header holds and a checkpoint's does not (a journal outlives the runs it resumes)."""


def _record(line: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):  # not UTF-8, not JSON (or nothing), nested too deep
        return None
    return record if isinstance(record, dict) else None


Wanted = Literal["trace", "checkpoint", "flow checkpoint"]
"""What a reader reads: any trace (`agentfsm replay` replays an agent's and a flow's), an agent's
checkpoint, a flow's checkpoint."""

_WANTED: dict[Wanted, str] = {
    "trace": "a trace",
    "checkpoint": "an agent's checkpoint",
    "flow checkpoint": "a flow's checkpoint",
}


def not_a(path: RecordPath, wanted: Wanted, found: FileKind) -> str:
    """The one line that says the file at `path` is a `found`, not what its reader reads
    (`wanted`), and what to run on it instead."""
    name = os.fspath(path)
    if found.endswith("trace"):
        fix = f"replay it with `agentfsm replay {name}`; a run resumes from the file its --checkpoint wrote"
    elif wanted == "trace":
        fix = f"resume it with `agentfsm resume {name}`; a replay reads the file a run's --trace wrote"
    else:  # the other checkpoint: the command resumes both, in code each has its own `resume`
        owner = "the flow" if found == "flow checkpoint" else "the agent"
        fix = f"resume it with `agentfsm resume {name}`, or with {owner}'s `resume`"
    return f"{name} is {_DESCRIBED[found]}, not {_WANTED[wanted]}: {fix}"
