"""What a run returns: its `RunResult` when it ends, or when it pauses.

Kept apart from the engine loop because it is policy, not driving: which
text a run that stopped on a limit reports, and what a paused run lists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..result import RunResult, StopReason
from ..serde import slot_builder

if TYPE_CHECKING:
    from .base import BaseAgent

__all__ = ["ended", "paused"]

_run_result = slot_builder(RunResult)


def ended(agent: BaseAgent, reason: StopReason) -> RunResult:
    """The result of a run that reached FINISHED or ERROR through an edge with `reason`."""
    run = agent.run_state
    return _run_result(
        run_id=run.run_id,
        state=agent.state,
        stop_reason=reason,
        steps=run.step,
        output=_output(agent, reason),
        error=run.error,
        usage=run.usage,  # not a copy: the run is over, and the next one starts a new `RunState`
        pending_approval=(),
    )


def paused(agent: BaseAgent, reason: str) -> RunResult:
    """The result of a run paused in its current state (`agent.resume()` continues it)."""
    run = agent.run_state
    return RunResult(
        run_id=run.run_id,
        state=agent.state,
        stop_reason=StopReason(reason),
        steps=run.step,
        output=run.output,
        usage=run.usage.copy(),
        pending_approval=tuple(agent.pending_approval),
    )


def _output(agent: BaseAgent, reason: StopReason) -> str | None:
    run = agent.run_state
    if run.output:
        return run.output
    if reason is StopReason.TERMINATED and run.observations:
        return run.observations[-1].content
    if reason is StopReason.MAX_STEPS:
        return f"Terminated: Reached max steps ({agent.max_steps})"
    if reason is StopReason.TOKEN_LIMIT:
        return f"Stopped: token limit reached ({run.token_limit})"
    if reason is StopReason.STUCK:
        return "Stopped: the model kept repeating itself"
    return None
