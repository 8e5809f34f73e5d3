"""Approvals: calls to tools marked as needing one wait in AWAITING_APPROVAL for a person's decision.

Why a state of the machine, not a callback inside ACTING: a paused run must be
visible (`agent.fsm_state`, the diagram, a checkpoint that survives a restart
while nobody answers), and the decision must be an event like any edit, so a
trace records it and replay re-applies it. The state is added to a table with
`MachineTable.extend`, the mechanism users have for their own states:

    THINKING --think_done [needs_approval]--> AWAITING_APPROVAL --decided--> ACTING

It sits before the ``[has_tool_calls]`` edge, so a reply with a call that
needs approval goes through it and every other reply is routed as before.
In AWAITING_APPROVAL the engine asks the agent's `approver` (the CLI's asks
on the terminal); with none, `run()` returns a paused `RunResult` listing the
calls, and the app decides each one (`agent.approve`, `agent.reject`) and
calls `agent.resume()`. ACTING then runs the approved calls, with edited
arguments where given, and answers each rejected call with an error
observation the model reads, so call/result pairs stay whole.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from functools import cache
from typing import Protocol

from ..errors import KeyNotFoundError, PauseRun, WrongPhaseError, WrongTypeError, WrongValueError
from ..fsm.machine import Edge, Guard, MachineTable, Payload, StateSpec
from ..memory import Memory
from ..messages import ToolCall
from ..run.events import AgentEvent, Edit
from ..run.result import AgentState, StopReason
from ..run.state import Decision, Observation, RunState

__all__ = [
    "AWAITING_APPROVAL",
    "NEEDS_APPROVAL",
    "Approver",
    "Decision",
    "decide",
    "rejection_text",
    "undecided",
    "verdict",
    "with_approval",
]

STATE = "AWAITING_APPROVAL"

Approver = Callable[[Sequence[ToolCall]], Awaitable[Sequence[Decision]]]
"""Given the calls that wait for a decision, returns one `Decision` per call, in the same order."""


class Approving(Protocol):
    """What approvals read and write of an agent (`ToolCallAgent` is one)."""

    name: str
    run_state: RunState
    memory: Memory
    approver: Approver | None
    paused_edits: tuple[Edit, ...]

    @property
    def fsm_state(self) -> str: ...

    @property
    def phase_running(self) -> bool: ...

    @property
    def position(self) -> str: ...

    def needs_approval(self, call: ToolCall) -> bool: ...

    def emit(self, record: AgentEvent) -> None: ...


def undecided(agent: Approving) -> list[ToolCall]:
    """This step's calls that need approval and have no decision yet, in call order."""
    decisions = agent.run_state.decisions
    return [c for c in agent.run_state.pending_calls if c.id not in decisions and agent.needs_approval(c)]


NEEDS_APPROVAL = Guard(
    "needs_approval",
    lambda agent: bool(undecided(agent)),
    "a tool call of the reply is to a tool that needs approval",
)


async def _await_decisions(agent: Approving) -> None:
    waiting = undecided(agent)
    if not waiting:  # decided by the app while paused (or re-entered after a resume)
        return
    if agent.approver is None:
        names = ", ".join(f"{c.name} ({c.id})" for c in waiting)
        raise PauseRun(StopReason.AWAITING_APPROVAL.value, f"waiting for approval of {names}")
    answers = list(await agent.approver(waiting))
    if len(answers) != len(waiting) or not all(isinstance(a, Decision) for a in answers):
        raise WrongTypeError(
            f"the approver must return one Decision per call ({len(waiting)}), in order; got {answers!r}"
        )
    for call, answer in zip(waiting, answers, strict=True):
        decide(agent, call.id, answer, by_approver=True)


AWAITING_APPROVAL = StateSpec(
    STATE,
    AgentState.RUNNING.value,
    _await_decisions,
    "decided",
    "wait for a decision on each call that needs approval (the approver, or the app while paused)",
    pause=True,
    consumes=frozenset({Payload.PENDING_CALLS}),
)


@cache
def with_approval(table: MachineTable) -> MachineTable:
    """`table` with AWAITING_APPROVAL between THINKING and ACTING (built once per table)."""
    if STATE in table.by_name:
        return table
    return table.extend(
        states=[AWAITING_APPROVAL],
        edges=[
            Edge("think_done", "THINKING", STATE, NEEDS_APPROVAL),
            Edge("decided", STATE, "ACTING"),
        ],
        before=table.edge("THINKING", "ACTING", "think_done"),
    )


def decide(agent: Approving, call_id: str, decision: Decision, *, by_approver: bool = False) -> Edit:
    """Record `decision` for the pending call `call_id` (an `approval` edit, traced and checkpointed)."""
    run = agent.run_state
    if agent.fsm_state != STATE or (agent.phase_running and not by_approver):
        raise WrongPhaseError(
            f"approvals are decided only in {STATE}, while the run is paused there "
            f"(result.paused); agent {agent.name!r} is in {agent.position}"
        )
    index = next((i for i, c in enumerate(run.pending_calls) if c.id == call_id), None)
    if index is None:
        ids = [c.id for c in run.pending_calls]
        raise KeyNotFoundError(f"no pending call with id {call_id!r}; this step's calls: {ids!r}")
    call = run.pending_calls[index]
    if call_id in run.decisions:
        raise WrongValueError(
            f"call {call_id!r} ({call.name}) is already decided: {run.decisions[call_id]!r}"
        )
    if decision.approved and decision.arguments is not None and decision.arguments != call.arguments:
        try:
            parsed = json.loads(decision.arguments)
        except json.JSONDecodeError as exc:
            raise WrongValueError(f"edited arguments for {call.name!r} are not JSON: {exc}") from None
        except RecursionError:
            raise WrongValueError(
                f"edited arguments for {call.name!r} are nested too deeply to parse; pass a flatter object"
            ) from None
        if not isinstance(parsed, dict):
            raise WrongValueError(f"edited arguments for {call.name!r} must be a JSON object, got {parsed!r}")
        calls = list(run.pending_calls)
        calls[index] = replace(call, arguments=decision.arguments)  # the provider's fields stay on it
        agent.memory.replace_open_calls(calls)  # the model is shown the call that ran
        run.pending_calls = calls
    run.decisions[call_id] = decision
    edit = Edit(
        agent=agent.name,
        run_id=run.run_id,
        step=run.step,
        kind="approval",
        before=(call,),
        after=decision,
        call_id=call_id,
    )
    agent.emit(edit)
    if not by_approver:  # made while paused: no trace is open to record it now
        agent.paused_edits += (edit,)
    return edit


def verdict(run: RunState, call: ToolCall, needed: bool) -> Observation | None:
    """The tool-call path's hook: the observation of `call` when it is not to run, having been
    rejected, or needing approval (`needed`) with no decision (a run resumed past its pause, say);
    None when it runs."""
    decision = run.decisions.get(call.id)
    if decision is None and needed:
        decision = Decision.reject("it needs approval and none was given")
    if decision is not None and not decision.approved:
        return Observation(call=call, content=rejection_text(call, decision), is_error=True)
    return None


def rejection_text(call: ToolCall, decision: Decision) -> str:
    """The observation of a rejected call: the model learns it did not run, and why."""
    why = f" Reason: {decision.reason}" if decision.reason else ""
    return f"Error: the user rejected the call to `{call.name}`; it was not run.{why}"
