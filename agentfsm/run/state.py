"""The whole state of one run, as plain data.

Everything the guards read and the phases write lives here, so a run can be
logged, traced, checkpointed and resumed at any transition: dump this model
and the memory snapshot, and nothing else is needed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..messages import ToolCall
from ..model.base import Usage
from ..questions import InputRequired
from ..serde import Serializable
from .result import StopReason

__all__ = ["Decision", "Observation", "RunState"]


@dataclass(slots=True, kw_only=True)
class Observation(Serializable):
    """The result of one tool call, before it is recorded as a `tool` message."""

    call: ToolCall
    content: str
    base64_image: str | None = None
    is_error: bool = False
    duration_s: float = 0.0
    input_required: InputRequired | None = None
    """The call asked for input instead of finishing (AWAITING_INPUT follows; not an observation
    the model reads)."""
    output: Any = None
    """A valid `final_result` call's answer, as JSON data (see `agentfsm.agent.output`)."""
    usage: Usage | None = None
    """What the tool spent asking a model itself (`ToolResult.usage`): recorded with the
    observation, so a replayed or resumed run counts it as the run did."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision(Serializable):
    """A person's answer to a call that needs approval: run it (maybe with other arguments) or not."""

    approved: bool
    arguments: str | None = None
    """Approved with these JSON arguments instead of the model's (an edit)."""
    reason: str | None = None
    """Why it was rejected; the model reads it in the call's observation."""

    @classmethod
    def approve(cls, arguments: str | dict[str, object] | None = None) -> Decision:
        """Run the call; with `arguments` (a dict or a JSON object text), run it with those instead."""
        if isinstance(arguments, dict):
            import json

            arguments = json.dumps(arguments, ensure_ascii=False)
        return cls(approved=True, arguments=arguments)

    @classmethod
    def reject(cls, reason: str | None = None) -> Decision:
        """Do not run the call; the model is told it was rejected (and why, given `reason`)."""
        return cls(approved=False, reason=reason)


@dataclass(slots=True, kw_only=True)
class RunState(Serializable):
    """One run's state, whatever machine runs it. `state` is the machine's leaf state name.

    What a kind of machine adds (an agent's step record and stuck counters:
    `agentfsm.agent.turn.AgentRunState`) is a subclass's: this layer knows none of it.
    `exception` is the one field a dump leaves out: a live object, for `RunResult.exception`.
    """

    __pydantic_config__: ClassVar[dict[str, Any]] = {"arbitrary_types_allowed": True}
    """`exception` is validated as an instance of its class (it is never dumped)."""

    run_id: str = ""
    state: str = "IDLE"
    step: int = 0
    request: str | None = None
    stop_reason: StopReason | str | None = None
    """Why the run ended, from the edge that ended it (a user's edge may give any string)."""
    error: str | None = None
    exception: BaseException | None = field(default=None, compare=False, metadata={"exclude": True})
    """The exception behind `error`, when one ended the run (never dumped: a checkpoint keeps the text)."""
    output: str | None = None
    usage: Usage = field(default_factory=Usage)
    cancelled_for_good: bool = False
    """Ended by `cancel()`, on purpose: a resume from the checkpoint gives the result back. (A run
    stopped by its task's cancellation, Ctrl-C or a shutdown also ends `cancelled`, but a resume
    goes on from where it was, as after a kill.)"""
    edges: int = 0
    """How many edges the run took, its `start` the first. A checkpoint keeps it, so that a run
    resumed from one continues its trace from that edge (`agentfsm.recording.trace.cut_for_resume`)."""
    edits: int = 0
    """How many edits the run had (`Edit`: approvals, answers, edited calls and observations), for
    the same reason: a trace must hold every one its checkpoint holds."""
    traceparent: str | None = None
    """The W3C ``traceparent`` of the span an exporter of spans (`agentfsm.instrument()`) made for
    this run, kept so that the run resumed after a pause, here or from its checkpoint in another
    process, continues its trace (a new span, linked to this one); None while nobody traces it."""
