"""What the run's driver and the recorders see of whatever they drive or record.

The driver (`agentfsm.run.driver`) and the recorders (`agentfsm.recording`)
sit below the agents in the package's layers: they never import an agent
class. They type against these protocols, which `BaseAgent` satisfies, and
which a second machine built the same way (a planning flow) can satisfy too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from ..fsm.machine import MachineTable, StateSpec
from ..memory import Memory
from ..messages import ToolCall
from ..model.base import LLMResponse
from .events import AgentEvent, Edit, EventListener, Transition
from .result import AgentState, RunResult, StopReason
from .state import Observation, RunState

__all__ = ["Driven", "Hold", "Recorded", "StepPayloads"]

Hold = Callable[[Transition], Awaitable[None]]
"""What a run waits on after each edge into a phase, before that phase's work: a breakpoint held
by an app (`agentfsm.runs`) returns once someone says go on. Cancelling the run cancels the wait."""


class StepPayloads(Protocol):
    """What a step hands from phase to phase, under the table's payload roles (`Payload`): a
    transition into or out of a phase carries the ones its roles name."""

    @property
    def reply(self) -> LLMResponse | None: ...

    @property
    def pending_calls(self) -> Sequence[ToolCall]: ...

    @property
    def observations(self) -> Sequence[Observation]: ...


class Driven(Protocol):
    """A model the driver runs: its table and run state, and the hooks that are its own policy."""

    @property
    def name(self) -> str: ...

    @property
    def table(self) -> MachineTable: ...

    @property
    def run_state(self) -> RunState: ...

    fsm_state: str
    last_result: RunResult | None
    hold: Hold | None
    """Awaited after each edge into a phase (None: the run never waits between edges)."""

    @property
    def turn(self) -> StepPayloads | None:
        """The current step's payloads (None: a machine whose steps hand none, a flow)."""

    @property
    def listening(self) -> bool:
        """Whether anybody receives events (else the driver builds none)."""

    def emit(self, event: AgentEvent) -> None:
        """Deliver `event` to the listeners, in order (a listener's exception is kept, not raised)."""

    def listener_failure(self) -> Exception | None:
        """The first exception a listener raised since the last call, or None (and forget it)."""

    async def flush_listeners(self) -> None:
        """Await what the listeners still do for the events so far (a checkpoint's fsync)."""

    def open_run(self, request: str) -> None:
        """Start a new run on `request` (a new `RunState`, the request in memory)."""

    def interrupt(self) -> None:
        """The run ends outside its phases' control (fail, cancel): close what it left open."""

    def run_result(self, spec: StateSpec, paused: StopReason | str | None) -> RunResult:
        """The result of the run now in `spec`: ended there, or `paused` there for that reason."""

    async def on_run_end(self, result: RunResult) -> None:
        """Awaited after every run, however it ended."""


class Recorded(Protocol):
    """An agent a trace or a checkpoint records: what it is, how it is set up, what it holds."""

    @property
    def name(self) -> str: ...

    @property
    def table(self) -> MachineTable: ...

    @property
    def state(self) -> AgentState: ...

    @property
    def run_state(self) -> RunState: ...

    memory: Memory
    last_result: RunResult | None
    paused_edits: tuple[Edit, ...]

    def trace_config(self) -> dict[str, Any]:
        """The options a trace's header and a checkpoint record (JSON values, never secrets)."""

    def checkpoint_parts(self) -> dict[str, Any]:
        """What each checkpoint record holds beside the run state and memory (JSON values): a
        flow's plan and its agents; nothing for an agent."""

    def on_event(self, callback: EventListener, *, first: bool = False) -> Callable[[], None]:
        """Subscribe to every event (`first`: before the other listeners); returns the function
        that unsubscribes."""
