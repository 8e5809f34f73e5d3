"""How `agentfsm mcp-serve` asks its client about a served run's pauses: approvals and questions
as MCP elicitations, in the way the client's revision has (see `agentfsm.mcp.serve`).

On the 2025 revisions (the handshake), `OverTheSession` is the run's approver and input handler:
each waiting call and each question is sent as ``elicitation/create`` over the session, mid-call,
within the pause's timeout. On 2026-07-28 a server cannot send requests: the paused run's calls and
questions become the ``input_required`` result's elicitations (`asked`), and the client's retry
carries the answers (`apply_answers`). Either way only an accepted form with ``approve: true`` runs a
call, and a client that cannot be asked gets the call rejected and the question cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import PauseRun
from ..log import event
from ..messages import ToolCall
from ..questions import Answer, AnswerAction, InputHandler, Question
from ..run.result import StopReason
from ..run.state import Decision

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext
    from mcp.types import CreateMessageRequest, ElicitRequest, ListRootsRequest

__all__ = ["MODERN", "Approver", "Asked", "OverTheSession", "apply_answers", "handlers_for", "requests_for"]

MODERN = "2026-07-28"
"""The first revision that elicits through ``input_required`` results."""

Approver = Callable[[Sequence[ToolCall]], Awaitable[Sequence[Decision]]]
"""As `agentfsm.agent.approval.Approver`: the waiting calls in, one `Decision` each out."""


class Asked(Protocol):
    """What a paused run is asked about, and answered through (`ToolCallAgent` is one)."""

    @property
    def pending_approval(self) -> list[ToolCall]: ...

    @property
    def pending_input(self) -> list[tuple[ToolCall, Question]]: ...

    def approve(self, call_id: str | None = None) -> object: ...

    def reject(self, call_id: str | None = None, reason: str | None = None) -> object: ...

    def answer(
        self,
        call_id: str,
        content: dict[str, Any] | None = None,
        *,
        action: AnswerAction = "accept",
        key: str | None = None,
    ) -> object: ...


def approval_schema() -> dict[str, Any]:
    """The form an approval asks for: run the call or not, and why not (the model reads it)."""
    return {
        "type": "object",
        "properties": {
            "approve": {"type": "boolean", "title": "Approve", "description": "run the call"},
            "reason": {
                "type": "string",
                "title": "Reason",
                "description": "why not (optional; the agent's model reads it)",
            },
        },
        "required": ["approve"],
    }


def approval_message(call: ToolCall) -> str:
    return f"The agent asks to call `{call.name}` with arguments {call.arguments}. Approve this call?"


def approval_request(call: ToolCall) -> ElicitRequest:
    from mcp.types import ElicitRequest, ElicitRequestFormParams

    return ElicitRequest(
        params=ElicitRequestFormParams(message=approval_message(call), requested_schema=approval_schema())
    )


def question_request(call: ToolCall, question: Question) -> ElicitRequest:
    """A tool's question as the client is asked it: its form, or the page to open."""
    from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitRequestURLParams

    if question.url is not None:
        return ElicitRequest(
            params=ElicitRequestURLParams(
                message=question.message, url=question.url, elicitation_id=question_key(call, question)
            )
        )
    schema = question.schema or {"type": "object", "properties": {}}
    return ElicitRequest(params=ElicitRequestFormParams(message=question.message, requested_schema=schema))


def question_key(call: ToolCall, question: Question) -> str:
    """The key of a question among a pause's ``input_requests`` (an approval's is its call's id)."""
    return f"{call.id}/{question.key}"


def requests_for(agent: Asked) -> dict[str, ElicitRequest | CreateMessageRequest | ListRootsRequest]:
    """What the paused run waits for, as elicitations keyed for the client's retry: each call
    waiting for approval, or each question unanswered (a run waits for one or the other)."""
    asked: dict[str, ElicitRequest | CreateMessageRequest | ListRootsRequest]
    asked = {call.id: approval_request(call) for call in agent.pending_approval}
    for call, question in agent.pending_input:
        asked[question_key(call, question)] = question_request(call, question)
    return asked


def decision_of(answer: Any) -> Decision:
    """The client's answer to one approval, as a `Decision`: only an accepted form with
    ``approve: true`` runs the call."""
    from mcp.types import ElicitResult

    if answer is None:
        return Decision.reject("the MCP client gave no answer for this call")
    if not isinstance(answer, ElicitResult):
        return Decision.reject(f"the MCP client answered the approval with a {type(answer).__name__}")
    if answer.action != "accept":
        done = {"decline": "declined", "cancel": "cancelled"}.get(answer.action, answer.action)
        return Decision.reject(f"the MCP client's user {done} the approval")
    content = answer.content or {}
    if content.get("approve") is True:
        return Decision.approve()
    reason = content.get("reason")
    return Decision.reject(reason if isinstance(reason, str) and reason.strip() else None)


