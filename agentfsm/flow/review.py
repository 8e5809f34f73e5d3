"""Plan review: the flow waits in AWAITING_PLAN_REVIEW after planning and after each replan.

A state of the flow's machine, added with `MachineTable.extend` as approvals
add theirs to an agent's: the wait is visible (`flow.fsm_state`, the
diagram), and the decision is data on the flow's state, applied by the
state's action. With a `reviewer` (the terminal's, or an app's coroutine),
the action asks it and goes on; without one, `execute()` returns a paused
result and the app decides (`flow.approve_plan()`, `flow.edit_plan(steps)`,
`flow.cancel_plan()`) then calls `flow.resume()`.

    PLANNING   --planned [plan_review]--> AWAITING_PLAN_REVIEW --reviewed--> EXECUTING
    REPLANNING --replanned [plan_review]--> AWAITING_PLAN_REVIEW
    AWAITING_PLAN_REVIEW --reviewed [plan_cancelled]--> DONE (plan_cancelled)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from ..fsm.machine import Edge, Guard, MachineTable, StateSpec
from ..run.result import AgentState
from ..serde import Serializable
from .plan import Plan
from .result import FlowStopReason
from .table import PLAN_DONE

__all__ = ["AWAITING_PLAN_REVIEW", "PlanDecision", "Reviewer", "with_review"]

AWAITING_PLAN_REVIEW = "AWAITING_PLAN_REVIEW"
"""The pause where the flow waits for a person to approve, edit or cancel its plan."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanDecision(Serializable):
    """A reviewer's answer to a plan: go on with it, go on with other steps, or stop the flow."""

    kind: Literal["approve", "edit", "cancel"]
    steps: tuple[str, ...] = ()
    """For `edit`: the steps still to do, each with its ``[agent]`` tag (completed steps stay)."""


Reviewer = Callable[[Plan], Awaitable[PlanDecision]]
"""Given the plan (made or revised), returns the decision on it."""

PLAN_REVIEW = Guard(
    "plan_review", lambda flow: flow.reviewing, "plan review is on: a person sees each plan before it runs"
)
CANCELLED = Guard(
    "plan_cancelled",
    lambda flow: flow.flow_state.decision is not None and flow.flow_state.decision.kind == "cancel",
    "the reviewer cancelled the plan",
)


async def _review(flow: Any) -> None:
    await flow.review_plan()


@cache
def with_review(table: MachineTable) -> MachineTable:
    """`table` (the flow's) with AWAITING_PLAN_REVIEW after PLANNING and after REPLANNING."""
    state = StateSpec(
        AWAITING_PLAN_REVIEW,
        AgentState.RUNNING.value,
        _review,
        "reviewed",
        "a person approves, edits or cancels the plan",
        pause=True,
    )
    after_planning = table.edge("PLANNING", "EXECUTING", "planned")
    reviewed = (
        Edge("reviewed", AWAITING_PLAN_REVIEW, "DONE", CANCELLED, FlowStopReason.PLAN_CANCELLED),
        Edge("reviewed", AWAITING_PLAN_REVIEW, "FINALIZING", PLAN_DONE, FlowStopReason.COMPLETED),
        Edge("reviewed", AWAITING_PLAN_REVIEW, "EXECUTING"),
    )
    table = table.extend(
        states=[state],
        edges=[Edge("planned", "PLANNING", AWAITING_PLAN_REVIEW, PLAN_REVIEW), *reviewed],
        before=after_planning,
    )
    after_replanning = table.edge("REPLANNING", "EXECUTING", "replanned")
    return table.extend(
        edges=[Edge("replanned", "REPLANNING", AWAITING_PLAN_REVIEW, PLAN_REVIEW)], before=after_replanning
    )
