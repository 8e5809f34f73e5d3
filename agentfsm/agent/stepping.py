"""Stepping through a run with breakpoints: the engine's `iter()` with a cursor.

`agent.iter(task)` already stops between transitions: the run advances only
when the caller asks for the next one. `Stepper` adds what a debugger needs
on top: one transition at a time (`step`), to the next think (`next`), or on
until a breakpoint (`resume`). A breakpoint names a state (pause when the
machine has entered it, before its phase does any work), an edge (pause
right after that edge fired) or a tool (pause when a call of it is about to
run: the edge that hands the calls to the phase running them). Between
transitions the caller reads and edits `agent.run_state` and `agent.memory`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from ..errors import WrongValueError
from ..fsm.machine import MachineTable
from ..run.events import Transition
from ..run.result import RunResult
from .base import BaseAgent

__all__ = ["Breakpoint", "Stepper"]


@dataclass(frozen=True, slots=True)
class Breakpoint:
    """Pause on entering `state`, after an edge (`trigger`, optionally `source` and `dest`), or
    before a call of the tool `tool` runs."""

    state: str | None = None
    trigger: str | None = None
    source: str | None = None
    dest: str | None = None
    tool: str | None = None

    def __post_init__(self) -> None:
        edge = self.trigger is not None or self.source is not None or self.dest is not None
        kinds = (self.state is not None) + edge + (self.tool is not None)
        if kinds == 0:
            raise WrongValueError(
                "a Breakpoint needs a `state`, an edge (`trigger`, `source`, `dest`) or a `tool`"
            )
        if kinds > 1:
            raise WrongValueError("a Breakpoint is on a state, on an edge or on a tool: one of them")

    def hit(self, transition: Transition) -> bool:
        if self.state is not None:
            return transition.dest == self.state
        if self.tool is not None:
            return any(call.name == self.tool for call in transition.tool_calls)
        return (
            self.trigger in (None, transition.trigger)
            and self.source in (None, transition.source)
            and self.dest in (None, transition.dest)
        )

    def check(self, table: MachineTable) -> None:
        """`WrongValueError` unless the states and the trigger named are `table`'s. A tool is not
        checked: an MCP server's tools are known only once it is connected."""
        known = set(table.by_name)
        for name in (self.state, self.source, self.dest):
            if name is not None and name not in known and name not in table.groups:
                raise WrongValueError(f"no state {name!r} in this agent's machine; states: {sorted(known)}")
        triggers = {edge.trigger for edge in table.edges}
        if self.trigger is not None and self.trigger not in triggers:
            raise WrongValueError(
                f"no trigger {self.trigger!r} in this agent's machine; triggers: {sorted(triggers)}"
            )

    def to_json(self) -> dict[str, str]:
        """The breakpoint as JSON: its fields that are set (`Breakpoint(**data)` makes it again)."""
        return {name: value for name, value in _fields(self) if value is not None}

    def __str__(self) -> str:
        if self.state is not None:
            return self.state
        if self.tool is not None:
            return f"tool {self.tool}"
        return f"{self.source or '*'} -> {self.dest or '*'}" + (f" on {self.trigger}" if self.trigger else "")


def _fields(breakpoint: Breakpoint) -> list[tuple[str, str | None]]:
    return [(name, getattr(breakpoint, name)) for name in ("state", "trigger", "source", "dest", "tool")]


class Stepper:
    """Drive `agent` through one run of `task`, transition by transition.

    The run starts on the first `step()`/`next()`/`resume()`, which pauses
    before the first transition as a debugger does. `close()` (or leaving
    `async with`) abandons an unfinished run: it ends `cancelled`.
    """

    def __init__(
        self,
        agent: BaseAgent,
        task: str,
        *,
        breakpoints: list[Breakpoint] | None = None,
        transitions: AsyncIterator[Transition] | None = None,
    ) -> None:
        """`transitions`: the run to step through, when it is not `agent.iter(task)` (a replay)."""
        self.agent = agent
        self.task = task
        self._source = transitions
        self.breakpoints: list[Breakpoint] = []
        for breakpoint in breakpoints or ():
            self.add_breakpoint(breakpoint)
        self.history: list[Transition] = []
        self._iter: AsyncIterator[Transition] | None = None
        self.finished = False

    @property
    def result(self) -> RunResult | None:
        """The run's result once it ended (None before)."""
        return self.agent.last_result if self.finished else None

    def add_breakpoint(self, breakpoint: Breakpoint) -> None:
        breakpoint.check(self.agent.table)
        self.breakpoints.append(breakpoint)

    def clear_breakpoint(self, breakpoint: Breakpoint) -> bool:
        """Remove `breakpoint`; False when it was not set."""
        if breakpoint in self.breakpoints:
            self.breakpoints.remove(breakpoint)
            return True
        return False

    async def step(self) -> Transition | None:
        """Advance by one transition; None once the run has ended."""
        if self.finished:
            return None
        if self._iter is None:
            self._iter = self._source if self._source is not None else self.agent.iter(self.task)
        try:
            transition = await anext(self._iter)
        except StopAsyncIteration:
            self.finished = True
            return None
        self.history.append(transition)
        if self.agent.table.by_name[transition.dest].final is not None:
            self.finished = True  # a final state: let the engine finish the run (result, hooks)
            async for _ in self._iter:
                raise AssertionError("the engine went on past a terminal state")
        return transition

    async def next(self) -> Transition | None:
        """Advance to the next time the machine enters the state a step begins in (THINKING:
        one full step), or to the end."""
        entry = self.agent.table.entry
        while (transition := await self.step()) is not None:
            if transition.dest == entry or self.finished:
                return transition
        return None

    async def resume(self) -> Transition | None:
        """Advance until a breakpoint is hit (the transition that hit it) or the run ends (None)."""
        while (transition := await self.step()) is not None:
            if any(bp.hit(transition) for bp in self.breakpoints):
                return transition
        return None

    async def close(self) -> None:
        if self._iter is not None and not self.finished:
            await self._iter.aclose()  # type: ignore[attr-defined]
            self.finished = True

    async def __aenter__(self) -> Stepper:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
