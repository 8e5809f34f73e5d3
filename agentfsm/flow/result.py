"""What a flow returns: the plan with its statuses, every agent run it made, the summary, the cost."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from ..messages import ToolCall
from ..model.base import Usage
from ..questions import Question
from ..run.result import AgentState, RunResult, StopReason
from ..serde import Serializable
from .plan import Plan

__all__ = ["FlowResult", "FlowStopReason", "StepRun"]


class FlowStopReason(StrEnum):
    """Why a flow ended, beside the run's own `error` and `cancelled`: each belongs to an edge into
    FINALIZING (`agentfsm.flow.table`)."""

    COMPLETED = "completed"
    """Every step of the plan is completed (or the planner, replanning, left nothing to do)."""
    FINISHED_EARLY = "finished_early"
    """An agent reported the whole task done (its final message began ``TASK COMPLETE``)."""
    REPLAN_LIMIT = "replan_limit"
    """A step was blocked after the flow had replanned `max_replans` times."""
    PLAN_CANCELLED = "plan_cancelled"
    """The plan's reviewer cancelled it (AWAITING_PLAN_REVIEW, see `agentfsm.flow.review`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRun(Serializable):
    """One run of an agent on a step."""

    step_id: int
    agent: str
    attempt: int
    """1 for the first run on the step, 2 for its retry."""
    result: RunResult


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowResult(Serializable):
    """The outcome of one `PlanningFlow.execute()`."""

    run_id: str
    state: AgentState
    """`FINISHED` (the flow reached DONE) or `ERROR`."""
    stop_reason: StopReason | str
    """A `FlowStopReason`, or `error` / `cancelled`."""
    plan: Plan | None
    """The plan as it ended, each step with its status, attempts and notes (None if none was made)."""
    runs: tuple[StepRun, ...] = ()
    """Every agent run, in order: each step's `RunResult`, retries included."""
    summary: str | None = None
    """The planner's summary of the plan and its outcomes (FINALIZING)."""
    error: str | None = None
    replans: int = 0
    usage: Usage = field(default_factory=Usage)
    """Summed over every agent run and every planner call (a paused step's run counts once it ends)."""
    pending_approval: tuple[ToolCall, ...] = ()
    """Paused in AWAITING_AGENT for approval: the step's agent's calls waiting for a decision."""
    pending_input: tuple[tuple[ToolCall, Question], ...] = ()
    """Paused in AWAITING_AGENT for input: the step's agent's questions, each with its call."""

    @property
    def paused(self) -> bool:
        """Waiting for a person: in AWAITING_PLAN_REVIEW, decide on `plan` (`flow.approve_plan()`,
        `edit_plan`, `cancel_plan`); in AWAITING_AGENT, answer the step's agent (`flow.approve`,
        `reject`, `answer`; see `pending_approval`, `pending_input`). Then `await flow.resume()`."""
        return self.state is AgentState.RUNNING

    @property
    def ok(self) -> bool:
        """Ended with the task done: every step completed, or an agent finished it early."""
        return self.stop_reason in (FlowStopReason.COMPLETED, FlowStopReason.FINISHED_EARLY)

    def results_of(self, step_id: int) -> list[RunResult]:
        """The `RunResult` of each run on step `step_id`, in order."""
        return [r.result for r in self.runs if r.step_id == step_id]
