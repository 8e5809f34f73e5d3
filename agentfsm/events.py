"""`Transition`: the one event every observer of a run receives.

The engine builds one per fired edge, in one place (`BaseAgent._fire`); the
log line, `iter()`, `on_transition` callbacks and (later) traces and
checkpoints all read the same object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .chat import LLMResponse
from .machine import GuardOutcome
from .messages import ToolCall
from .result import StopReason
from .run_state import Observation

__all__ = ["GuardOutcome", "Transition"]


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
