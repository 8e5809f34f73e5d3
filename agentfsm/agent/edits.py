"""Edits between steps: change the pending tool calls, or an observation, before it reaches memory.

Why these two points: they are where the engine holds the model's decision
(ACTING, before any tool runs) and the world's answer (OBSERVING, before the
model sees it), so a caller can veto or rewrite either. Each edit is an
`Edit` event delivered like a transition, so traces record it and replay
re-applies it at the same point.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..errors import WrongPhaseError
from ..messages import ToolCall
from ..run.events import Edit

if TYPE_CHECKING:
    from .base import BaseAgent

__all__ = ["edit_observation", "replace_pending_calls"]


def where(agent: BaseAgent) -> str:
    """Where `agent` is, for an error refusing an edit: its state, and whether its phase runs."""
    return f"{agent.fsm_state} (its phase is running)" if agent.phase_running else agent.fsm_state


def _require(agent: BaseAgent, phase: str, what: str, when: str) -> None:
    if agent.phase != phase or agent.phase_running:
        raise WrongPhaseError(
            f"`{what}` is allowed only in {phase}, {when}; agent {agent.name!r} is in {where(agent)}"
        )


def replace_pending_calls(agent: BaseAgent, calls: Iterable[ToolCall]) -> Edit:
    """In ACTING, before the tools run: run `calls` instead of the model's.

    Memory's last assistant message is rewritten to the same calls, so each
    result still answers a call the model is shown to have made.
    """
    _require(
        agent,
        "ACTING",
        "replace_pending_calls",
        "before the tools run (after iter() yielded THINKING -> ACTING)",
    )
    new = tuple(calls)
    bad = [c for c in new if not isinstance(c, ToolCall)]
    if bad:
        raise TypeError(
            f"pending calls must be ToolCall objects (ToolCall.create(id, name, args)), got {bad!r}"
        )
    run = agent.run_state
    before = tuple(run.pending_calls)
    agent.memory.replace_open_calls(new)
    run.pending_calls = list(new)
    edit = Edit(
        agent=agent.name, run_id=run.run_id, step=run.step, kind="pending_calls", before=before, after=new
    )
    agent._emit(edit)
    agent.save_checkpoint()
    return edit


def edit_observation(agent: BaseAgent, key: int | str, content: str) -> Edit:
    """In OBSERVING, before memory: replace the content of an observation (`key`: index or call id)."""
    _require(
        agent,
        "OBSERVING",
        "edit_observation",
        "before the results reach memory (after iter() yielded ACTING -> OBSERVING)",
    )
    run = agent.run_state
    observations = run.observations
    if isinstance(key, int):
        if not -len(observations) <= key < len(observations):
            raise IndexError(f"no observation {key}: this step has {len(observations)}")
        index = key % len(observations)
    else:
        ids = [o.call.id for o in observations]
        if key not in ids:
            raise KeyError(f"no observation for call id {key!r}; this step's calls: {ids!r}")
        index = ids.index(key)
    old = observations[index]
    # A new object, so the transition that reported the original keeps it.
    observations[index] = old.model_copy(update={"content": content})
    edit = Edit(
        agent=agent.name,
        run_id=run.run_id,
        step=run.step,
        kind="observation",
        before=old.content,
        after=content,
        call_id=old.call.id,
    )
    agent._emit(edit)
    agent.save_checkpoint()
    return edit
