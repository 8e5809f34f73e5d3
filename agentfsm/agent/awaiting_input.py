"""Input: a tool call that asks a person something waits in AWAITING_INPUT for the answers.

Why a state of the machine, as approvals are (`agentfsm.agent.approval`): a run waiting for
a person must be visible (`agent.fsm_state`, the diagram, a checkpoint that survives a
restart while nobody answers), and each answer is an edit, so a trace records it and replay
re-applies it. A tool says it needs input by returning `ToolResult(input_required=...)`
(the questions, and a token only the tool reads); an MCP server's elicitation is the first
such tool, and this module knows nothing of MCP. The state is added with
`MachineTable.extend`:

    ACTING --act_done [needs_input]--> AWAITING_INPUT --answered--> ACTING

It sits before ``ACTING -> OBSERVING``, so it is entered once every call of the step has
run, and every other step goes on as before. In AWAITING_INPUT the engine asks the agent's
`input_handler` (the CLI's asks on the terminal); with none, `run()` returns a paused
`RunResult` listing the questions (`pending_input`), the app answers each one
(`agent.answer`) and calls `agent.resume()`. ACTING then runs again: the calls that finished
keep their observations (`Turn.completed_calls`), and only the calls that asked run
again, through their tool's `resume`, with the answers.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Protocol

from ..errors import KeyNotFoundError, PauseRun, WrongPhaseError, WrongTypeError, WrongValueError
from ..fsm.machine import Edge, Guard, MachineTable, StateSpec
from ..messages import ToolCall
from ..questions import Answer, AnswerAction, InputHandler, Question
from ..run.events import AgentEvent, Edit
from ..run.result import AgentState, StopReason
from ..run.state import Observation
from ..toolbox.tool import ToolCollection
from .turn import AgentRunState, Turn

__all__ = [
    "AWAITING_INPUT",
    "NEEDS_INPUT",
    "TOO_MANY_ROUNDS",
    "Questions",
    "answer",
    "asked",
    "unanswered",
    "with_input",
]

TOO_MANY_ROUNDS = (
    "Error: `{name}` asked for input {rounds} times in one call, more than the agent's "
    "`max_input_rounds` ({cap}) allows; it was stopped. Raise `max_input_rounds` to allow more."
)

STATE = "AWAITING_INPUT"


class Answering(Protocol):
    """What the input state reads and writes of an agent (`ToolCallAgent` is one)."""

    name: str
    run_state: AgentRunState
    input_handler: InputHandler | None
    paused_edits: tuple[Edit, ...]

    @property
    def fsm_state(self) -> str: ...

    @property
    def phase_running(self) -> bool: ...

    @property
    def position(self) -> str: ...

    def emit(self, record: AgentEvent) -> None: ...


class Questions:
    """The input part of a tool-calling agent's API (`ToolCallAgent` mixes it in before its base,
    whose `pending_input` is an agent's without questions: none): the questions a paused run
    waits for, and the answers an app or a person gives."""

    @property
    def pending_input(self: Answering) -> list[tuple[ToolCall, Question]]:
        """While paused in AWAITING_INPUT: each unanswered question, with the call that asks it."""
        if self.fsm_state != STATE:
            return []
        return unanswered(self)

    def answer(
        self: Answering,
        call_id: str,
        content: dict[str, Any] | None = None,
        *,
        action: AnswerAction = "accept",
        key: str | None = None,
    ) -> Edit:
        """Answer the question `key` (None: its only unanswered one) of the waiting call `call_id`:
        accept with `content` (the fields its schema asks for), or ``action="decline"`` /
        ``"cancel"``. The tool gets the answer when the run is resumed."""
        return answer(self, call_id, Answer(action=action, content=content), key=key)


def asked(
    turn: Turn, tools: ToolCollection, call: ToolCall, observation: Observation, cap: int
) -> Observation:
    """The tool-call path's hook: `call` asked for input (`observation.input_required`). Its
    questions wait for AWAITING_INPUT (its start record is taken back, so the call runs again with
    the answers rather than as one interrupted); past `cap` rounds in one call, it ends with an
    error observation instead, and its tool lets go of the question."""
    question = observation.input_required
    assert question is not None
    rounds = turn.input_rounds[call.id] = turn.input_rounds.get(call.id, 0) + 1
    if rounds > cap:
        tool = tools.get(call.name)
        if tool is not None:
            tool.abandon(question)
        content = TOO_MANY_ROUNDS.format(name=call.name, rounds=rounds, cap=cap)
        return Observation(call=call, content=content, is_error=True, duration_s=observation.duration_s)
    turn.input_requests[call.id] = question
    turn.answers.pop(call.id, None)
    if call.id in turn.started_calls:
        turn.started_calls.remove(call.id)
    return observation


def unanswered(agent: Answering) -> list[tuple[ToolCall, Question]]:
    """This step's questions without an answer yet, with the calls that ask them, in call order."""
    turn = agent.run_state.turn
    waiting = []
    for call in turn.pending_calls:
        asked = turn.input_requests.get(call.id)
        if asked is None:
            continue
        given = turn.answers.get(call.id, {})
        waiting += [(call, q) for q in asked.questions if q.key not in given]
    return waiting


