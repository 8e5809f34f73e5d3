"""`EventSource`: the listeners of an agent's events, and the queue that keeps their order.

Kept apart from the engine (`BaseAgent`) because it is plumbing: the engine
only calls `_emit` (every `Transition`, `LLMCall` and `Edit` goes through it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TypeVar

from ..run.events import AgentEvent, Transition

__all__ = ["EventListener", "EventSource", "TransitionListener"]

TransitionListener = Callable[[Transition], None]
EventListener = Callable[[AgentEvent], None]
_L = TypeVar("_L")


class EventSource:
    """Delivers an agent's events to `on_transition` and `on_event` listeners, in order."""

    __slots__ = ("_event_listeners", "_listeners", "_queue")  # see `BaseAgent.__slots__`

    def _init_events(self) -> None:
        # Tuples, replaced on (un)subscribing: a listener that subscribes another while being
        # called changes no sequence being iterated, and an agent nobody listens to allocates none.
        self._listeners: tuple[TransitionListener, ...] = ()
        self._event_listeners: tuple[EventListener, ...] = ()
        self._queue: deque[AgentEvent] | None = None  # made for the first event anybody hears

    def on_transition(self, callback: TransitionListener) -> Callable[[], None]:
        """Call `callback` with every `Transition`; returns a function that unsubscribes."""
        self._listeners += (callback,)

        def unsubscribe() -> None:
            self._listeners = _without(self._listeners, callback)

        return unsubscribe

    def on_event(self, callback: EventListener) -> Callable[[], None]:
        """Call `callback` with every `Transition`, `LLMCall` and `Edit`, in order; returns an unsubscribe."""
        self._event_listeners += (callback,)

        def unsubscribe() -> None:
            self._event_listeners = _without(self._event_listeners, callback)

        return unsubscribe

    @property
    def has_event_listeners(self) -> bool:
        """Whether anyone listens to `on_event` (phases skip building costly events otherwise)."""
        return bool(self._event_listeners)

    def _emit(self, record: AgentEvent) -> None:
        """Deliver `record` to the listeners. An event raised by a listener (an edit made in an
        `on_transition` callback) waits until the current one reached everybody, so every
        listener sees the events in the same order."""
        if not self._listeners and not self._event_listeners:
            return  # nobody listens: the common case of a plain run() costs nothing here
        queue = self._queue
        if queue is None:
            queue = self._queue = deque()
        queue.append(record)
        if len(queue) > 1:
            return
        try:
            while queue:
                current = queue[0]
                if isinstance(current, Transition):
                    for listener in self._listeners:
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
