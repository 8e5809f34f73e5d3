"""The planning flow's machine, declared once: read by the driver, the diagrams and the docs.

PLANNING makes the plan, EXECUTING runs one step with its agent per visit,
REPLANNING revises what remains after a blocked step, FINALIZING has the
planner sum up. AWAITING_AGENT is the pause of a step whose agent paused
(for approval of a call, or for an answer to a question): the flow waits
with it, and once answered goes back to EXECUTING, where the agent goes on
from its pause. The edges out of EXECUTING are the flow's policy, in
priority order: an agent that paused waits; one that finished the whole task ends it; a blocked
step replans, unless the replans are spent; no step left finalizes;
otherwise the next step (or a retry of this one) runs. Guards read the
flow's `FlowState` (`flow.flow_state`) and never do I/O.
"""

from __future__ import annotations

from typing import Any

from ..fsm.machine import Edge, Effect, Guard, MachineTable, Payload, StateSpec
from ..run.result import AgentState, StopReason
from .result import FlowStopReason

__all__ = [
    "AWAITING_AGENT",
    "FINISHED_EARLY",
    "FLOW_TABLE",
    "PLAN_DONE",
    "REPLANS_SPENT",
    "STEP_BLOCKED",
    "STEP_PAUSED",
]

AWAITING_AGENT = "AWAITING_AGENT"
"""The pause of a step whose agent paused for a person: the flow waits with it."""

STEP_PAUSED = Guard(
    "step_paused",
    lambda flow: flow.flow_state.paused_step is not None,
    "the step's agent paused for a person (an approval, or an answer to its question)",
)
FINISHED_EARLY = Guard(
    "finished_early",
    lambda flow: flow.flow_state.finished_early,
    "the step's agent reported the whole task done",
)
REPLANS_SPENT = Guard(
    "replans_spent",
    lambda flow: flow.flow_state.blocked is not None and flow.flow_state.replans >= flow.max_replans,
    "a step is blocked and the flow has replanned `max_replans` times",
)
STEP_BLOCKED = Guard(
    "step_blocked",
    lambda flow: flow.flow_state.blocked is not None,
    "the step failed on every attempt",
)
PLAN_DONE = Guard(
    "plan_done",
    lambda flow: flow.flow_state.plan is None or flow.flow_state.plan.next_step is None,
    "no step is left to run",
)


def _count_replan(flow: Any) -> None:
    flow.flow_state.replans += 1


COUNT_REPLAN = Effect("replans += 1", _count_replan)

# -- phases: the flow's I/O (the planner's calls, the agents' runs), awaited between triggers


async def _plan(flow: Any) -> None:
    await flow.make_plan()


async def _execute(flow: Any) -> None:
    await flow.execute_step()


async def _replan(flow: Any) -> None:
    await flow.revise_plan()


async def _finalize(flow: Any) -> None:
    await flow.summarize()


async def _await_agent(flow: Any) -> None:
    await flow.await_agent()


RUNNING = AgentState.RUNNING.value

FLOW_TABLE = MachineTable(
    initial="IDLE",
    states=(
        StateSpec("IDLE", doc="ready for `execute()`"),
        StateSpec(
            "PLANNING",
            RUNNING,
            _plan,
            "planned",
            "the planner makes the plan (else a fallback plan)",
            produces=frozenset({Payload.PLAN}),
        ),
        StateSpec("EXECUTING", RUNNING, _execute, "step_done", "the next step's agent runs it"),
        StateSpec(
            "REPLANNING",
            RUNNING,
            _replan,
            "replanned",
            "the planner revises the remaining steps",
            produces=frozenset({Payload.PLAN}),
        ),
        StateSpec(
            AWAITING_AGENT,
            RUNNING,
            _await_agent,
            "answered",
            "the step's agent waits for an approval or an answer (the flow's approver or input "
            "handler, or the app)",
            pause=True,
        ),
        StateSpec("FINALIZING", RUNNING, _finalize, "finalized", "the planner sums up the plan"),
        StateSpec("DONE", doc="the flow ended; its stop reason says how", final=AgentState.FINISHED),
        StateSpec("ERROR", doc="ended by an error or cancellation", final=AgentState.ERROR),
    ),
    edges=(
        Edge("start", "IDLE", "PLANNING"),
        Edge("planned", "PLANNING", "EXECUTING"),
        Edge("step_done", "EXECUTING", AWAITING_AGENT, STEP_PAUSED),
        Edge("step_done", "EXECUTING", "FINALIZING", FINISHED_EARLY, FlowStopReason.FINISHED_EARLY),
        Edge("step_done", "EXECUTING", "FINALIZING", REPLANS_SPENT, FlowStopReason.REPLAN_LIMIT),
        Edge("step_done", "EXECUTING", "REPLANNING", STEP_BLOCKED, effect=COUNT_REPLAN),
        Edge("step_done", "EXECUTING", "FINALIZING", PLAN_DONE, FlowStopReason.COMPLETED),
        Edge("step_done", "EXECUTING", "EXECUTING"),
        Edge("replanned", "REPLANNING", "FINALIZING", PLAN_DONE, FlowStopReason.COMPLETED),
        Edge("replanned", "REPLANNING", "EXECUTING"),
        Edge("answered", AWAITING_AGENT, "EXECUTING"),
        Edge("finalized", "FINALIZING", "DONE"),
        Edge("fail", RUNNING, "ERROR", stop_reason=StopReason.ERROR),
        Edge("cancel", RUNNING, "ERROR", stop_reason=StopReason.CANCELLED),
    ),
)
"""The planning flow's machine: plan, run each step with its agent, replan, sum up (`PlanningFlow.table`)."""