def answer_of(answer: Any) -> Answer:
    """The client's answer to one question, as an `Answer`: an accepted form's fields, or the
    client's decline or cancel; no answer at all is a cancel."""
    from mcp.types import ElicitResult

    if not isinstance(answer, ElicitResult):
        return Answer.cancel()
    if answer.action == "accept":
        return Answer.accept(dict(answer.content or {}))
    return Answer.decline() if answer.action == "decline" else Answer.cancel()


def apply_answers(agent: Asked, answers: Mapping[str, Any]) -> None:
    for call in agent.pending_approval:
        decision = decision_of(answers.get(call.id))
        if decision.approved:
            agent.approve(call.id)
        else:
            agent.reject(call.id, decision.reason)
    for call, question in agent.pending_input:
        given = answer_of(answers.get(question_key(call, question)))
        agent.answer(call.id, given.content, action=given.action, key=question.key)


def handlers_for(
    ctx: ServerRequestContext[Any, Any], timeout: float
) -> tuple[Approver | None, InputHandler | None]:
    """How this call's approvals and questions are asked: neither (pause, then ``input_required``)
    on 2026-07-28; over the session on the handshake revisions, within `timeout` seconds a pause;
    refused (approvals) and cancelled (questions) when the client declared no elicitation of the
    kind asked."""
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None:
        return refuse_all, cancel_all
    if is_modern(ctx.protocol_version):
        return None, None
    session = OverTheSession(ctx, timeout, form=elicitation.form is not None or elicitation.url is None)
    return (session if session.form else refuse_all), session.ask


class OverTheSession:
    """A 2025 call's approver (called with the waiting calls) and input handler (`ask`): each
    waiting call, and each question, asked with ``elicitation/create`` over the session, mid-call.
    The answers to one pause come within `timeout` seconds or not at all: then the question is
    withdrawn, the run pauses (`expired` set), and the server cancels it, since a client that
    does not answer would otherwise hold the run and its agent for ever. `form`: whether the
    client takes forms (else only pages to open: a form question is cancelled, unasked)."""

    def __init__(self, ctx: ServerRequestContext[Any, Any], timeout: float, *, form: bool) -> None:
        self.session, self.request_id, self.timeout = ctx.session, ctx.request_id, timeout
        self.form = form
        self.expired = False

    async def __call__(self, calls: Sequence[ToolCall]) -> list[Decision]:
        async with self._deadline(StopReason.AWAITING_APPROVAL, "the approval"):
            return [await self._approval(call) for call in calls]

    async def ask(self, call: ToolCall, question: Question) -> Answer:
        """One question of a tool call: the client's answer (a cancel when it cannot be asked)."""
        if question.url is None and not self.form:
            return Answer.cancel()
        async with self._deadline(StopReason.AWAITING_INPUT, f"the question {question.message!r}"):
            try:
                if question.url is not None:
                    answer = await self.session.elicit_url(
                        question.message,
                        question.url,
                        question_key(call, question),
                        related_request_id=self.request_id,
                    )
                else:
                    schema: Any = question.schema or {"type": "object", "properties": {}}
                    answer = await self.session.elicit_form(
                        question.message, schema, related_request_id=self.request_id
                    )
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the client refused or failed the request: no answer
                event(
                    "mcp_serve_question_failed",
                    level=logging.INFO,
                    message=f"the MCP client could not answer {question.message!r}: {exc}",
                )
                return Answer.cancel()
        return answer_of(answer)

    @contextlib.asynccontextmanager
    async def _deadline(self, reason: StopReason, what: str) -> AsyncIterator[None]:
        """The pause's questions answered within `timeout` seconds, or the run pauses, expired."""
        try:
            async with asyncio.timeout(self.timeout):
                yield
        except TimeoutError:
            self.expired = True
            raise PauseRun(
                reason.value, f"the MCP client gave no answer to {what} within {self.timeout:g} s"
            ) from None

    async def _approval(self, call: ToolCall) -> Decision:
        try:
            answer = await self.session.elicit_form(
                approval_message(call), approval_schema(), related_request_id=self.request_id
            )
        except Exception as exc:  # the client refused or failed the request: the call does not run
            return Decision.reject(f"the MCP client could not answer the approval: {exc}")
        return decision_of(answer)


async def refuse_all(calls: Sequence[ToolCall]) -> list[Decision]:
    why = "the MCP client cannot answer approvals (it declared no form elicitation support)"
    return [Decision.reject(why) for _ in calls]


async def cancel_all(call: ToolCall, question: Question) -> Answer:
    """A question the client cannot be asked (it declared no elicitation support): cancelled."""
    return Answer.cancel()


def is_modern(version: str | None) -> bool:
    from mcp.types.version import is_version_at_least

    return version is not None and is_version_at_least(version, MODERN)
