"""Run observers: what watches every run of every agent and flow in the process, once installed.

A trace writer or a checkpointer is asked for per run (`run(trace=...)`); an exporter of
spans is installed once for the whole process (`agentfsm.instrument()`), as OpenTelemetry's
own tracer provider is, and then sees runs it was never handed. This is that one hook: an
observer is called when a run's driver is made, subscribes what it needs to the run's
event stream (`on_event`), and returns the function that unsubscribes it, which the driver
calls when the run ends. Nothing is called, and nothing costs, while no observer is installed.

The observers are the process's, by design: a tuple replaced on each change, so a run that
is starting never sees a half-made list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["RunObserver", "observe_runs", "observers_of"]

RunObserver = Callable[[Any], Callable[[], None]]
"""Called with an agent or a flow (anything with `on_event`) whose run starts; returns the
function that stops observing it (called when that run ends)."""

_installed: list[tuple[RunObserver, ...]] = [()]


def observe_runs(observer: RunObserver) -> Callable[[], None]:
    """Install `observer` for every run started from now on; returns the function that removes it
    (runs already observed stay observed until they end)."""
    _installed[0] = (*_installed[0], observer)

    def remove() -> None:
        current = _installed[0]
        if observer in current:
            at = current.index(observer)
            _installed[0] = current[:at] + current[at + 1 :]

    return remove


def observers_of(model: Any) -> tuple[Callable[[], None], ...]:
    """Subscribe each installed observer to `model`'s new run; the closers that end them."""
    installed = _installed[0]
    if not installed:  # the usual case: a run pays one lookup
        return ()
    return tuple(observer(model) for observer in installed)
