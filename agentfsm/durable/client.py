"""`DurableRuns`: submit runs to a queue, and follow, decide, cancel them, from any process.

Everything goes through the database (DBOS's `DBOSClient`, and for a run's events
the table its worker writes them to, `agentfsm.durable.events`): the process that
asks needs no worker of its own, and a run is reached wherever it runs.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from pydantic import ValidationError

from ..errors import CheckpointError, KeyNotFoundError, WrongPhaseError, WrongValueError
from ..messages import ToolCall
from ..questions import Answer, AnswerAction, Question
from ..run.result import AgentState, RunResult, StopReason
from ..runs.events import RunEvent
from ..runs.spec import AgentSpec
from ..runs.status import RunStatus, RunStatusState, check_page, stale_decision
from .engine import EngineClient, Listed
from .events import EventTable
from .run import DECISION_TOPIC, PAUSE_EVENT, TRACE_EVENT, TRACE_KEY, WAKE
from .worker import DEFAULT_QUEUE

__all__ = ["DurableRuns", "RunStatus", "RunStatusState"]

_CANCELLED = "CancelledError: the run was cancelled"
PARKING_WAIT_S = 5.0
"""How long a decision waits for a run that is leaving its worker at that moment to be parked, to put
it back on its queue (it takes milliseconds)."""


class DurableRuns:
    """The runs in the database at `db` (``sqlite:///FILE`` or ``postgresql://...``)."""

    def __init__(self, db: str) -> None:
        self._client = EngineClient(db)
        self._events: EventTable | None = None
        self._opening = threading.Lock()

    def close(self) -> None:
        self._client.close()
        if self._events is not None:
            self._events.close()
            self._events = None

    async def submit(
        self,
        task: str,
        agent: AgentSpec | str = "toolcall",
        *,
        queue: str = DEFAULT_QUEUE,
        run_id: str | None = None,
    ) -> str:
        """Put a run of `task` on `queue`, by the agent `agent` (a spec, or a factory's name); its id.
        Submitting again with the same `run_id` gives back that run, not a second one."""
        spec = AgentSpec(agent=agent) if isinstance(agent, str) else agent
        return await asyncio.to_thread(self._client.enqueue, queue, task, spec.to_json(), run_id)

    async def status(self, run_id: str) -> RunStatus:
        listed = await asyncio.to_thread(self._client.get, run_id)
        return await asyncio.to_thread(self._status, listed)

    async def list(
        self,
        *,
        state: RunStatusState | None = None,
        limit: int | None = None,
        offset: int = 0,
        newest_first: bool = False,
    ) -> list[RunStatus]:
        """The status of every run in the database (in submission order, or the newest first), or of
        those in `state`, as `agentfsm.runs.Runs.list` gives them in one process. `limit` and
        `offset` page the runs in that order, before `state` picks among them: a database of many
        runs is read a page at a time."""
        check_page(limit, offset)
        listed = await asyncio.to_thread(
            lambda: self._client.listed(limit=limit, offset=offset, newest_first=newest_first)
        )
        found = await asyncio.to_thread(lambda: [self._status(one) for one in listed])
        return [status for status in found if state is None or status.state == state]

    def _status(self, listed: Listed) -> RunStatus:
        state, result, pause = self._where(listed)
        number = pause.get("pause")
        return RunStatus(
            run_id=listed.run_id,
            state=state,
            task=listed.task,
            queue=listed.queue,
            worker=listed.worker,
            app_version=listed.app_version,
            result=result,
            pending_approval=tuple(ToolCall.model_validate(c) for c in pause.get("calls", ())),
            pending_input=tuple(
                (ToolCall.model_validate(q["call"]), Question.model_validate(q["question"]))
                for q in pause.get("questions", ())
            ),
            pause=number if isinstance(number, int) else None,
            decided=tuple(str(call_id) for call_id in pause.get("decided", ())),
            parked=state == "paused" and listed.status == "CANCELLED",
        )

    def _where(self, listed: Listed) -> tuple[RunStatusState, RunResult | None, dict[str, Any]]:
        """DBOS's status of the run, read as a run's: its state, its result once ended, and what
        a paused run waits for (its pause event: the calls to decide, the questions to answer)."""
        status, run_id = listed.status, listed.run_id
        if status in ("ENQUEUED", "DELAYED"):
            return "queued", None, {}
        if status == "PENDING":
            pause = self._client.event(run_id, PAUSE_EVENT)
            if pause:
                return "paused", None, pause
            return "running", None, {}
        if status == "SUCCESS":
            result = _output(run_id, listed.output)
            return ("finished" if result.state is AgentState.FINISHED else "error"), result, {}
        if status == "CANCELLED" and listed.parked is not None:
            pause = self._client.event(run_id, PAUSE_EVENT)
            if pause:
                return "paused", None, pause
        if status == "CANCELLED":
            cancelled = StopReason.CANCELLED
            return "cancelled", _ended(run_id, cancelled, _CANCELLED), {}
        return "error", _ended(run_id, StopReason.ERROR, listed.error or f"the run ended as {status}"), {}

    async def result(
        self, run_id: str, *, wait: bool = False, timeout: float | None = None, poll_s: float = 0.1
    ) -> RunResult | None:
        """The run's result once it ended; None while it has not (`wait`: wait for it, up to `timeout`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = await self.status(run_id)
            if status.result is not None or not wait:
                return status.result
            if deadline is not None and time.monotonic() >= deadline:
                return None
            await asyncio.sleep(poll_s)

    async def trace(self, run_id: str) -> str | None:
        """The ended run's trace (JSON Lines, as `agent.run(trace=...)` writes it), or None."""
        listed = await asyncio.to_thread(self._client.get, run_id)
        output = listed.output
        if isinstance(output, dict) and TRACE_KEY in output:
            text = output[TRACE_KEY]
        else:  # a run recorded in step layout 5 or earlier kept its trace in an event
            text = await asyncio.to_thread(self._client.event, run_id, TRACE_EVENT)
        return text if isinstance(text, str) else None

    def events(self, run_id: str, *, after: int = 0, poll_s: float = 0.1) -> AsyncIterator[RunEvent]:
        """The run's events from number `after` on (0: all), the recorded ones first, then the live
        ones, each a `RunEvent` (`seq`, `kind`, `to_json()`) as `agentfsm.runs.Runs.events` gives
        them; the iteration ends when the run has ended (a paused or parked run has not). Any number
        of readers, from any process, joined at any time: each reads the database (every `poll_s`
        while nothing is new), so none holds the run up or is ever dropped, and one that leaves takes
        nothing with it. The worker writes the events as the run goes (`agentfsm.durable.events`):
        each one once, numbered without gaps, across crashes and takeovers. A run recorded by a
        release from before the events has none. An unknown `run_id` raises, as `status` does, when
        the iteration begins."""
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise WrongValueError(f"after must be an event's seq (>= 0), got {after!r}")
        return self._read_events(run_id, after, poll_s)

    async def _read_events(self, run_id: str, after: int, poll_s: float) -> AsyncIterator[RunEvent]:
        await asyncio.to_thread(self._client.get, run_id, whole=False)  # an unknown id raises here
        table = await asyncio.to_thread(self._event_table)
        seq = after
        while True:
            found = await asyncio.to_thread(table.read, run_id, seq)
            for item in found:
                seq = item.seq
                yield item
            if found:
                continue
            if await asyncio.to_thread(self._client.ended, run_id):  # written before it ended: read on
                for item in await asyncio.to_thread(table.read, run_id, seq):
                    yield item
                return
            await asyncio.sleep(poll_s)

    def _event_table(self) -> EventTable:
        with self._opening:
            if self._events is None:
                self._events = EventTable(self._client.url)
            return self._events

    async def cancel(self, run_id: str) -> None:
        """End the run wherever it runs: it stops at its next step (a tool call in progress ends first).
        A paused run is woken too, so its worker ends the wait for a decision now rather than at
        the wait's end (`WAIT_S`), and the run's place on the worker is free at once. A parked run
        is marked cancelled, so no decision puts it back on its queue."""
        await asyncio.to_thread(self._client.cancel, run_id)
        await asyncio.to_thread(self._client.send, run_id, {"kind": WAKE, "call_id": None}, DECISION_TOPIC)

    async def approve(
        self,
        run_id: str,
        call_id: str,
        *,
        arguments: dict[str, Any] | None = None,
        pause: int | None = None,
    ) -> None:
        """Approve the paused run's call `call_id` (with `arguments` instead of the model's, if given).
        The approval is bound to one pause: `pause` (its number, `RunStatus.pause`), or the one the
        run is at now; a later pause never takes it, even for a call of the same id."""
        status = await self.status(run_id)
        message = {"kind": "approve", "call_id": call_id, "arguments": arguments}
        await self._decide(status, call_id, message, pause)

    async def reject(
        self, run_id: str, call_id: str, reason: str | None = None, *, pause: int | None = None
    ) -> None:
        """Reject the paused run's call `call_id`; the model reads `reason`. Bound to one pause, as
        `approve`'s approval is."""
        status = await self.status(run_id)
        await self._decide(status, call_id, {"kind": "reject", "call_id": call_id, "reason": reason}, pause)

    async def answer(
        self,
        run_id: str,
        call_id: str,
        content: dict[str, Any] | None = None,
        *,
        action: AnswerAction = "accept",
        key: str | None = None,
        pause: int | None = None,
    ) -> None:
        """Answer the question `key` (None: the call's only one) of the paused run's call `call_id`
        (as `ToolCallAgent.answer`): `content` accepted, or `action` ``decline`` / ``cancel``. Bound
        to one pause, as `approve`'s approval is."""
        if action != "accept" and content is not None:
            raise WrongValueError(f"a {action!r} answer carries no content; got {content!r}")
        status = await self.status(run_id)
        keys = [q.key for call, q in status.pending_input if call.id == call_id]
        if keys and key is None and len(keys) > 1:
            raise WrongValueError(
                f"call {call_id!r} of run {run_id!r} asks {len(keys)} questions ({keys!r}); "
                "pass `key=` to say which one this answers"
            )
        if keys and key is not None and key not in keys:
            raise KeyNotFoundError(
                f"call {call_id!r} of run {run_id!r} asked no question {key!r}; it asked {keys!r}"
            )
        answer = Answer(action=action, content=content).model_dump(mode="json")
        message = {"kind": "answer", "call_id": call_id, "answer": answer, "key": key}
        await self._decide(status, call_id, message, pause)

    async def _decide(
        self, status: RunStatus, call_id: str, message: dict[str, Any], pause: int | None
    ) -> None:
        """Send `message` to the paused run, bound to its pause `pause` (None: the current one), once
        that pause says it waits for it (a decision the run cannot apply would only be logged and
        dropped there). Two decisions of one call at one pause sent together are one message in the
        database (its idempotency key names the pause, the call and the question); the run takes
        only the first decision of a call at a pause in any case, and none of another pause."""
        run_id = status.run_id
        if pause is not None and pause != status.pause:
            raise stale_decision(status, call_id, pause, see=f"`agentfsm status {run_id}`")
        if status.state != "paused" or status.pause is None:
            raise WrongPhaseError(
                f"run {run_id!r} is {status.state}, not paused: a decision is taken only while it waits"
            )
        if call_id in status.decided:
            raise WrongValueError(
                f"call {call_id!r} of run {run_id!r} was decided already at pause {status.pause}: "
                "a pause takes one decision of each call"
            )
        approvals = [call.id for call in status.pending_approval]
        questions = list(dict.fromkeys(call.id for call, _ in status.pending_input))
        answering = message["kind"] == "answer"
        if call_id not in (questions if answering else approvals):
            if call_id in (approvals if answering else questions):
                waits, use = ("approval", "approve or reject it") if answering else ("input", "answer it")
                raise WrongValueError(f"call {call_id!r} of run {run_id!r} waits for {waits}: {use}")
            waiting = approvals + questions
            raise KeyNotFoundError(f"run {run_id!r} waits for no call {call_id!r}; it waits for {waiting!r}")
        message["pause"] = status.pause
        once = f"agentfsm-decision:{run_id}:{status.pause}:{call_id}:{message.get('key') or ''}"
        await asyncio.to_thread(self._client.send, run_id, message, DECISION_TOPIC, once)
        await self._wake(run_id)

    async def _wake(self, run_id: str) -> None:
        """Put the run back on its queue when it is parked (the decision just sent waits for it
        there). A run seen leaving its worker at this moment (marked parked, not yet cancelled) is
        waited for, up to `PARKING_WAIT_S`: its last look for a decision may have come just before
        this one was sent. A run that is running or queued takes the decision itself."""
        deadline = time.monotonic() + PARKING_WAIT_S
        while True:
            listed = await asyncio.to_thread(self._client.get, run_id)
            if listed.parked is None or listed.status not in ("PENDING", "CANCELLED"):
                return
            if listed.status == "CANCELLED":
                await asyncio.to_thread(self._client.wake, run_id)
                return
            if time.monotonic() >= deadline:  # a resumed run replaying: it clears the mark itself
                return
            await asyncio.sleep(0.02)


def _output(run_id: str, output: Any) -> RunResult:
    """The result a run that ended as SUCCESS recorded; `CheckpointError` of one line naming the run
    and what is wrong when its output row was damaged (edited, or written by something else)."""
    if not isinstance(output, dict):
        what = "no output" if output is None else f"an output that is not a result object ({output!r:.60})"
        raise CheckpointError(
            f"run {run_id!r} ended as SUCCESS but its row in the database holds {what}: its result is "
            "lost; submit its task again"
        )
    try:
        result = RunResult.model_validate({key: value for key, value in output.items() if key != TRACE_KEY})
        return result.model_copy(update={"stop_reason": StopReason.of(str(result.stop_reason))})
    except (ValidationError, ValueError, TypeError) as exc:
        if isinstance(exc, ValidationError):
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "the result"
            what = f"{where}: {first['msg']}"
        else:
            what = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CheckpointError(
            f"run {run_id!r} ended as SUCCESS but its result in the database is damaged ({what}): "
            "its result cannot be read; submit its task again"
        ) from None


def _ended(run_id: str, reason: StopReason, error: str) -> RunResult:
    """The result of a run that ended without one of its own (cancelled, or its workflow failed)."""
    return RunResult(run_id=run_id, state=AgentState.ERROR, stop_reason=reason, steps=0, error=error)
