"""What an agent's run holds beyond the run itself: one record for the step, one for the run.

A step (think → act → observe) hands data from phase to phase: the model's
reply, the calls to run, their results, and the bookkeeping that makes each
call run once (started, completed), wait for a person (decisions) or for
answers (input). All of it belongs to that one step, so it is one record,
`Turn`, that each think replaces whole: nothing of the step before can leak
into the next by a field somebody forgot to reset.

What spans steps (stuck detection's counts, the corrective nudge for the
next think, structured output's failed attempts and its answer) is the
agent's own part of the run's state, `AgentRunState`: the engine's
`RunState` (the run: id, state, step, request, stop reason, error, output,
usage, trace context) extended with those fields and the current `Turn`.
A flow's run state is the plain `RunState`: it carries none of this.

A checkpoint dumps the whole `AgentRunState`; `AgentRunState.model_validate`
also reads the dumps written before the step had a record of its own (the
step's fields beside the run's), so older checkpoints still resume.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Self

from ..messages import ToolCall
from ..model.base import LLMResponse
from ..questions import Answer, InputRequired
from ..run.state import Decision, Observation, RunState
from ..serde import Serializable

__all__ = ["AgentRunState", "Turn"]


@dataclass(slots=True, kw_only=True)
class Turn(Serializable):
    """One step's record: written by its phases, read by the table's guards, replaced by the next think."""

    reply: LLMResponse | None = None
    """The model's reply (THINKING writes it)."""
    pending_calls: list[ToolCall] = field(default_factory=list)
    """Tool calls to execute in ACTING."""
    observations: list[Observation] = field(default_factory=list)
    """Results of ACTING, recorded into memory by OBSERVING."""
    token_limit: str | None = None
    """Why this think hit the token limit, if it did."""
    terminated_by: str | None = None
    """The special tool that ran in this step and ends the run, if any."""
    started_calls: list[str] = field(default_factory=list)
    """Ids of the calls whose execution began (checkpointed before the tool runs)."""
    completed_calls: dict[str, Observation] = field(default_factory=dict)
    """The finished calls by id, checkpointed before their results enter memory, so a resumed
    ACTING runs only the calls not yet completed."""
    decisions: dict[str, Decision] = field(default_factory=dict)
    """Approvals and rejections by call id (AWAITING_APPROVAL writes them)."""
    input_requests: dict[str, InputRequired] = field(default_factory=dict)
    """Calls that asked for input and wait to run again with the answers, by call id."""
    answers: dict[str, dict[str, Answer]] = field(default_factory=dict)
    """The answers to them so far, by call id, then by question key (AWAITING_INPUT writes them)."""
    input_rounds: dict[str, int] = field(default_factory=dict)
    """How often each call asked for input (bounded by `max_input_rounds`)."""


_TURN_FIELDS = frozenset(f.name for f in fields(Turn))


@dataclass(slots=True, kw_only=True)
class AgentRunState(RunState):
    """An agent's run: the engine's `RunState`, the current step's `Turn`, and what spans steps."""

    turn: Turn = field(default_factory=Turn)
    """The current step's record (each think starts a new one)."""
    nudge: str | None = None
    """A one-shot prompt for the next think (corrective nudge or stuck hint)."""
    missed_tool_calls: int = 0
    """Replies in a row without tool calls while tool_choice is `required`."""
    stuck_streak: int = 0
    """Steps in a row on which stuck detection fired."""
    seen: dict[str, int] = field(default_factory=dict)
    """Signature of each assistant turn of this run -> how often it occurred. Its entries are only
    ever added or counted up, so a checkpoint's journal writes what changed of it, not all of it."""
    output_failures: int = 0
    """Final answers of this run that failed `output_type`'s validation (bounded by `output_retries`)."""
    output_problem: str | None = None
    """What was wrong with the last of them."""
    final_output: Any = None
    """The valid final answer, as JSON data, once `final_result` ended the run."""
    parsed: Any = field(default=None, compare=False, metadata={"exclude": True})
    """The same answer as the validated object (never dumped: a restored run rebuilds it)."""

    @classmethod
    def model_validate(cls, data: Any) -> Self:
        """Read a dump, also one from before `turn` (the step's fields beside the run's)."""
        if isinstance(data, dict) and "turn" not in data and not _TURN_FIELDS.isdisjoint(data):
            data = dict(data)
            data["turn"] = {name: data.pop(name) for name in _TURN_FIELDS if name in data}
        return super(AgentRunState, cls).model_validate(data)
