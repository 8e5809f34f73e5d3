"""Taking an edge and reporting it: `fire` (`BaseAgent._fire`), the one place every edge goes through.

Kept apart from the engine loop because it is the record, not the driving:
the table picks the edge; this builds the `Transition` event (only when
someone reads it), logs it, hands it to the listeners and writes the
checkpoint after them.
"""

from __future__ import annotations

from logging import INFO
from time import perf_counter
from typing import TYPE_CHECKING

from ..log import STDLIB_LOGGER, event
from ..run.events import Transition
from .table import AWAITING_APPROVAL

if TYPE_CHECKING:
    from .base import BaseAgent

__all__ = ["abort", "fire"]

_INTERRUPTED = "Error: the run ended before this tool call produced a result"
_log_enabled = STDLIB_LOGGER.isEnabledFor
_CALLS_SHOWN = frozenset({"ACTING", AWAITING_APPROVAL})  # edges into these carry the pending calls


def fire(agent: BaseAgent, trigger: str) -> Transition | None:
    """Take the edge for `trigger`. The `Transition` event is built when someone reads it:
    `iter()`'s caller, a listener or the `agentfsm` logger; else this returns None."""
    run = agent.run_state
    source = run.state
    edge, guards = agent.table.take(agent, trigger, source)
    now = perf_counter()
    started, agent._entered_at = agent._entered_at, now
    stop_reason = edge.stop_reason
    if stop_reason is not None:
        run.stop_reason = stop_reason
    transition = None
    if agent._yields or agent._listeners or agent._event_listeners or _log_enabled(INFO):
        dest = edge.dest
        transition = Transition(
            agent=agent.name,
            run_id=run.run_id,
            trigger=trigger,
            source=source,
            dest=dest,
            step=run.step,
            guards=guards,
            stop_reason=stop_reason,
            duration_s=now - started,
            reply=run.reply if source == "THINKING" else None,
            tool_calls=tuple(run.pending_calls) if dest in _CALLS_SHOWN else (),
            observations=tuple(run.observations) if source == "ACTING" else (),
            error=run.error if dest == "ERROR" else None,
        )
        if _log_enabled(INFO):
            event("transition", **transition.log_fields())
        agent._emit(transition)
    if agent._checkpointer is not None and edge.dest != agent.table.initial:
        agent._checkpointer.write()  # after the listeners: an edit they made is in it
    return transition


def abort(agent: BaseAgent, trigger: str, error: str) -> Transition | None:
    """End the run on `trigger` (`fail`, `cancel`) with `error`, answering its open tool calls first."""
    agent.run_state.error = error
    agent.memory.close_open_calls(_INTERRUPTED)
    return fire(agent, trigger)
