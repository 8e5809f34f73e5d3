"""`EventSource`: the listeners of an agent's events, and the queue that keeps their order.

Kept apart from the engine (`BaseAgent`) because it is plumbing: the engine
only calls `_emit` (every `Transition`, `LLMCall` and `Edit` goes through it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from ..events import AgentEvent, Transition

__all__ = ["EventListener", "EventSource", "TransitionListener"]

TransitionListener = Callable[[Transition], None]
EventListener = Callable[[AgentEvent], None]


class EventSource:
    """Delivers an agent's events to `on_transition` and `on_event` listeners, in order."""

    __slots__ = ("_event_listeners", "_listeners", "_queue")  # see `BaseAgent.__slots__`

    def _init_events(self) -> None:
        self._listeners: list[TransitionListener] = []
        self._event_listeners: list[EventListener] = []
        self._queue: deque[AgentEvent] = deque()

    def on_transition(self, callback: TransitionListener) -> Callable[[], None]:
        """Call `callback` with every `Transition`; returns a function that unsubscribes."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback)

    def on_event(self, callback: EventListener) -> Callable[[], None]:
        """Call `callback` with every `Transition`, `LLMCall` and `Edit`, in order; returns an unsubscribe."""
        self._event_listeners.append(callback)
        return lambda: self._event_listeners.remove(callback)

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
        queue.append(record)
        if len(queue) > 1:
            return
        try:
            while queue:
                current = queue[0]
                if isinstance(current, Transition):
                    for listener in tuple(self._listeners):
                        listener(current)
                for any_listener in tuple(self._event_listeners):
                    any_listener(current)
                queue.popleft()
        finally:
            queue.clear()
