"""`BaseAgent`: the engine. `run()` and `iter()` only drive the machine.

The engine loop is: look up the current state in the table; if it is a
phase, await its action (the I/O: LLM, tools), then fire its `done` trigger
and let the table's guards pick the edge. Every edge, including `start`,
`fail`, `cancel` and `reset`, goes through `_fire` (see `firing`), the one place
that builds the `Transition` event, logs it and hands it to listeners. Other events of a
run (`LLMCall`, `Edit`) go through `_emit`, to the same `on_event` listeners,
so a tracer sees everything in the order it happened.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Awaitable
from time import perf_counter
from typing import TYPE_CHECKING, Any, cast

from ..errors import AgentBusyError, PauseRun
from ..fsm.machine import MachineTable, StateSpec
from ..memory import Memory
from ..messages import Message, ToolCall
from ..run.events import Edit, Transition
from ..run.result import AgentState, RunResult
from ..run.state import RunState
from . import edits, firing, outcome, resuming
from .event_source import EventListener, EventSource, TransitionListener
from .options import AgentOptions
from .table import AGENT_TABLE

if TYPE_CHECKING:
    from ..recording.checkpoint import Checkpointer
    from ..recording.trace import TracePath

__all__ = ["BaseAgent", "EventListener", "TransitionListener"]

_TOP_LEVEL = {"IDLE": AgentState.IDLE, "FINISHED": AgentState.FINISHED, "ERROR": AgentState.ERROR}


def _cancellation() -> tuple[type[BaseException], ...]:
    """What ends a phase as a cancellation (asyncio, a third of `import agentfsm`, loads here)."""
    import asyncio  # loaded already: a phase runs in an event loop

    return (asyncio.CancelledError, GeneratorExit)


class BaseAgent(EventSource, ABC):
    """An agent whose life is the machine in `table`.

    Subclasses implement the three phases (`think`, `act`, `observe`) and may
    extend `table` with states and edges of their own.
    """

    # Slots: CPython keeps an instance dict compact only up to 30 attributes (past that, reads
    # and construction cost more); this leaves that room to subclasses (see BENCHMARKS.md).
    __slots__ = (
        "__dict__",
        "_active",
        "_checkpointer",
        "_entered_at",
        "_paused",
        "_yields",
        "last_result",
        "memory",
        "name",
        "options",
        "phase_running",
        "run_state",
    )
    table: MachineTable = AGENT_TABLE
    """The machine; an instance may switch to an extension of its class's table (approvals do)."""
    paused_edits: tuple[Edit, ...] = ()
    """Edits made while the run was paused (approvals), for the trace `resume(trace=...)` appends to."""

    def __init__(
        self,
        *,
        name: str | None = None,
        memory: Memory | None = None,
        max_steps: int = AgentOptions.max_steps,
        stuck_limit: int | None = AgentOptions.stuck_limit,
        duplicate_threshold: int = AgentOptions.duplicate_threshold,
        finish_on_answer: bool = AgentOptions.finish_on_answer,
    ) -> None:
        """The options are `AgentOptions`' (documented and checked there)."""
        options = AgentOptions(
            max_steps=max_steps,
            stuck_limit=stuck_limit,
            duplicate_threshold=duplicate_threshold,
            finish_on_answer=finish_on_answer,
        )
        self._init_agent(options, name=name, memory=memory)

    def _init_agent(self, options: AgentOptions, *, name: str | None, memory: Memory | None) -> None:
        """The constructor's work once the options are a checked record. A subclass with options
        of its own builds its record (a subclass of `AgentOptions`) and calls this instead of
        `BaseAgent.__init__`, so each option is checked once, where it is declared."""
        self.options = options
        """The agent's options; `trace_config()`, checkpoints, replay and resume read them."""
        self.name = name or type(self).__name__.removesuffix("Agent").lower() or "agent"
        self.memory = memory if memory is not None else Memory()
        self.run_state = RunState(state=self.table.initial)
        self.last_result: RunResult | None = None
        self._init_events()
        self._active = False
        self.phase_running = False
        """True while a phase's action is awaited (edits wait for it to finish)."""
        self._entered_at = perf_counter()
        self._checkpointer: Checkpointer | None = None
        self._yields = False
        self._paused: str | None = None

    # -- the options, by name (read-only: replace `options` to change them) ----------------

    @property
    def max_steps(self) -> int:
        return self.options.max_steps

    @property
    def stuck_limit(self) -> int | None:
        return self.options.stuck_limit

    @property
    def duplicate_threshold(self) -> int:
        return self.options.duplicate_threshold

    @property
    def finish_on_answer(self) -> bool:
        return self.options.finish_on_answer

    # -- what callers read ------------------------------------------------------

    @property
    def fsm_state(self) -> str:
        """The machine's leaf state (``"THINKING"``, ...); `transitions` reads and writes this."""
        return self.run_state.state

    @fsm_state.setter
    def fsm_state(self, value: str) -> None:
        self.run_state.state = value

    @property
    def state(self) -> AgentState:
        """The top-level state: IDLE, RUNNING, FINISHED or ERROR."""
        top = _TOP_LEVEL.get(self.run_state.state)
        return top if top is not None else AgentState.RUNNING

    @property
    def phase(self) -> str | None:
        """The current phase (``"THINKING"``, ``"ACTING"``, ``"OBSERVING"``, ...), or None."""
        return None if self.run_state.state in _TOP_LEVEL else self.run_state.state

    @property
    def current_step(self) -> int:
        return self.run_state.step

    @property
    def pending_approval(self) -> list[ToolCall]:
        """While the run is paused for approval: the calls waiting for a decision (none here)."""
        return []

    # -- edits between steps (see `edits`): in ACTING the pending calls, in OBSERVING a result

    replace_pending_calls = edits.replace_pending_calls
    edit_observation = edits.edit_observation

    # -- driving the machine --------------------------------------------------------

    async def run(
        self, request: str, *, trace: TracePath | None = None, checkpoint: TracePath | None = None
    ) -> RunResult:
        """Run the machine from `request` to FINISHED or ERROR, or a pause (`result.paused`); say why.

        Errors inside a phase end the run in ERROR (the result names them);
        cancellation ends it in ERROR with `cancelled` and is re-raised.
        `trace`: a file to write the run's JSON Lines trace to (see `agentfsm.recording.trace`).
        `checkpoint`: a file rewritten after every transition and tool call, for `resume`
        (see `agentfsm.recording.checkpoint`).
        """
        self._check_startable()
        return await self._consume(request, self._checkpointer_for(checkpoint), trace)

    async def resume(
        self, checkpoint: TracePath | None = None, *, trace: TracePath | None = None
    ) -> RunResult:
        """Continue a run to its end: the paused one (no `checkpoint`), or the one saved in `checkpoint`.

        A paused run (`result.paused`, e.g. awaiting approval) continues in place; its
        checkpoint, if it had one, keeps being written, and `trace` (the run's trace file)
        is appended to. From a `checkpoint` file (written by `run(..., checkpoint=...)`),
        the agent must be built as the one that wrote it (same class and options; the
        model may differ), else `CheckpointError`; `trace` is not accepted there, since a
        trace starts at a run's `start` edge. A finished run's checkpoint gives back its
        result and runs nothing.
        """
        if checkpoint is not None and trace is not None:
            raise ValueError(
                "`trace` continues a paused run's trace; a run resumed from a checkpoint has none"
            )
        return await self._consume(None, self._prepare_resume(checkpoint), trace)

    def iter(self, request: str, *, checkpoint: TracePath | None = None) -> AsyncGenerator[Transition, None]:
        """Run step by step: yields one `Transition` per edge; the run advances between yields."""
        self._check_startable()
        return self._drive(request, self._checkpointer_for(checkpoint))

    def resume_iter(self, checkpoint: TracePath | None = None) -> AsyncGenerator[Transition, None]:
        """`resume`, step by step. A checkpoint is read and checked at once (`CheckpointError`).

        The run continues in its state: a phase runs its action again (THINKING asks
        the model again; ACTING runs only the calls not recorded as completed, see
        `ToolCallAgent._run_once`; OBSERVING records the observations).
        """
        return self._drive(None, self._prepare_resume(checkpoint))

    # -- pausing and resuming (see `resuming`)

    cancel = resuming.cancel
    _check_startable = resuming.check_startable
    _checkpointer_for = resuming.checkpointer_for
    _prepare_resume = resuming.prepare_resume

    def save_checkpoint(self) -> None:
        """Write the checkpoint now, if this run has one (phases call it after each tool call)."""
        if self._checkpointer is not None:
            self._checkpointer.write()

    def _check_idle(self) -> None:
        if self._active:
            raise AgentBusyError(
                f"agent {self.name!r} is already running ({self.fsm_state}); "
                "await the run in progress, or use another agent instance"
            )

    def _consume(
        self, request: str | None, checkpointer: Checkpointer | None, trace: TracePath | None
    ) -> Awaitable[RunResult]:
        """The run to its end, written to `trace` if given (a plain function: an untraced run
        awaits the engine loop itself, one coroutine less)."""
        return (
            self._run_to_end(request, checkpointer)
            if trace is None
            else self._traced(request, checkpointer, trace)
        )

    async def _traced(
        self, request: str | None, checkpointer: Checkpointer | None, trace: TracePath
    ) -> RunResult:
        from ..recording.trace import TraceWriter

        with TraceWriter(trace, self, append=request is None):
            return await self._run_to_end(request, checkpointer)

    async def _drive(
        self, request: str | None, checkpointer: Checkpointer | None
    ) -> AsyncGenerator[Transition, None]:
        """The engine loop, step by step (`iter()`): start a run on `request` (None: continue
        the current one), then run each phase's action and fire its `done` trigger until a
        state has no action, or an action pauses the run, yielding each transition."""
        self._enter(checkpointer, yields=True)
        try:
            if request is not None:
                if self.fsm_state != self.table.initial:
                    yield cast(Transition, self._fire("reset"))
                self._open_run(request)
                yield cast(Transition, self._fire("start"))
            while (spec := self.table.by_name[self.fsm_state]).action is not None:
                transition, stop = await self._advance(spec)
                if transition is not None:  # None: the run paused
                    yield transition
                if stop:
                    break
        except GeneratorExit:
            # The consumer stopped iterating mid-run: treat it as a cancellation.
            if self.phase is not None:
                self._abort("cancel", "CancelledError: iteration stopped before the run ended")
            raise
        finally:
            if (ended := self._leave()) is not None:
                await self.on_run_end(ended)

    async def _run_to_end(self, request: str | None, checkpointer: Checkpointer | None) -> RunResult:
        """The same loop as `_drive`, for `run()` and `resume()`: nobody reads the transitions
        between steps, so no generator (and no `Transition` unless a listener or the logger wants it)."""
        self._enter(checkpointer, yields=False)
        try:
            table = self.table
            if request is not None:
                if self.run_state.state != table.initial:
                    self._fire("reset")
                self._open_run(request)
                self._fire("start")
            by_name = table.by_name
            while (spec := by_name[self.run_state.state]).action is not None:
                if (await self._advance(spec))[1]:
                    break
        finally:
            if (ended := self._leave()) is not None:
                await self.on_run_end(ended)
        assert self.last_result is not None
        return self.last_result

    def _enter(self, checkpointer: Checkpointer | None, *, yields: bool) -> None:
        self._check_idle()
        self._active = True
        self._yields = yields
        self._checkpointer = checkpointer
        self._paused = None
        self.paused_edits = ()

    def _leave(self) -> RunResult | None:
        """Close the engine loop; the result of a run that ended in it, whose `on_run_end` is due."""
        ended = self._finish() if self._active else None
        if self._paused is None:
            self._checkpointer = None  # kept while paused: `resume()` goes on writing it
        self._yields = False
        return ended

    async def _close(self) -> None:
        """Close a run ended outside the engine loop (a cancellation), `on_run_end` included."""
        if (ended := self._finish()) is not None:
            await self.on_run_end(ended)

    def _open_run(self, request: str) -> None:
        run = self.run_state
        if run.run_id:  # a run was opened on it: each run starts a new `RunState` (results keep theirs)
            run = self.run_state = RunState(state=run.state)
        run.run_id, run.request = os.urandom(6).hex(), request
        self.memory.add_request(Message.user_message(request))

    async def _advance(self, spec: StateSpec) -> tuple[Transition | None, bool]:
        """Run the phase `spec`, then fire its `done` trigger (or `fail`, when it raised). The
        second item is True when the loop must stop: the run failed, or paused (`PauseRun`:
        no edge, the machine stays). Cancellation ends the run in ERROR and propagates."""
        action = spec.action
        assert action is not None and spec.done is not None
        try:
            self.phase_running = True
            await action(self)
        except PauseRun as pause:
            self._paused = pause.reason
            return None, True
        except _cancellation():  # evaluated only when the phase raised
            self._abort("cancel", "CancelledError: the run was cancelled")
            await self._close()
            raise
        except Exception as exc:  # a phase failed: the run ends in ERROR, never crashes
            self.phase_running = False
            return self._abort("fail", f"{type(exc).__name__}: {exc}"), True
        finally:
            self.phase_running = False
        return self._fire(spec.done), False

    def reset(self, clear_memory: bool = False) -> None:
        """Back to IDLE from FINISHED or ERROR (a logged edge). Memory stays unless `clear_memory`."""
        if self._active:
            raise AgentBusyError(f"agent {self.name!r} is running; `reset()` is allowed only between runs")
        self._check_startable()
        if self.fsm_state != self.table.initial:
            self._fire("reset")
        if clear_memory:
            self.memory.clear()

    # -- the phases (subclasses) ------------------------------------------------------

    @abstractmethod
    async def think(self) -> None:
        """Decide what to do next: set `run.reply` and `run.pending_calls`."""

    @abstractmethod
    async def act(self) -> None:
        """Execute `run.pending_calls`; set `run.observations`."""

    @abstractmethod
    async def observe(self) -> None:
        """Record `run.observations` in memory and update stuck detection."""

    async def on_run_end(self, result: RunResult) -> None:
        """Hook awaited after every run, however it ended (release per-run resources here)."""

    def trace_config(self) -> dict[str, Any]:
        """What a trace's header and a checkpoint record of the agent (JSON values, never secrets):
        its options, and what its parts add (subclasses add theirs)."""
        return {**self.options.to_json(), "max_messages": self.memory.max_messages}

    # -- internals ----------------------------------------------------------------------

    _finish = outcome.finish
    _fire = firing.fire
    _abort = firing.abort
