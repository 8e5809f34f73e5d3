"""The whole state of one flow run beside its `RunState`, as plain data (the guards read it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..serde import Serializable
from .plan import Plan
from .result import StepRun
from .review import PlanDecision

__all__ = ["FlowState"]


@dataclass(slots=True, kw_only=True)
class FlowState(Serializable):
    """What PLANNING, EXECUTING and REPLANNING write, and the table's guards read."""

    plan: Plan | None = None
    runs: list[StepRun] = field(default_factory=list)
    replans: int = 0
    """Replans started (bounded by the flow's `max_replans`)."""
    blocked: int | None = None
    """The id of the step the last execution blocked, until REPLANNING takes it up."""
    paused_step: int | None = None
    """The id of the step whose agent's run is paused (AWAITING_AGENT), until it goes on."""
    finished_early: bool = False
    """The last step's agent reported the whole task done."""
    summary: str | None = None
    decision: PlanDecision | None = None
    """The reviewer's decision on the plan under review (AWAITING_PLAN_REVIEW), until the next replan."""
