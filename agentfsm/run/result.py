"""What a run returns: the terminal state, why it stopped, and what it cost."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from ..messages import ToolCall
from ..serde import Serializable

__all__ = ["AgentState", "RunResult", "StopReason", "Usage"]


class AgentState(StrEnum):
    """The agent's top-level state (the seed's four values)."""

    IDLE = "IDLE"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    ERROR = "ERROR"


class StopReason(StrEnum):
    """Why a run ended; each value belongs to one or more edges of the machine table."""

    TERMINATED = "terminated"
    FINAL_ANSWER = "final_answer"
    MAX_STEPS = "max_steps"
    TOKEN_LIMIT = "token_limit"
    STUCK = "stuck"
    ERROR = "error"
    CANCELLED = "cancelled"
    AWAITING_APPROVAL = "awaiting_approval"
    """Not an end: the run is paused in AWAITING_APPROVAL (see `agentfsm.approval`)."""


@dataclass(slots=True, kw_only=True)
class Usage(Serializable):
    """Tokens, calls and cost, summed over a run (or reported by one LLM call)."""

    input_tokens: int = 0
    output_tokens: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    cost_usd: float | None = None
    """Dollars, or None when any call's model has no known price."""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def copy(self) -> Usage:
        return Usage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            llm_calls=self.llm_calls,
            tool_calls=self.tool_calls,
            cost_usd=self.cost_usd,
        )

    def add(self, other: Usage) -> None:
        """Add `other` in place. The cost stays known only while every call's cost is known."""
        if other.llm_calls:
            if self.llm_calls == 0:
                self.cost_usd = other.cost_usd
            elif self.cost_usd is not None and other.cost_usd is not None:
                self.cost_usd += other.cost_usd
            else:
                self.cost_usd = None
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.llm_calls += other.llm_calls
        self.tool_calls += other.tool_calls


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult(Serializable):
    """The outcome of one `run()`."""

    run_id: str
    state: AgentState
    """`FINISHED` or `ERROR`: the state the agent is left in (`RUNNING` when the run is paused)."""
    stop_reason: StopReason
    steps: int
    """Steps used in this run (a step is one think, act, observe round)."""
    output: str | None = None
    """The final text: the answer, the last thing the model said, or a note on why it stopped."""
    error: str | None = None
    """None, or ``"ExceptionType: message"``."""
    usage: Usage = field(default_factory=Usage)
    pending_approval: tuple[ToolCall, ...] = ()
    """When paused (`awaiting_approval`): the calls waiting for a decision, in call order."""

    @property
    def paused(self) -> bool:
        """The run is paused, not ended: decide the `pending_approval` calls, then `agent.resume()`."""
        return self.stop_reason is StopReason.AWAITING_APPROVAL

    @property
    def ok(self) -> bool:
        """Finished by the model's own choice (`terminated` or `final_answer`)."""
        return self.stop_reason in (StopReason.TERMINATED, StopReason.FINAL_ANSWER)
