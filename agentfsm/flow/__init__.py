"""The planning flow: a second machine that plans a task, runs each step with its agent, and replans."""

from __future__ import annotations

from .flow import TASK_COMPLETE, PlanningFlow
from .plan import Plan, PlanStep, StepStatus
from .planning import PlanningTool
from .result import FlowResult, FlowStopReason, StepRun
from .review import AWAITING_PLAN_REVIEW, PlanDecision, Reviewer, with_review
from .table import AWAITING_AGENT, FLOW_TABLE

__all__ = [
    "AWAITING_AGENT",
    "AWAITING_PLAN_REVIEW",
    "FLOW_TABLE",
    "TASK_COMPLETE",
    "FlowResult",
    "FlowStopReason",
    "Plan",
    "PlanDecision",
    "PlanStep",
    "PlanningFlow",
    "PlanningTool",
    "Reviewer",
    "StepRun",
    "StepStatus",
    "with_review",
]
