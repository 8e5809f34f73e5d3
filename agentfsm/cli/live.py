"""The live view of `agentfsm run` on a terminal: where the machine is, what it costs, each tool call,
and a streaming model's text as it arrives.

A listener for the engine's events, drawn with rich (the `live` extra) on
stderr, so stdout keeps only the command's result. The CLI shows it only
when stderr is a terminal and `--json` is off; a run without a terminal
prints nothing of it.

Why one console: the status line is redrawn in place, so anything else
written to the terminal while it is shown must go through the same rich
`Console`, or it lands in the middle of the line being redrawn. The view
therefore lends `log_stream` to the command's log handler, and rich's `Live`
catches what dependencies print to stdout and stderr. The status is a
renderable read at every refresh (eight a second), so the elapsed time and
the spinner move while the model thinks, and every event updates it.

A retry of the model call (`LLMRetry`) prints a line as it happens (the error and the wait), and
the status counts the wait down ("retrying in 1.4 s after HTTP 503"), then says which attempt the
model is on, until the call returns.

Each kind of event has its own branch in `__call__`, and the status its own
parts in `_Status.__rich__`: a new kind of event (text as it streams in,
say) is one more branch and one more part.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TextIO, cast

from ..fsm.machine import MachineTable, Payload
from ..run.events import AgentEvent, LLMCall, LLMRetry, TextDelta, Transition, TransitionListener
from ..run.state import RunState

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

__all__ = ["LiveView", "Watched"]


class Watched(Protocol):
    """What the view reads of an agent or a flow: where its machine is, and its run's figures."""

    @property
    def fsm_state(self) -> str: ...

    @property
    def run_state(self) -> RunState: ...

    table: MachineTable

    def on_transition(self, callback: TransitionListener) -> Callable[[], None]: ...


