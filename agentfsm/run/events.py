"""The events of a run: `Transition`, `LLMCall` and `Edit`.

The engine builds one `Transition` per fired edge, in one place
(`BaseAgent._fire`); the log line, `iter()`, `on_transition` callbacks, traces
and (later) checkpoints all read the same object. `LLMCall` (what was sent to
the model and what came back) and `Edit` (a caller's change between steps)
are the records a trace needs besides the edges; `BaseAgent.on_event`
delivers all three, in the order they happen, through one mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..fsm.machine import GuardOutcome
from ..messages import Message, ToolCall
from ..model.base import LLMResponse
from .result import StopReason
from .state import Decision, Observation

__all__ = ["AgentEvent", "Edit", "EditKind", "GuardOutcome", "LLMCall", "Transition"]


@dataclass(slots=True, kw_only=True)
class Transition:
    """One edge taken: where from, where to, why, and what the phase produced.

    Treat it as read-only: it is a record of what happened (changes to a run
    go through `agent.run_state` between transitions).
    """

    agent: str
    run_id: str
    trigger: str
    source: str
    dest: str
    step: int
    guards: tuple[GuardOutcome, ...] = ()
    """Guards evaluated for this trigger, in table order, with their outcomes."""
    stop_reason: StopReason | None = None
    duration_s: float = 0.0
    """Time spent in `source` before this edge fired (the phase's work)."""
    reply: LLMResponse | None = None
    """For edges out of THINKING: the LLM reply."""
    tool_calls: tuple[ToolCall, ...] = ()
    """For edges into ACTING: the calls about to run."""
    observations: tuple[Observation, ...] = field(default=())
    """For edges out of ACTING: the results, before they reach memory."""
    error: str | None = None

    def log_fields(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "run_id": self.run_id,
            "step": self.step,
            "trigger": self.trigger,
            "source": self.source,
            "dest": self.dest,
            "guards": {g.name: g.held for g in self.guards},
            "stop_reason": self.stop_reason.value if self.stop_reason else None,
            "duration_ms": round(self.duration_s * 1000, 3),
            **({"error": self.error} if self.error else {}),
        }


@dataclass(slots=True, kw_only=True)
class LLMCall:
    """One request to the model, exactly as sent, and its reply (or the error it raised).

    Emitted by `ToolCallAgent.think` only when someone listens (`on_event`):
    copying the messages costs O(history), which the hot path does not pay.
    """

    agent: str
    run_id: str
    step: int
    messages: tuple[Message, ...]
    system_msgs: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...]
    tool_choice: str
    reply: LLMResponse | None = None
    error_type: str | None = None
    """The exception's class name when the call raised (``TokenLimitExceeded``, ``LLMError``, ...)."""
    error: str | None = None
    duration_s: float = 0.0


EditKind = Literal["pending_calls", "observation", "approval"]


@dataclass(slots=True, kw_only=True)
class Edit:
    """A caller's change to the run between two transitions.

    ``pending_calls``: `before`/`after` are the call tuples (in ACTING, before
    the tools run). ``observation``: `before`/`after` are the contents of the
    observation answering `call_id` (in OBSERVING, before it reaches memory).
    ``approval``: `before` is the call (a 1-tuple) as the model made it, `after` the
    `Decision` on it (in AWAITING_APPROVAL).
    """

    agent: str
    run_id: str
    step: int
    kind: EditKind
    before: tuple[ToolCall, ...] | str
    after: tuple[ToolCall, ...] | str | Decision
    call_id: str | None = None


AgentEvent = Transition | LLMCall | Edit
"""Everything `BaseAgent.on_event` delivers."""
