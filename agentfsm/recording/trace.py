"""JSON Lines traces of a run: everything needed to read it, and to replay it offline.

Why JSON Lines, written record by record and flushed: a run killed midway
leaves a readable prefix, and `agentfsm replay` re-drives the machine from
that prefix as far as it goes. The records come from the engine's one event
stream (`BaseAgent.on_event`), so a trace holds exactly what a debugger sees.

Schema version `TRACE_SCHEMA` = 1. One JSON object per line; every one has a `kind`:

- ``header`` (first): ``schema``, ``run_id``, ``agent`` (name), ``agent_class``
  (``module.QualName``), ``config`` (the agent's `trace_config()`: limits,
  prompts, tool choice, tool declarations, the LLM's model and settings; never
  its API key), ``request``, ``history`` (messages in memory before this run),
  ``started_at`` (ISO 8601, UTC).
- ``transition``: ``step``, ``source``, ``dest``, ``trigger``, ``guards``
  (``[{"name", "held"}]`` in table order), ``stop_reason``, ``error``, ``duration_s``.
- ``llm``: ``step``, ``request`` (``messages`` as sent, ``system_msgs``, ``tools``,
  ``tool_choice``), ``reply`` (content, tool_calls, usage, model, finish_reason;
  null when the call raised), ``usage``, ``error`` (null or ``{"type", "message"}``),
  ``duration_s``.
- ``tool``: ``step``, ``call_id``, ``name``, ``arguments`` (the raw JSON string),
  ``observation``, ``base64_image``, ``is_error``, ``duration_s``; written just
  before the ``ACTING -> OBSERVING`` transition, as the tools returned them (before edits).
- ``edit``: ``step``, ``edit`` (``pending_calls``, ``observation`` or ``approval``),
  ``call_id``, ``before``, ``after`` (call lists, or observation texts; for an
  approval, the call as the model made it and the `Decision`).
- ``result`` (last, when the run ended): ``result``, the `RunResult`. A run paused
  for approval writes its paused result (``stop_reason`` ``awaiting_approval``);
  `resume(trace=...)` appends the rest of the run after it.

Messages, calls and results are the pydantic JSON dumps of the engine's types.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, TextIO

from ..run.events import AgentEvent, Edit, LLMCall, Transition
from ..run.state import Decision
from ..run.view import Recorded

__all__ = ["TRACE_SCHEMA", "TracePath", "TraceWriter"]

TRACE_SCHEMA = 1
TracePath = str | os.PathLike[str]


class TraceWriter:
    """Writes one run of `agent` to `path` while it runs (a context manager around the run).

    The file is opened at once, so a bad path fails before the run starts.
    Events before the run's `start` edge (the `reset` of the previous run) are
    not part of this run and are skipped. `append`: the agent's run was paused
    and is resumed; its records go on at the end of the file (no new header).
    """

    def __init__(self, path: TracePath, agent: Recorded, *, append: bool = False) -> None:
        self.agent = agent
        self.run_id: str | None = agent.run_state.run_id if append else None
        self._out: TextIO = open(path, "a" if append else "w", encoding="utf-8")  # noqa: SIM115
        for edit in agent.paused_edits if append else ():
            self._write(_edit_record(edit))
        self._unsubscribe = agent.on_event(self._on_event)

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
        if self.run_id is not None and result is not None and result.run_id == self.run_id:
            self._write({"kind": "result", "result": result.model_dump(mode="json")})
        self._out.close()

    def _write(self, record: dict[str, Any]) -> None:
        self._out.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._out.flush()

    def _on_event(self, event: AgentEvent) -> None:
        if self.run_id is None:
            if not (isinstance(event, Transition) and event.source == self.agent.table.initial):
                return
            self.run_id = event.run_id
            self._write(self._header())
        if isinstance(event, Transition):
            for obs in event.observations:  # edges out of the phase that ran the tools carry them
                self._write(
                    {
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
                )
            self._write(transition_record(event))
        elif isinstance(event, LLMCall):
            self._write(_llm_record(event))
        elif isinstance(event, Edit):
            self._write(_edit_record(event))

    def _header(self) -> dict[str, Any]:
        agent = self.agent
        cls = type(agent)
        history = agent.memory.messages[:-1]  # at `start` the request is the last message
        return {
            "kind": "header",
            "schema": TRACE_SCHEMA,
            "run_id": self.run_id,
            "agent": agent.name,
            "agent_class": f"{cls.__module__}.{cls.__qualname__}",
            "config": agent.trace_config(),
            "request": agent.run_state.request,
            "history": [m.model_dump(mode="json") for m in history],
            "started_at": datetime.now(UTC).isoformat(),
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


def _llm_record(call: LLMCall) -> dict[str, Any]:
    reply = call.reply
    return {
        "kind": "llm",
        "step": call.step,
        "request": {
            "messages": [m.model_dump(mode="json") for m in call.messages],
            "system_msgs": [m.model_dump(mode="json") for m in call.system_msgs],
            "tools": list(call.tools),
            "tool_choice": call.tool_choice,
        },
        "reply": reply.model_dump(mode="json") if reply is not None else None,
        "usage": reply.usage.model_dump(mode="json") if reply is not None else None,
        "error": {"type": call.error_type, "message": call.error} if call.error_type else None,
        "duration_s": call.duration_s,
    }


def _edit_record(edit: Edit) -> dict[str, Any]:
    def dump(value: tuple[Any, ...] | str | Decision) -> Any:
        if isinstance(value, Decision):
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