class LiveView:
    """Shows the state, step of max, elapsed time, tokens and cost so far, and a line per tool call.

    Use as a context manager around the run. `steps`: the agents a flow runs its steps on,
    whose tool calls are shown too; a model with a `plan` (a flow) has it drawn under its state.
    """

    def __init__(self, agent: Watched, *, console: Any = None, steps: Iterable[Watched] = ()) -> None:
        from rich.console import Console
        from rich.file_proxy import FileProxy
        from rich.live import Live

        self.agent = agent
        self.console: Console = console if console is not None else Console(stderr=True)
        self.state = agent.fsm_state
        """The state the last transition entered (read from the event, which the agent's own
        attribute may not have caught up with when listeners are called)."""
        self.started = time.monotonic()
        self.model_calls_seen = 0
        self._text, self._attempt = "", 1
        """The end of the model's text of this turn so far, while a streaming model writes it."""
        self._retry: tuple[LLMRetry, float] | None = None
        """The last retry of the model call in flight, and when (`time.monotonic()`) it ends waiting."""
        self._status_view = _Status(self)
        self._live = Live(self._status_view, console=self.console, transient=True, refresh_per_second=8)
        self.log_stream = cast("TextIO", FileProxy(self.console, self.console.file))
        """A stream for log lines: each complete line is printed above the status, never into it."""
        steps = list(steps)
        self._tables = {getattr(w, "name", ""): w.table for w in (*steps, agent)}
        self._shown: set[str] = set()
        """The ids of the tool calls shown (or asked about) so far."""
        self._unsubscribe = [_subscribe(agent, self), *(_subscribe(other, self) for other in steps)]

    def __enter__(self) -> LiveView:
        self.started = time.monotonic()
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
            self._live.start(refresh=True)

    def __call__(self, event: AgentEvent) -> None:
        """One event of the run (or of a flow's step agents): print what it adds, redraw the status."""
        if isinstance(event, TextDelta):
            # A retried attempt's text starts again; the view shows the end of it.
            text = event.text if event.attempt != self._attempt else self._text + event.text
            self._text, self._attempt = text[-400:], event.attempt
        elif isinstance(event, LLMRetry):
            self._retry = (event, time.monotonic() + event.wait_s)
            self.console.print(
                f"[yellow]↻[/] attempt {event.attempt} failed: {_escaped(event.error, 160)}; "
                f"retrying in {event.wait_s:.1f} s",
                highlight=False,
            )
        elif isinstance(event, Transition):
            self._text, self._retry = "", None
            if event.agent == getattr(self.agent, "name", event.agent):
                self.state = event.dest
            # Each call once: the edge out of a pause carries the calls again, and on the edge into
            # one the question shows them (an approval), so only a call not seen yet is printed,
            # and not on its way into a pause.
            into_pause = self._is_pause(event.agent, event.dest)
            for call in event.tool_calls:
                if call.id in self._shown:
                    continue
                self._shown.add(call.id)
                if not into_pause:
                    self.console.print(
                        f"[cyan]→[/] {call.name}({_escaped(call.arguments, 100)})", highlight=False
                    )
            for obs in event.observations:
                mark = "[red]✗[/]" if obs.is_error else "[green]✓[/]"
                self.console.print(
                    f"{mark} {obs.call.name} ({obs.duration_s * 1000:.0f} ms): {_escaped(obs.content, 100)}",
                    highlight=False,
                )
        elif isinstance(event, LLMCall):
            self.model_calls_seen += 1
            self._retry = None
        self._live.refresh()

    def _is_pause(self, agent: str, state: str) -> bool:
        table = self._tables.get(agent, self.agent.table)
        spec = table.by_name.get(state)
        return spec is not None and spec.pause

    def status_line(self) -> str:
        """The status line (rich markup): state, step of max, elapsed, tokens, cost, tool calls;
        a flow's plan under it."""
        agent, run = self.agent, self.agent.run_state
        usage = run.usage
        cost = "" if usage.cost_usd is None else f" · ${usage.cost_usd:.4f}"
        max_steps = getattr(agent, "max_steps", None)  # a flow has none: its steps are its plan's
        of = "" if max_steps is None else f"/{max_steps}"
        doing = self.doing()
        status = (
            f"[bold]{self.state}[/] · step {run.step}{of} · {time.monotonic() - self.started:.1f} s · "
            f"{doing + ' · ' if doing else ''}"
            f"{usage.input_tokens} in / {usage.output_tokens} out tokens{cost} · "
            f"{usage.tool_calls} tool calls"
        )
        from rich.markup import escape

        if self._text:
            flat = " ".join(self._text.split())
            status += "\n" + escape(flat if len(flat) <= 100 else "…" + flat[-99:])
        plan = getattr(agent, "plan", None)  # a flow's plan, with each step's status
        if plan is not None:
            status += "\n" + escape(plan.render())
        return status

    def doing(self) -> str:
        """What the run waits for in its current state, read from the state's role: the model (a
        phase that produces the reply), a person (a pause), or nothing (a final state)."""
        spec = self.agent.table.by_name.get(self.state)
        if spec is None or spec.final is not None or not spec.is_phase:
            return ""
        if spec.pause:
            return "waiting for an answer"
        if Payload.REPLY in spec.produces:
            return self._waiting_for_the_model()
        return "working"

    def _waiting_for_the_model(self) -> str:
        if self._retry is None:
            return "waiting for the model"
        retry, until = self._retry
        left = until - time.monotonic()
        if left > 0:
            why = f"HTTP {retry.status_code}" if retry.status_code is not None else retry.error_type
            return f"retrying in {left:.1f} s after {why}"
        return f"waiting for the model (attempt {retry.attempt + 1})"


class _Status:
    """The live region: a spinner while the run works, then the status line. Rendered anew at
    every refresh, so the figures and the elapsed time are always the current ones."""

    def __init__(self, view: LiveView) -> None:
        from rich.spinner import Spinner

        self.view = view
        self.spinner = Spinner("dots")

    def __rich__(self) -> RenderableType:
        from rich.table import Table
        from rich.text import Text

        text = Text.from_markup(self.view.status_line())
        if not self.view.doing():
            return text
        row = Table.grid(padding=(0, 1))
        row.add_row(self.spinner, text)
        return row


def _subscribe(source: Any, view: LiveView) -> Callable[[], None]:
    """Every event of `source` when it offers them all (agents), else its transitions."""
    on_event = getattr(source, "on_event", None)
    if on_event is not None:
        unsubscribe: Callable[[], None] = on_event(view)
        return unsubscribe
    unsubscribe = source.on_transition(view)
    return unsubscribe


def _escaped(text: str, width: int) -> str:
    from rich.markup import escape

    text = " ".join(text.split())
    return escape(text if len(text) <= width else text[: width - 1] + "…")
