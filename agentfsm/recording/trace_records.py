"""The shape of each trace record, declared: what `read_trace` checks before a replay reads one.

Why declared here and checked up front: a replay reads a record's fields deep
inside the machine it re-drives (a tool's result in ACTING, a reply in
THINKING), where a missing key or a number in place of a text would surface
as the engine's own exception, a traceback, or as a divergence that names the
wrong thing. Checked when the file is read, a damaged trace is one line naming
the file, the line, the record's kind and the field. The models name only the
fields a replay reads, with the types the writer (`agentfsm.recording.trace`)
gives them; every other key is allowed (``extra="allow"``), so a trace written
with more fields still reads. The messages, replies and results inside records
are the engine's own types and are read by them.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import TraceError
from ..model.base import LLMResponse
from ..run.result import RunResult

__all__ = ["check_record"]


class _Record(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    agent: str | None = None
    """In a flow's trace, the agent whose record it is (none: the flow's own)."""
    flow_step: int | None = None


class _Header(_Record):
    schema_: int = Field(alias="schema")
    run_id: str
    agent: str | None
    agent_class: str
    config: dict[str, Any]
    request: str
    history: list[dict[str, Any]]


class _Guard(_Record):
    name: str
    held: bool


class _Transition(_Record):
    step: int
    source: str
    dest: str
    trigger: str
    guards: list[_Guard]
    stop_reason: str | None
    error: str | None


_Run = Annotated[list[int], Field(min_length=2, max_length=2)]
"""``[first, count]``: messages numbered ``first`` on."""


class _Request(_Record):
    messages: list[_Run]
    system_msgs: list[_Run]
    tools: list[dict[str, Any]] | None
    tool_choice: str


class _CallError(_Record):
    type: str
    message: str


class _LLM(_Record):
    step: int
    new_messages: list[dict[str, Any]]
    request: _Request
    reply: dict[str, Any] | None
    error: _CallError | None


class _Tool(_Record):
    step: int
    call_id: str
    name: str
    arguments: str
    observation: str
    base64_image: str | None = None
    is_error: bool
    duration_s: float = 0.0
    input_required: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None


class _Edit(_Record):
    step: int
    edit: Literal["pending_calls", "observation", "approval", "answer"]
    call_id: str | None
    before: Any
    after: Any


class _Result(_Record):
    result: dict[str, Any]
    flow: dict[str, Any] | None = None


class _Reply(BaseModel):
    """The keys every recorded reply holds (the rest of it is read by `LLMResponse`)."""

    model_config = ConfigDict(extra="allow")

    content: Any
    tool_calls: Any
    usage: Any


class _PlanDecision(_Record):
    decision: dict[str, Any]


_KINDS: dict[str, type[_Record]] = {
    "header": _Header,
    "transition": _Transition,
    "llm": _LLM,
    "tool": _Tool,
    "edit": _Edit,
    "result": _Result,
    "plan_decision": _PlanDecision,
}


def check_record(path: object, line: int, record: dict[str, Any]) -> None:
    """`TraceError` naming the file `path`, the `line`, the record's kind and the first field of
    `record` that is missing or of the wrong type; nothing for a record a replay can read."""
    kind = record.get("kind")
    model = _KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise TraceError(
            f"{path}:{line}: the trace is damaged: its record's kind is {_short(kind)}, "
            f"not one of {', '.join(_KINDS)}; replay an intact copy, or re-record the run"
        )
    prefix: tuple[str, ...] = ()
    try:
        model.model_validate(record)
        reply = record.get("reply") if kind == "llm" else None
        if reply is not None:
            _Reply.model_validate(reply)
            LLMResponse.model_validate(reply)
            prefix = ("reply",)
        if kind == "result":
            prefix = ("result",)
            RunResult.model_validate(record["result"])
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = tuple(error["loc"])
        if not loc or loc[0] not in record:
            loc = (*prefix, *loc)
        where = ".".join(str(part) for part in loc) or "record"
        problem = (
            "is missing" if error["type"] == "missing" else f"is {_short(error.get('input'))}: {error['msg']}"
        )
        raise TraceError(
            f"{path}:{line}: the trace is damaged: its {kind} record's {where} {problem}; "
            "replay an intact copy, or re-record the run"
        ) from None


def _short(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."
