"""`EventSource`: the listeners of an agent's events, and the queue that keeps their order.

Kept apart from the engine (`BaseAgent`) because it is plumbing: the run's
driver and the phases only call `emit` (every event of a run goes through it).

Why a listener's exception stops here: `emit` is called from the middle of
an edge (after the machine moved) and of a phase (between a tool's start and
its run). An exception let out there would leave the run half-way, with a
call in memory that nobody answers, and the agent busy. So `emit` keeps the
first exception a listener raised (a trace or checkpoint that cannot be
written, a user's callback with a bug) and delivers the event to everybody
else; the driver reads it with `listener_failure()` at the next point where
the run can end cleanly, and ends it in ERROR with that message.

A listener may return an awaitable (the checkpointer returns its journal's
fsync, which runs off the event loop): `flush_listeners()` awaits what they
returned, so a tool runs only once its start record is durable, and a run
returns only once its records are.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..errors import WrongValueError
from ..log import event
from ..run.events import AgentEvent, EventListener, Transition, TransitionListener

__all__ = ["EventSource"]

_L = TypeVar("_L")


class EventSource:
    """Delivers an agent's events to `on_transition` and `on_event` listeners, in order."""

    def __init__(self) -> None:
        # Tuples, replaced on (un)subscribing (`_listen`): a listener that subscribes another while
        # being called changes no sequence being iterated.
        self._transition_listeners: tuple[TransitionListener, ...] = ()
        self._event_listeners: tuple[EventListener, ...] = ()
        self.listening = False
        """Whether anybody listens (the driver and the phases build no event otherwise); kept by
        `_listen` with the listeners, as it is read several times an edge."""
        self._queue: deque[AgentEvent] = deque()
        self._failure: Exception | None = None
        """The first exception a listener raised that the driver has not taken yet."""
        self._pending: dict[int, Awaitable[object]] = {}
        """What listeners returned to be awaited (by identity: the same object once)."""

    def on_transition(self, callback: TransitionListener) -> Callable[[], None]:
        """Call `callback` with every `Transition`; returns a function that unsubscribes."""
        self._listen((*self._transition_listeners, callback), self._event_listeners)
        held = [callback]

        def unsubscribe() -> None:  # lets go of it too: see `on_event`
            self._listen(_without(self._transition_listeners, _taken(held)), self._event_listeners)

        return unsubscribe

    def on_event(self, callback: EventListener, *, first: bool = False) -> Callable[[], None]:
        """Call `callback` with every event (`Transition`, `LLMCall`, tool call started and
        completed, `Edit`), in order; returns a function that unsubscribes. `first`: before the
        listeners already there (a trace writer is, so that a trace is never behind its run's
        checkpoint: `agentfsm.recording.trace.cut_for_resume`)."""
        listeners = (callback, *self._event_listeners) if first else (*self._event_listeners, callback)
        self._listen(self._transition_listeners, listeners)
        held = [callback]

        def unsubscribe() -> None:
            # The function lets go of `callback` as well: a listener that keeps its own unsubscribe
            # (a trace writer, a checkpointer) would otherwise make a cycle with it that outlives
            # the run until the garbage collector finds it, and a durable worker runs thousands.
            self._listen(self._transition_listeners, _without(self._event_listeners, _taken(held)))

        return unsubscribe

    def _listen(self, transition: tuple[TransitionListener, ...], events: tuple[EventListener, ...]) -> None:
        """Make `transition` and `events` the listeners, and say whether anybody listens."""
        self._transition_listeners, self._event_listeners = transition, events
        self.listening = bool(transition or events)

    def emit(self, record: AgentEvent) -> None:
        """Deliver `record` to the listeners. An event raised by a listener (an edit made in an
        `on_transition` callback) waits until the current one reached everybody, so every
        listener sees the events in the same order."""
        if not self.listening:
            return
        queue = self._queue
        queue.append(record)
        if len(queue) > 1:
            return
        pending = self._pending
        try:
            while queue:
                current = queue[0]
                if isinstance(current, Transition):
                    for listener in self._transition_listeners:
                        try:
                            listener(current)
                        except Exception as exc:
                            self._failed(listener, exc)
                for any_listener in self._event_listeners:
                    try:
                        waiting = any_listener(current)
                    except Exception as exc:
                        self._failed(any_listener, exc)
                    else:
                        if waiting is not None:
                            pending[id(waiting)] = waiting
                queue.popleft()
        finally:
            queue.clear()

    def _failed(self, listener: object, exc: Exception) -> None:
        """Keep the first failure for the driver (later ones follow from it, or wait their turn)."""
        event("listener_failed", logging.ERROR, listener=repr(listener), error=f"{type(exc).__name__}: {exc}")
        if self._failure is None:
            self._failure = exc

    def listener_failure(self) -> Exception | None:
        """The first exception a listener raised since the last call (and forget it), or None."""
        failure, self._failure = self._failure, None
        return failure

    async def flush_listeners(self) -> None:
        """Await what the listeners returned for the events so far (a checkpoint's fsync); an
        exception one raises is kept as a listener's failure."""
        while self._pending:
            pending, self._pending = self._pending, {}
            for waiting in pending.values():
                if not hasattr(waiting, "__await__"):
                    continue  # a callback's incidental return value, not something to wait for
                try:
                    await waiting
                except Exception as exc:
                    self._failed(waiting, exc)

    async def recorded(self) -> None:
        """Wait until the events so far are recorded (`flush_listeners`), then raise the first
        exception a listener raised, if any: a phase calls this before an action that must not
        happen unrecorded (a tool call), so the phase fails instead."""
        await self.flush_listeners()
        failure = self.listener_failure()
        if failure is not None:
            raise failure


def _taken(held: list[_L]) -> _L:
    """The listener an unsubscribe function holds, which it holds no more; `WrongValueError` (a
    `ValueError`, as `list.remove` raises) when it was unsubscribed already."""
    if not held:
        raise WrongValueError("this listener is unsubscribed already; an unsubscribe works once")
    return held.pop()


def _without(listeners: tuple[_L, ...], callback: _L) -> tuple[_L, ...]:
    """`listeners` less the first `callback` (`ValueError` if absent, as `list.remove`)."""
    at = listeners.index(callback)
    return listeners[:at] + listeners[at + 1 :]