NEEDS_INPUT = Guard(
    "needs_input",
    lambda agent: bool(agent.run_state.turn.input_requests),
    "a tool call of the step asked for input before it could finish",
)


async def _await_answers(agent: Answering) -> None:
    waiting = unanswered(agent)
    if not waiting:  # answered by the app while paused (or re-entered after a resume)
        return
    if agent.input_handler is None:
        asked = ", ".join(f"{call.name} ({call.id}): {q.message!r}" for call, q in waiting)
        raise PauseRun(StopReason.AWAITING_INPUT.value, f"waiting for input to {asked}")
    for call, question in waiting:
        reply = await agent.input_handler(call, question)
        if not isinstance(reply, Answer):
            raise WrongTypeError(
                f"the input handler must return an Answer (Answer.accept(...), Answer.decline(), "
                f"Answer.cancel()) for {question.key!r} of {call.name}; got {reply!r}"
            )
        answer(agent, call.id, reply, key=question.key, by_handler=True)


AWAITING_INPUT = StateSpec(
    STATE,
    AgentState.RUNNING.value,
    _await_answers,
    "answered",
    "wait for an answer to each question a tool call asked (the input handler, or the app while paused)",
    pause=True,
)


@cache
def with_input(table: MachineTable) -> MachineTable:
    """`table` with AWAITING_INPUT between ACTING and OBSERVING (built once per table)."""
    if STATE in table.by_name:
        return table
    return table.extend(
        states=[AWAITING_INPUT],
        edges=[
            Edge("act_done", "ACTING", STATE, NEEDS_INPUT),
            Edge("answered", STATE, "ACTING"),
        ],
        before=table.edge("ACTING", "OBSERVING", "act_done"),
    )


def answer(
    agent: Answering, call_id: str, reply: Answer, *, key: str | None = None, by_handler: bool = False
) -> Edit:
    """Record `reply` to the question `key` (None: the call's only unanswered one) of the call
    `call_id` (an `answer` edit, traced and checkpointed)."""
    run = agent.run_state
    if agent.fsm_state != STATE or (agent.phase_running and not by_handler):
        raise WrongPhaseError(
            f"questions are answered only in {STATE}, while the run is paused there "
            f"(result.paused); agent {agent.name!r} is in {agent.position}"
        )
    if not isinstance(reply, Answer):
        raise WrongTypeError(f"an answer is an Answer (Answer.accept(...), ...), got {reply!r}")
    asked = run.turn.input_requests.get(call_id)
    if asked is None:
        raise KeyNotFoundError(
            f"no call {call_id!r} waits for input; the calls that do: {sorted(run.turn.input_requests)!r}"
        )
    given = run.turn.answers.get(call_id, {})
    open_keys = [q.key for q in asked.questions if q.key not in given]
    if key is None:
        if len(open_keys) != 1:
            raise WrongValueError(
                f"call {call_id!r} has {len(open_keys)} unanswered questions ({open_keys!r}); "
                "pass `key=` to say which one this answers"
            )
        key = open_keys[0]
    if key not in {q.key for q in asked.questions}:
        raise KeyNotFoundError(
            f"call {call_id!r} asked no question {key!r}; its questions: {[q.key for q in asked.questions]!r}"
        )
    if key in given:
        raise WrongValueError(f"question {key!r} of call {call_id!r} is already answered: {given[key]!r}")
    if reply.action != "accept" and reply.content is not None:
        raise WrongValueError(f"a {reply.action!r} answer carries no content; got {reply.content!r}")
    run.turn.answers[call_id] = {**given, key: reply}
    run.edits += 1
    edit = Edit(
        agent=agent.name,
        run_id=run.run_id,
        step=run.step,
        kind="answer",
        before=key,
        after=reply,
        call_id=call_id,
    )
    agent.emit(edit)
    if not by_handler:  # made while paused: no trace is open to record it now
        agent.paused_edits += (edit,)
    return edit
