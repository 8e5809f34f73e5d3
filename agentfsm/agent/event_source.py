"""`EventSource`: the listeners of an agent's events, and the queue that keeps their order.

Kept apart from the engine (`BaseAgent`) because it is plumbing: the run's
driver and the phases only call `emit` (every event of a run goes through it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TypeVar

from ..run.events import AgentEvent, EventListener, Transition, TransitionListener

__all__ = ["EventSource"]

_L = TypeVar("_L")


class EventSource:
    """Delivers an agent's events to `on_transition` and `on_event` listeners, in order."""

    def __init__(self) -> None:
        # Tuples, replaced on (un)subscribing: a listener that subscribes another while being
        # called changes no sequence being iterated.
        self._transition_listeners: tuple[TransitionListener, ...] = ()
        self._event_listeners: tuple[EventListener, ...] = ()
        self._queue: deque[AgentEvent] = deque()

    def on_transition(self, callback: TransitionListener) -> Callable[[], None]:
        """Call `callback` with every `Transition`; returns a function that unsubscribes."""
        self._transition_listeners += (callback,)

        def unsubscribe() -> None:
            self._transition_listeners = _without(self._transition_listeners, callback)

        return unsubscribe

    def on_event(self, callback: EventListener) -> Callable[[], None]:
        """Call `callback` with every event (`Transition`, `LLMCall`, tool call started and
        completed, `Edit`), in order; returns a function that unsubscribes."""
        self._event_listeners += (callback,)

        def unsubscribe() -> None:
            self._event_listeners = _without(self._event_listeners, callback)

        return unsubscribe

    @property
    def listening(self) -> bool:
        """Whether anybody listens (the driver and the phases build no event otherwise)."""
        return bool(self._transition_listeners or self._event_listeners)

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
        try:
            while queue:
                current = queue[0]
                if isinstance(current, Transition):
                    for listener in self._transition_listeners:
                        listener(current)
                for any_listener in self._event_listeners:
                    any_listener(current)
                queue.popleft()
        finally:
            queue.clear()


def _without(listeners: tuple[_L, ...], callback: _L) -> tuple[_L, ...]:
    """`listeners` less the first `callback` (`ValueError` if absent, as `list.remove`)."""
    at = listeners.index(callback)
    return listeners[:at] + listeners[at + 1 :]
