"""Durable runs on DBOS: runs that survive a dead process, spread over workers from a queue.

`Worker` runs agents from a queue; `DurableRuns` submits runs and follows,
decides and cancels them, and reads their events, from any process; `AgentSpec`
declares a run's agent as data. A run's model calls and tool calls are steps
recorded in the database (`agentfsm.durable.run`), so a run resumed after a crash
ends as it would have, and no tool runs twice; its events are kept there too,
each once (`agentfsm.durable.events`). Needs the ``durable`` extra (``pip install
'agentfsm[durable]'``).
"""

from __future__ import annotations

from ..errors import MissingExtraError
from ..runs.spec import AgentFactory, AgentSpec
from ..runs.status import RunStatus, RunStatusState

try:
    from .client import DurableRuns
    from .worker import DEFAULT_QUEUE, Worker, default_app_version
except ModuleNotFoundError as exc:  # pragma: no cover - the extra is missing
    if exc.name not in ("dbos", "sqlalchemy"):
        raise
    raise MissingExtraError(
        f"durable runs need the `durable` extra ({exc.name} is missing): pip install 'agentfsm[durable]'"
    ) from None

__all__ = [
    "DEFAULT_QUEUE",
    "AgentFactory",
    "AgentSpec",
    "DurableRuns",
    "RunStatus",
    "RunStatusState",
    "Worker",
    "default_app_version",
]
