"""Pausing and resuming a run: the checks and set-up around `BaseAgent.resume`, and `cancel`.

A run continues from one of two places: in place, after it paused (a phase
raised `PauseRun`: AWAITING_APPROVAL with calls undecided), or from a
checkpoint file after the process that ran it died. Both end in the same
engine loop; these functions decide which run that is and what keeps being
written. `BaseAgent` binds them as methods.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..errors import AgentBusyError

if TYPE_CHECKING:
    from ..recording.checkpoint import Checkpointer
    from ..recording.trace import TracePath
    from ..run.result import RunResult
    from .base import BaseAgent

__all__ = ["cancel", "check_startable", "checkpointer_for", "prepare_resume"]


def check_startable(agent: BaseAgent) -> None:
    """A new run may start: none is in progress, and none is paused."""
    agent._check_idle()
    if agent.phase is not None:
        raise AgentBusyError(
            f"agent {agent.name!r} has a paused run ({agent.fsm_state}); `resume()` it, "
            "or `await agent.cancel()` to end it, before starting another"
        )


def checkpointer_for(agent: BaseAgent, path: TracePath | None) -> Checkpointer | None:
    if path is None:
        return None
    from ..recording.checkpoint import Checkpointer

    return Checkpointer(path, agent)


def prepare_resume(agent: BaseAgent, checkpoint: TracePath | None) -> Checkpointer | None:
    """The paused run (no `checkpoint`), or the one restored from `checkpoint`; its checkpointer."""
    agent._check_idle()
    if checkpoint is None:
        if agent.phase is None:
            raise AgentBusyError(
                f"agent {agent.name!r} has no paused run to resume (it is {agent.fsm_state}); "
                "pass the checkpoint file of the run to continue"
            )
        return agent._checkpointer
    from ..recording.checkpoint import read_checkpoint, restore

    restore(agent, read_checkpoint(checkpoint))
    agent._entered_at = time.perf_counter()
    return checkpointer_for(agent, checkpoint)


async def cancel(agent: BaseAgent) -> RunResult:
    """End the paused run in ERROR with `cancelled` (releasing what it holds); returns its result."""
    agent._check_idle()
    if agent.phase is None:
        raise AgentBusyError(f"agent {agent.name!r} has no paused run to cancel (it is {agent.fsm_state})")
    agent._abort("cancel", "CancelledError: the paused run was cancelled")
    agent._checkpointer, agent._paused = None, None
    await agent._close()
    assert agent.last_result is not None
    return agent.last_result
