"""What a run returns: the terminal state, why it stopped, and what it cost."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from ..messages import ToolCall
from ..model.base import Usage
from ..questions import Question
from ..serde import Serializable

if TYPE_CHECKING:
    from ..fsm.machine import MachineTable

__all__ = ["AgentState", "RunResult", "StopReason"]


class AgentState(StrEnum):
    """The agent's top-level state (the seed's four values)."""

    IDLE = "IDLE"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    ERROR = "ERROR"

    @classmethod
    def in_table(cls, table: MachineTable, state: str) -> AgentState:
        """The top-level state of the leaf `state` of `table`: a final state's declared one,
        IDLE for the initial state, RUNNING for every other (a phase, a pause)."""
        spec = table.by_name[state]
        if spec.final is not None:  # a member already (the tables' own), or its value (a string)
            return spec.final if isinstance(spec.final, cls) else cls(spec.final)
        return cls.IDLE if spec.name == table.initial else cls.RUNNING


class StopReason(StrEnum):
    """Why a run ended; each value belongs to one or more edges of the machine table."""

    TERMINATED = "terminated"
    FINAL_ANSWER = "final_answer"
    MAX_STEPS = "max_steps"
    TOKEN_LIMIT = "token_limit"
    STUCK = "stuck"
    ERROR = "error"
    CANCELLED = "cancelled"
    OUTPUT_RETRIES = "output_retries"
    """The model gave no valid final result for `output_type` within `output_retries` (see
    `agentfsm.agent.output`)."""
    AWAITING_APPROVAL = "awaiting_approval"
    """Not an end: why a run paused in AWAITING_APPROVAL (see `agentfsm.agent.approval`)."""
    AWAITING_INPUT = "awaiting_input"
    """Not an end: why a run paused in AWAITING_INPUT (see `agentfsm.agent.awaiting_input`)."""

    @classmethod
    def of(cls, value: str) -> StopReason | str:
        """`value` as a member when it is one (read back from JSON), else the string of a user's edge."""
        return cls._value2member_map_.get(value, value)  # type: ignore[return-value]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult(Serializable):
    """The outcome of one `run()`."""

    __pydantic_config__: ClassVar[dict[str, Any]] = {"arbitrary_types_allowed": True}
    """`exception` is validated as an instance of its class (it is never dumped)."""

    run_id: str
    state: AgentState
    """`FINISHED` or `ERROR`: the state the agent is left in (`RUNNING` when the run is paused)."""
    stop_reason: StopReason | str
    """Why it ended (or paused): a `StopReason`, or the string a user's edge declares."""
    steps: int
    """Steps used in this run (a step is one think, act, observe round)."""
    output: str | None = None
    """The final text: the answer, the last thing the model said, or a note on why it stopped."""
    error: str | None = None
    """None, or ``"ExceptionType: message"``."""
    exception: BaseException | None = field(
        default=None, compare=False, repr=False, metadata={"exclude": True}
    )
    """The exception behind `error`, to re-raise or inspect: what a phase raised (a provider's
    `LLMError`, a tool's setup error), a recorder's failure, or the cancellation. None when the
    run ended without error, when the machine itself decided the error (tool calls required),
    and in a result read back from JSON: it is left out of every dump (`--json`, traces,
    checkpoints), which keep `error`'s text."""
    usage: Usage = field(default_factory=Usage)
    parsed: Any = None
    """With `output_type`: the validated final answer, an instance of it (its JSON is `output`);
    None when the run ended otherwise. Read back from JSON (or replayed), its JSON data."""
    pending_approval: tuple[ToolCall, ...] = ()
    """When paused (`awaiting_approval`): the calls waiting for a decision, in call order."""
    pending_input: tuple[tuple[ToolCall, Question], ...] = ()
    """When paused (`awaiting_input`): each question still unanswered, with the call that asks it."""

    @property
    def paused(self) -> bool:
        """The run is paused in a pause state, not ended (it still counts as RUNNING): decide the
        `pending_approval` calls, or answer the `pending_input` questions, then `agent.resume()`."""
        return self.state is AgentState.RUNNING

    @property
    def ok(self) -> bool:
        """Finished by the model's own choice (`terminated` or `final_answer`)."""
        return self.stop_reason in (StopReason.TERMINATED, StopReason.FINAL_ANSWER)
