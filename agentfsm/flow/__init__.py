"""The planning flow: a second machine that plans a task, runs each step with its agent, and replans."""

from __future__ import annotations

from .plan import Plan, PlanStep, StepStatus
from .planning import PlanningTool

__all__ = ["Plan", "PlanStep", "PlanningTool", "StepStatus"]
