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
from typing import Any, Protocol

from ..errors import KeyNotFoundError, PauseRun, WrongPhaseError, WrongTypeError, WrongValueError
from ..fsm.machine import Edge, Guard, MachineTable, Payload, StateSpec
from ..memory import Memory
from ..messages import ToolCall
from ..run.events import AgentEvent, Edit
from ..run.result import AgentState, StopReason
from ..run.state import Decision, Observation
from ..toolbox.tool import ToolCollection
from .turn import AgentRunState, Turn

__all__ = [
    "AWAITING_APPROVAL",
    "NEEDS_APPROVAL",
    "Approvals",
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
    run_state: AgentRunState
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


class Deciding(Approving, Protocol):
    """An agent whose approvals are asked of it by name: what `Approvals` reads."""

    tools: ToolCollection

    @property
    def require_approval(self) -> frozenset[str]: ...


class Approvals:
    """The approvals' part of a tool-calling agent's API (`ToolCallAgent` mixes it in before its
    base, whose `pending_approval` is an agent's without approvals: none): which calls need a
    decision, which wait for one, and the decisions an app or a person gives."""

    def needs_approval(self: Deciding, call: ToolCall) -> bool:
        """Whether `call` waits for a person's decision before it runs."""
        return call.name in self.require_approval or call.name in self.tools.approval_names

    @property
    def approval_names(self: Deciding) -> list[str]:
        """The tools whose calls need approval: named in `require_approval` or marked on the tool."""
        return sorted(self.require_approval | self.tools.approval_names)

    @property
    def pending_approval(self: Approving) -> list[ToolCall]:
        """While paused in AWAITING_APPROVAL: the calls still waiting for a decision."""
        if self.fsm_state != STATE:
            return []
        return undecided(self)

    def approve(
        self: Approving, call_id: str | None = None, *, arguments: str | dict[str, Any] | None = None
    ) -> list[Edit]:
        """Approve the waiting call `call_id` (None: every waiting call), optionally with other arguments."""
        return _decide_all(self, call_id, Decision.approve(arguments))

    def reject(self: Approving, call_id: str | None = None, reason: str | None = None) -> list[Edit]:
        """Reject the waiting call `call_id` (None: every waiting call); the model reads `reason`."""
        return _decide_all(self, call_id, Decision.reject(reason))


def _decide_all(agent: Approving, call_id: str | None, decision: Decision) -> list[Edit]:
    """`decision` for `call_id`, or for every call still waiting (None): refused outside the pause,
    so a decision that lost a race with the run never looks accepted."""
    if call_id is not None:
        return [decide(agent, call_id, decision)]
    _check_paused(agent)
    return [decide(agent, call.id, decision) for call in undecided(agent)]


def _check_paused(agent: Approving, *, by_approver: bool = False) -> None:
    if agent.fsm_state != STATE or (agent.phase_running and not by_approver):
        raise WrongPhaseError(
            f"approvals are decided only in {STATE}, while the run is paused there "
            f"(result.paused); agent {agent.name!r} is in {agent.position}"
        )


def pause_name(agent: Approving) -> str:
    """The pause a decision is for, as an error names it: the run and its step."""
    run = agent.run_state
    return f"the pause of run {run.run_id!r} at step {run.step}"


def undecided(agent: Approving) -> list[ToolCall]:
    """This step's calls that need approval and have no decision yet, in call order."""
    turn = agent.run_state.turn
    return [c for c in turn.pending_calls if c.id not in turn.decisions and agent.needs_approval(c)]


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
    _check_paused(agent, by_approver=by_approver)
    index = next((i for i, c in enumerate(run.turn.pending_calls) if c.id == call_id), None)
    if index is None:
        ids = [c.id for c in run.turn.pending_calls]
        raise KeyNotFoundError(
            f"no pending call with id {call_id!r} in {pause_name(agent)}; its calls: {ids!r}"
        )
    call = run.turn.pending_calls[index]
    if call_id in run.turn.decisions:
        raise WrongValueError(
            f"call {call_id!r} ({call.name}) is already decided in {pause_name(agent)}: "
            f"{run.turn.decisions[call_id]!r}; a decision is given once"
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
        calls = list(run.turn.pending_calls)
        calls[index] = replace(call, arguments=decision.arguments)  # the provider's fields stay on it
        agent.memory.replace_open_calls(calls)  # the model is shown the call that ran
        run.turn.pending_calls = calls
    run.turn.decisions[call_id] = decision
    run.edits += 1
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


def verdict(turn: Turn, call: ToolCall, needed: bool) -> Observation | None:
    """The tool-call path's hook: the observation of `call` when it is not to run, having been
    rejected, or needing approval (`needed`) with no decision (a run resumed past its pause, say);
    None when it runs."""
    decision = turn.decisions.get(call.id)
    if decision is None and needed:
        decision = Decision.reject("it needs approval and none was given")
    if decision is not None and not decision.approved:
        return Observation(call=call, content=rejection_text(call, decision), is_error=True)
    return None


def rejection_text(call: ToolCall, decision: Decision) -> str:
    """The observation of a rejected call: the model learns it did not run, and why."""
    why = f" Reason: {decision.reason}" if decision.reason else ""
    return f"Error: the user rejected the call to `{call.name}`; it was not run.{why}"
