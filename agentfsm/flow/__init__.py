"""The planning flow: a second machine that plans a task, runs each step with its agent, and replans."""

from __future__ import annotations

from .flow import TASK_COMPLETE, PlanningFlow
from .plan import Plan, PlanStep, StepStatus
from .planning import PlanningTool
from .result import FlowResult, FlowStopReason, StepRun
from .table import FLOW_TABLE

__all__ = [
    "FLOW_TABLE",
    "TASK_COMPLETE",
    "FlowResult",
    "FlowStopReason",
    "Plan",
    "PlanStep",
    "PlanningFlow",
    "PlanningTool",
    "StepRun",
    "StepStatus",
]
