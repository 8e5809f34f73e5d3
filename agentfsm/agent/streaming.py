"""`run_stream`: one run as an async iterator of all its events, the `RunResult` last.

Why the run goes in a task of its own: the deltas of a streaming model come *during* a phase
(THINKING awaits the model), where `iter()` cannot yield, since it yields between edges. So the run
is a task, a listener puts every event on a queue as it is emitted, and the iterator hands them on
in that order: transitions, model calls, tool calls, edits and the deltas between them. The run
never waits for the reader (the queue is unbounded): a slow reader delays nothing, and tools keep
running after the text.

Stopping early (``break``, `aclose()`, the reader's task cancelled) cancels the run's task: the run
ends in ERROR with `cancelled` (its partial usage counted, see `agentfsm.agent.deltas`), and is
awaited before the iterator closes, so nothing of it runs behind the caller's back.

`final_only`: how the iterator holds back a turn's tokens. Only the machine knows whether a reply
ends the run, and it decides the edge after the turn (THINKING to FINISHED for a final answer;
THINKING to ACTING for tool calls, and then a `terminate` ends it in OBSERVING). So each turn's
deltas are held, not yielded; when the run next asks the model (an edge into the phase that makes
the reply), the held turn was not the last and is dropped; when an edge reaches a final state, the
held turn is the one that ended the run, and its deltas are yielded just before that edge. Deltas of
an attempt that failed mid-stream are dropped too, when a retry's start again. Every other event is
yielded as it happens.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from typing import Protocol

from ..fsm.machine import MachineTable, Payload
from ..run.events import AgentEvent, Delta, EventListener, TextDelta, ToolCallDelta, Transition
from ..run.result import RunResult

__all__ = ["FinalTurn", "Streamed", "stream_run"]


class Streamed(Protocol):
    """What `stream_run` needs of an agent: its table and its events."""

    @property
    def table(self) -> MachineTable: ...

    def on_event(self, callback: EventListener) -> Callable[[], None]: ...


async def stream_run(
    agent: Streamed, run: Callable[[], Awaitable[RunResult]], *, final_only: bool = False
) -> AsyncGenerator[AgentEvent | RunResult, None]:
    """Every event of `agent` while `run()` runs it, as each is emitted, then the `RunResult`
    (see the module for `final_only`)."""
    import asyncio

    queue: asyncio.Queue[AgentEvent | None] = asyncio.Queue()  # None: the run's task is done
    turn = FinalTurn(agent.table) if final_only else None
    unsubscribe = agent.on_event(queue.put_nowait)
    task = asyncio.ensure_future(run())
    task.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        while (event := await queue.get()) is not None:
            for passed in turn.passed(event) if turn is not None else (event,):
                yield passed
        result = task.result()  # raises what the run raised (a run refused before it started)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)  # it ends `cancelled` before we go on
        unsubscribe()
    yield result


class FinalTurn:
    """The `final_only` filter: holds each turn's deltas until the machine has decided the edge
    after the turn, and lets through only those of the turn that ends the run."""

    def __init__(self, table: MachineTable) -> None:
        self.asks = frozenset(s.name for s in table.states if Payload.REPLY in s.produces)
        """The states that ask the model (THINKING): entering one starts a new turn."""
        self.finals = frozenset(s.name for s in table.states if s.final is not None)
        self.held: list[Delta] = []

    def passed(self, event: AgentEvent) -> Iterable[AgentEvent]:
        """What the iterator yields for `event`: nothing (a delta held, or dropped), the event,
        or the held turn and then the event (an edge into a final state)."""
        if isinstance(event, TextDelta | ToolCallDelta):
            if self.held and self.held[-1].attempt != event.attempt:
                self.held.clear()  # that attempt failed mid-stream; this one starts the reply again
            self.held.append(event)
            return ()
        if isinstance(event, Transition):
            if event.dest in self.asks:
                self.held.clear()
            elif event.dest in self.finals:
                released, self.held = self.held, []
                return (*released, event)
        return (event,)
