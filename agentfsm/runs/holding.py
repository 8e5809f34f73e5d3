"""`Holding`: a managed run's breakpoints, and the place it waits when one is hit.

Why here and not in the stepper: an app's run is driven by its own task (`Runs`), and the person
who debugs it is on another request (a page, an API call). The stepper drives a run from the
caller's own loop; this is the other way round: the run goes on by itself and waits, between two
edges, until someone says `step` (one edge on, then wait again) or `proceed` (on to the next
breakpoint or the end). The run's agent awaits `Holding` after each edge into a phase
(`DrivenModel.hold`), before that phase's work: a held run has entered its state and done nothing
there yet, as the terminal debugger's stepper stops. Its task stays alive and keeps its place among
`max_active`; `cancel()` cancels the wait, and the run ends `cancelled` as it would in a phase.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from ..agent.stepping import Breakpoint
from ..errors import WrongPhaseError
from ..fsm.machine import MachineTable
from ..run.events import Transition

__all__ = ["Holding"]


class Holding:
    """The breakpoints of one run, and whether it waits at one (`held`). `on_hold(transition, why)`
    is told each time the run stops, `on_release()` each time it goes on (a run's event feed)."""

    def __init__(
        self,
        breakpoints: Sequence[Breakpoint] = (),
        *,
        on_hold: Callable[[Transition, str], None] = lambda transition, why: None,
        on_release: Callable[[], None] = lambda: None,
    ) -> None:
        self.breakpoints: tuple[Breakpoint, ...] = tuple(breakpoints)
        self.on_hold, self.on_release = on_hold, on_release
        self.held: Transition | None = None
        """The edge the run waits after (None: it does not wait)."""
        self.why: str | None = None
        """What held it: the breakpoint hit (``str(breakpoint)``), or ``"step"``."""
        self._stepping = False
        self._go: asyncio.Event | None = None

    def set(self, breakpoints: Sequence[Breakpoint], table: MachineTable | None = None) -> None:
        """Replace the breakpoints (each checked against `table`, when the run's machine is known)."""
        for breakpoint in breakpoints:
            if table is not None:
                breakpoint.check(table)
        self.breakpoints = tuple(breakpoints)

    async def __call__(self, transition: Transition) -> None:
        """The run's hold (`DrivenModel.hold`): wait here if a breakpoint is hit or a step is over."""
        hit = next((point for point in self.breakpoints if point.hit(transition)), None)
        if hit is None and not self._stepping:
            return
        self._stepping = False
        self.held, self.why = transition, "step" if hit is None else str(hit)
        go = self._go = asyncio.Event()
        self.on_hold(transition, self.why)
        try:
            await go.wait()
        finally:  # released (already cleared), or cancelled while held
            if self._go is go:
                self.held = self.why = self._go = None

    def step(self, run_id: str) -> None:
        """Let the held run take its next edge, then wait again."""
        self._release(run_id, "step")
        self._stepping = True

    def proceed(self, run_id: str) -> None:
        """Let the held run go on to its next breakpoint, or its end."""
        self._release(run_id, "proceed")

    def _release(self, run_id: str, verb: str) -> None:
        if self._go is None:
            raise WrongPhaseError(
                f"run {run_id!r} is not held at a breakpoint: `{verb}` goes on from one; set breakpoints "
                "first (`set_breakpoints`) and wait for `RunStatus.held`"
            )
        self._go.set()
        self.held = self.why = self._go = None  # at once: the run is on its way from here
        self.on_release()
