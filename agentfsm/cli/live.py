"""The live view of `agentfsm run` on a terminal: where the machine is, what it costs, each tool call,
and a streaming model's text as it arrives.

A listener for the engine's `Transition` events, drawn with rich (the `live`
extra) on stderr, so stdout keeps only the command's result. The CLI shows
it only when stderr is a terminal and `--json` is off; a run without a
terminal prints nothing of it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from ..run.events import TextDelta, Transition, TransitionListener
from ..run.state import RunState

__all__ = ["LiveView", "Watched"]


class Watched(Protocol):
    """What the view reads of an agent or a flow: where its machine is, and its run's figures."""

    @property
    def fsm_state(self) -> str: ...

    run_state: RunState

    def on_transition(self, callback: TransitionListener) -> Callable[[], None]: ...


class LiveView:
    """Shows the state, step of max, tokens and cost so far, and a line per tool call.

    Use as a context manager around the run. `steps`: the agents a flow runs its steps on,
    whose tool calls are shown too; a model with a `plan` (a flow) has it drawn under its state.
    """

    def __init__(self, agent: Watched, *, console: Any = None, steps: Iterable[Watched] = ()) -> None:
        from rich.console import Console
        from rich.live import Live

        self.agent = agent
        self._text, self._attempt = "", 1
        """The end of the model's text of this turn so far, while a streaming model writes it."""
        self.console = console if console is not None else Console(stderr=True)
        self._live = Live(self._status(), console=self.console, transient=True, refresh_per_second=8)
        self._unsubscribe = [agent.on_transition(self), *(other.on_transition(self) for other in steps)]
        on_event = getattr(agent, "on_event", None)  # a flow has no deltas of its own
        if on_event is not None:
            self._unsubscribe.append(on_event(self._on_delta))

    def __enter__(self) -> LiveView:
        self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.stop()
        for unsubscribe in self._unsubscribe:
            unsubscribe()

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """Stop drawing while someone is asked a question on the terminal."""
        self._live.stop()
        try:
            yield
        finally:
            self._live.start()

    def __call__(self, transition: Transition) -> None:
        for call in transition.tool_calls:
            self.console.print(f"[cyan]→[/] {call.name}({_clip(call.arguments, 100)})", highlight=False)
        for obs in transition.observations:
            mark = "[red]✗[/]" if obs.is_error else "[green]✓[/]"
            self.console.print(
                f"{mark} {obs.call.name} ({obs.duration_s * 1000:.0f} ms): {_clip(obs.content, 100)}",
                highlight=False,
            )
        self._text = ""
        self._live.update(self._status())

    def _on_delta(self, event: object) -> None:
        """A streaming model's text, drawn under the status as it arrives (a retried attempt's
        text starts again)."""
        if isinstance(event, TextDelta):
            text = event.text if event.attempt != self._attempt else self._text + event.text
            self._text = text[-400:]  # the view shows the end of it
            self._attempt = event.attempt
            self._live.update(self._status())

    def _status(self) -> str:
        agent, run = self.agent, self.agent.run_state
        usage = run.usage
        cost = "" if usage.cost_usd is None else f" · ${usage.cost_usd:.4f}"
        max_steps = getattr(agent, "max_steps", None)  # a flow has none: its steps are its plan's
        of = "" if max_steps is None else f"/{max_steps}"
        status = (
            f"[bold]{agent.fsm_state}[/] · step {run.step}{of} · "
            f"{usage.input_tokens} in / {usage.output_tokens} out tokens{cost} · "
            f"{usage.tool_calls} tool calls"
        )
        if self._text:
            from rich.markup import escape

            flat = " ".join(self._text.split())
            status += "\n" + escape(flat if len(flat) <= 100 else "…" + flat[-99:])
        plan = getattr(agent, "plan", None)  # a flow's plan, with each step's status
        if plan is not None:
            from rich.markup import escape

            status += "\n" + escape(plan.render())
        return status


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
