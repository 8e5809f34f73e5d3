"""Managed runs: `Runs` drives an application's runs in one process, with the verbs of
`agentfsm.durable.DurableRuns` (a DBOS cluster's), the same `RunStatus` and the same `AgentSpec`."""

from __future__ import annotations

from .events import RunEvent
from .manager import Runs
from .spec import AgentFactory, AgentSpec
from .status import RunStatus, RunStatusState

__all__ = ["AgentFactory", "AgentSpec", "RunEvent", "RunStatus", "RunStatusState", "Runs"]
