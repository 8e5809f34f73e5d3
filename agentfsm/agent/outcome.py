"""What a run returns: its `RunResult` when it ends, or when it pauses (`finish`).

Kept apart from the engine loop because it is policy, not driving: which
text a run that stopped on a limit reports, what a paused run lists, and
what is logged when a run ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..log import enabled as log_enabled
from ..log import event
from ..run.result import RunResult, StopReason
from ..serde import slot_builder

if TYPE_CHECKING:
    from .base import BaseAgent

__all__ = ["ended", "finish", "paused"]

_run_result = slot_builder(RunResult)


def finish(agent: BaseAgent) -> RunResult | None:
    """Close a run that ended or paused: its result in `last_result`, logged (`BaseAgent._finish`).

    Returns the result of a run that ended, whose `on_run_end` the caller awaits; None
    for a paused run (its `on_run_end` comes when it ends) or one that never started.
    """
    agent._active = False
    run = agent.run_state
    if agent._paused is not None:
        agent.last_result = paused(agent, agent._paused)
        event("run_paused", agent=agent.name, run_id=run.run_id, state=run.state, reason=agent._paused)
        return None
    if run.stop_reason is None:  # never started (e.g. add_request refused the request)
        return None
    result = agent.last_result = ended(agent, run.stop_reason)
    if log_enabled():
        event(
            "run_finished",
            agent=agent.name,
            run_id=run.run_id,
            state=result.state.value,
            stop_reason=result.stop_reason.value,
            steps=result.steps,
        )
    return result


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
