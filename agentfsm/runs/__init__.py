"""Managed runs: `Runs` drives an application's runs (an agent's, or a `PlanningFlow`'s) in one
process, with the verbs of `agentfsm.durable.DurableRuns` (a DBOS cluster's), the same `RunStatus`
and the same `AgentSpec`."""

from __future__ import annotations

from .events import RunEvent
from .flows import PlanVerdict
from .manager import Runs
from .spec import AgentFactory, AgentSpec, RunsFactory
from .status import RunStatus, RunStatusState

__all__ = [
    "AgentFactory",
    "AgentSpec",
    "PlanVerdict",
    "RunEvent",
    "RunStatus",
    "RunStatusState",
    "Runs",
    "RunsFactory",
]
