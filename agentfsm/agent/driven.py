"""`DrivenModel`: what an agent and a planning flow share as models the `RunDriver` runs.

Why a base of its own: `BaseAgent` and `PlanningFlow` are both a machine
(their table), one run's `RunState`, the last run's result and the driver of
the run in progress or paused; both report their leaf and top-level state
from the table's roles, start a run by replacing a paused run's driver, and
ask a model and report the call as an `LLMCall` event (an agent's think, a
flow's planner). Defined once, under both, an agent's run and a flow's look
the same to the driver, the recorders and the command line. What a run does
(the `Driven` hooks: `open_run`, `interrupt`, `run_result`, `on_run_end`) is
each subclass's own.

They share one lifecycle too: a run starts only when none is in progress or
paused; its checkpoint is leased off the event loop before it starts (a
second owner is refused); a paused run resumes in place, a saved one from its
checkpoint (leased, read, restored, then run from the state it was in); and
`cancel()` ends a paused run. What differs is behind four hooks: how a
checkpoint is read (`_open_checkpoint`), put back (`_restore`) and written
(`_checkpointer`), and how a trace is written (`_trace`).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import AbstractContextManager, aclosing
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import AgentBusyError, CheckpointError
from ..fsm.machine import MachineTable, StateSpec
from ..messages import Message
from ..model.base import ChatModel, LLMResponse, ToolChoice, streams
from ..model.retry_report import RetryNotice, retries_to, stop_retries
from ..recording.checkpoint import lease_checkpoint
from ..recording.files import RecordPath
from ..recording.lease import Lease
from ..recording.trace import cut_for_resume
from ..recording.writer import off_loop
from ..run.driver import RunDriver
from ..run.events import Edit, LLMCall, LLMCallStarted, LLMRetry, Transition
from ..run.observers import observers_of
from ..run.result import AgentState, RunResult, StopReason
from ..run.state import RunState
from ..run.view import Hold, StepPayloads
from .deltas import DeltaEmitter
from .event_source import EventSource

if TYPE_CHECKING:  # `import agentfsm` does not load asyncio: a run does, when it starts
    import asyncio

__all__ = ["DrivenModel"]


class DrivenModel(EventSource, ABC):
    """A machine in `table` with one run at a time, run by a `RunDriver`."""

    table: MachineTable
    """The machine; an instance may switch to an extension of its class's table."""
    paused_edits: tuple[Edit, ...] = ()
    built_by: dict[str, Any] | None = None
    """How the command line built it, when it did from the person's own code: ``{"factory":
    "MODULE:FUNCTION"}`` (`--agent`), or ``{"tools": [...]}`` (a built-in agent with `--tool`s).
    Recorded in its trace and checkpoint (`trace_config`), so `resume` and `replay` build it again."""
    hold: Hold | None = None
    """Awaited after each edge into a phase, before its work (an app's breakpoints: `agentfsm.runs`);
    None: the run never waits between edges."""
    """Edits made while the run was paused, for the trace a resume appends to."""
    name: str
    kind: ClassVar[str] = "agent"
    """What errors call the model: ``"agent"``, ``"flow"``."""
    run_state_class: ClassVar[type[RunState]] = RunState
    """The record of one run: `RunState`, or the subclass with what this kind of machine adds."""

    def _init_driven(self) -> None:
        """The state every run starts from: no listener, no run, the table's initial state."""
        EventSource.__init__(self)
        self.run_state = self.run_state_class(state=self.table.initial)
        self.last_result: RunResult | None = None
        self._run: RunDriver | None = None
        """The current run's driver, or the paused run's (None between runs)."""
        self._next_run_id: str | None = None
        """The id the next run takes (`run(..., run_id=...)`); None: a new one."""
        self._driving: asyncio.Task[Any] | None = None
        """The task awaiting the run in progress (`run()`, `resume()`), which `cancel()` cancels."""
        self._cancelled: asyncio.Future[None] | None = None
        """Set while `cancel()` waits for the run it cancelled to end."""

    @property
    def turn(self) -> StepPayloads | None:
        """The current step's payloads, for the transitions that carry them (none here)."""
        return None

    @property
    def fsm_state(self) -> str:
        """The leaf state (``"THINKING"``, ``"EXECUTING"``...); `transitions` reads and writes it."""
        return self.run_state.state

    @fsm_state.setter
    def fsm_state(self, value: str) -> None:
        self.run_state.state = value

    @property
    def state(self) -> AgentState:
        """The top-level state: IDLE, RUNNING, FINISHED or ERROR (a final state's declared one)."""
        return AgentState.in_table(self.table, self.run_state.state)

    @property
    def state_spec(self) -> StateSpec:
        """The current state's declaration in the table (its role, action, trigger)."""
        return self.table.by_name[self.run_state.state]

    @property
    def phase(self) -> str | None:
        """The current phase (``"THINKING"``, ``"EXECUTING"``, a pause...), or None."""
        spec = self.state_spec
        return spec.name if spec.is_phase else None

    @property
    def phase_running(self) -> bool:
        """True while a phase's action is awaited (edits wait for it to finish)."""
        return self._run is not None and self._run.phase_running

    @property
    def position(self) -> str:
        """Where the model is, for an error refusing an edit: its state, and whether its phase runs."""
        return f"{self.fsm_state} (its phase is running)" if self.phase_running else self.fsm_state

    # -- the lifecycle: start, resume, lease, restore, cancel -------------------------------

    async def _start(
        self,
        request: str,
        checkpoint: RecordPath | None,
        trace: Any,
        run_id: str | None = None,
        prepare: Callable[[], None] = lambda: None,
    ) -> RunResult:
        """A new run on `request` to its end or a pause: refused while a run is in progress or
        paused; `checkpoint` leased off the event loop first; `prepare()` (the run's own settings,
        an agent's deps) once it is sure to start; `trace` written around it; `run_id` its id."""
        self._check_startable()
        lease = None
        if checkpoint is not None:  # off the loop: see `lease_checkpoint`
            lease = await off_loop(lambda: lease_checkpoint(checkpoint), abandoned=Lease.release)
        try:
            if lease is not None:
                self._check_startable()  # again: another run may have started while it was leased
            prepare()
            driver = self._new_run(checkpoint, lease)
        except BaseException:
            if lease is not None:
                lease.release()
            raise
        with self._trace(trace, append=False):
            self._next_run_id = run_id
            try:
                return await self._driven(driver, request)
            finally:
                self._next_run_id = None  # taken by the run's start, or not at all
                self._drop_if_ended(driver)

    def _reset(self) -> None:
        """Back to the initial state from a final one, by the table's `reset` edge (logged): refused
        while a run is in progress or paused."""
        if self._run is not None and self._run.active:
            raise AgentBusyError(
                f"{self.kind} {self.name!r} is running; `reset()` is allowed only between runs"
            )
        self._check_startable()
        if self.fsm_state != self.table.initial:
            RunDriver(self).fire(self.table.reset)

    def _stepped(
        self, request: str, checkpoint: RecordPath | None, prepare: Callable[[], None] = lambda: None
    ) -> AsyncGenerator[Transition, None]:
        """A new run on `request`, step by step (`iter()`): one `Transition` per edge."""
        self._check_startable()
        prepare()
        return self._transitions(self._new_run(checkpoint), request)

    def _stepped_on(self, driver: RunDriver) -> AsyncGenerator[Transition, None]:
        """The resumed `driver`'s run, step by step (`resume_iter()`)."""
        self.paused_edits = ()
        return self._transitions(driver, None)

    async def _continue(self, driver: RunDriver, trace: Any) -> RunResult:
        """Run the resumed `driver` on to its end or a pause, `trace` (the paused run's) appended to."""
        with self._trace(trace, append=True):
            self.paused_edits = ()  # the trace has them now
            try:
                return await self._driven(driver, None)
            finally:
                self._drop_if_ended(driver)

    async def _driven(self, driver: RunDriver, request: str | None) -> RunResult:
        """`driver`'s run to its end or a pause, in this task, which `cancel()` may cancel: the run
        it ended is then this call's result, not a `CancelledError` (unless this task was also
        cancelled by someone else)."""
        import asyncio  # loaded: this runs in an event loop

        task = self._driving = asyncio.current_task()
        try:
            return await driver.run(request)
        except asyncio.CancelledError:
            if self._cancelled is None or task is None or task.uncancel() > 0:
                raise
            assert self.last_result is not None  # the run settled on its way out
            return self.last_result
        finally:
            self._driving = None
            if self._cancelled is not None:
                self._cancelled.set_result(None)
                self._cancelled = None

    async def _transitions(self, driver: RunDriver, request: str | None) -> AsyncGenerator[Transition, None]:
        """The driver's loop as `iter()` yields it: every transition, built for the caller."""
        try:
            async with aclosing(driver.steps(request, yields=True)) as steps:
                async for transition in steps:
                    assert transition is not None  # `yields`: the driver builds every one
                    await self.flush_listeners()  # its records are written (a checkpoint reads it back)
                    yield transition
        finally:
            self._drop_if_ended(driver)

    def _drop_if_ended(self, driver: RunDriver) -> None:
        """Forget `driver` once its run has ended (a paused run's is kept, to resume). The driver
        holds the model and the model its driver: let go, a model nobody holds any more is freed
        at once, with its memory and its last run, rather than by the garbage collector."""
        if self._run is driver and not driver.active and self.phase is None:
            driver.release()  # done when the run settled; a second call does nothing
            self._run = None

    async def _opened(self, checkpoint: RecordPath) -> tuple[Lease, dict[str, Any]]:
        """`checkpoint` leased and read for a resume (`_open_checkpoint`), off the event loop: a
        journal can be long, and see `lease_checkpoint`."""
        self._check_idle()
        return await off_loop(lambda: self._open_checkpoint(checkpoint), abandoned=_release_lease)

    def _restored_run(self, checkpoint: RecordPath, opened: tuple[Lease, dict[str, Any]]) -> RunDriver:
        """The driver of the run saved in `checkpoint`, put back (`_restore`) from what `opened`
        read under its lease; the lease is the new run's checkpointer's, or released on failure."""
        lease, data = opened
        try:
            self._check_idle()
            self._restore(data)
            driver = self._new_run(checkpoint, lease, data)
        except BaseException:
            lease.release()
            raise
        driver.restarted()
        return driver

    def _new_run(
        self, checkpoint: RecordPath | None, lease: Lease | None = None, saved: dict[str, Any] | None = None
    ) -> RunDriver:
        """The driver of a new run, with its checkpointer (a listener until the run ends), which
        leases the checkpoint first (`lease`: already leased): a second owner is refused here.
        `saved`: what a resumed run was restored from."""
        closers: tuple[Callable[[], None], ...] = ()
        if checkpoint is not None:
            closers = (self._checkpointer(checkpoint, lease, saved),)
        driver = self._start_driver(closers)
        self.paused_edits = ()
        return driver

    def _start_driver(self, closers: tuple[Callable[[], None], ...]) -> RunDriver:
        """The driver of a new run, in place of a paused run's (which stops being recorded); the
        process's run observers (an exporter of spans) watch it until it ends."""
        if self._run is not None:
            self._run.release()
        self._run = RunDriver(self, closers=(*closers, *observers_of(self)))
        return self._run

    async def _cancel(self, trace: Any = None) -> RunResult:
        """End the run for good, in ERROR with `cancelled`, and return its result: a paused run at
        once (releasing what it holds), a running one by cancelling the task that awaits it (its
        `run()` or `resume()` returns that result). The checkpoint keeps the end: a resume from it
        gives the result back and runs nothing, unlike a run stopped by its task's cancellation,
        Ctrl-C or a shutdown, which goes on from where it was. `trace`: the paused run's, which its
        end is appended to (a running run's own writer records its end)."""
        driver = self._run
        if driver is not None and driver.active:
            return await self._cancel_running()
        if driver is None or self.phase is None:
            raise AgentBusyError(f"{self.kind} {self.name!r} has no run to cancel (it is {self.fsm_state})")
        self._run = None
        self.run_state.cancelled_for_good = True
        with self._trace(trace, append=True):
            self.paused_edits = ()  # the trace has them now
            return await driver.cancel()

    async def _cancel_running(self) -> RunResult:
        import asyncio  # loaded: this runs in an event loop

        task = self._driving
        if task is None or task is asyncio.current_task():
            raise AgentBusyError(
                f"{self.kind} {self.name!r} runs in this task or is stepped (`iter()`); cancel it "
                "from another task, or stop iterating (`aclose()`) to end a stepped run"
            )
        if self._cancelled is None:
            self.run_state.cancelled_for_good = True  # carried by the checkpoint's record of the end
            self._cancelled = asyncio.get_running_loop().create_future()
            task.cancel(f"{self.kind} {self.name!r} cancelled by cancel()")
        await asyncio.shield(self._cancelled)
        assert self.last_result is not None
        return self.last_result

    def suspend(self) -> None:
        """Let go of the paused run without ending it, as a process killed at the pause would: its
        checkpoint keeps the pause and its lease is released, so a resume from it (here, by a model
        built the same way, or in another process) waits there again. For a host shutting down
        with paused runs (`agentfsm.runs.Runs`); this model has no run afterwards and is not
        reused (its state stays the pause's)."""
        driver = self._paused_run()
        self._run = None
        driver.release()

    def _check_idle(self) -> None:
        if self._run is not None and self._run.active:
            raise AgentBusyError(
                f"{self.kind} {self.name!r} is already running ({self.fsm_state}); "
                f"await the run in progress, or use another {self.kind} instance"
            )

    def _check_startable(self) -> None:
        """A new run may start: none is in progress, and none is paused."""
        self._check_idle()
        if self.phase is not None:
            raise AgentBusyError(
                f"{self.kind} {self.name!r} has a paused run (it waits in {self.fsm_state}); `resume()` "
                f"it, or `await {self.kind}.cancel()` to end it, before starting another"
            )

    def _paused_run(self) -> RunDriver:
        """The paused run's driver; `AgentBusyError` when there is none."""
        self._check_idle()
        if self._run is None or self.phase is None:
            raise AgentBusyError(
                f"{self.kind} {self.name!r} has no paused run to resume (it is {self.fsm_state}); "
                f"pass the checkpoint of the run to continue"
            )
        return self._run

    async def _cut_trace(self, trace: RecordPath, opened: tuple[Lease, dict[str, Any]]) -> None:
        """The trace of the run `opened` holds, cut back to where its checkpoint stands (off the
        loop, as the checkpoint was read), for a resume from the checkpoint that writes the same
        trace on (`cut_for_resume`); the checkpoint's lease is let go if that fails."""
        lease, data = opened
        run = data.get("run_state")
        try:
            if not isinstance(run, dict):
                raise CheckpointError("the checkpoint holds no run state to go on from")
            run_id, edges, edits = str(run.get("run_id")), int(run.get("edges", 0)), int(run.get("edits", 0))
            await off_loop(lambda: cut_for_resume(trace, run_id, edges, edits))
        except BaseException:
            lease.release()
            raise

    @abstractmethod
    def _open_checkpoint(self, path: RecordPath) -> tuple[Lease, dict[str, Any]]:
        """Lease the checkpoint at `path`, then read it for a resume (releasing the lease if that
        fails); `CheckpointError` naming what is wrong with it. Called off the event loop."""

    @abstractmethod
    def _restore(self, data: dict[str, Any]) -> None:
        """Put the run `data` holds (as `_open_checkpoint` read it) in place, after checking it
        was written by a model built as this one (`CheckpointError` otherwise)."""

    @abstractmethod
    def _checkpointer(
        self, path: RecordPath, lease: Lease | None, saved: dict[str, Any] | None
    ) -> Callable[[], None]:
        """Start writing the run to its checkpoint at `path` (`lease`: held already; `saved`:
        what a resumed run was restored from); returns what stops it when the run is over."""

    @abstractmethod
    def _trace(self, path: Any, *, append: bool) -> AbstractContextManager[object]:
        """The trace writer around a run (`append`: a paused run's trace goes on), or nothing."""

    async def ask_model(
        self,
        llm: ChatModel,
        messages: Sequence[Message],
        system_msgs: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        tool_choice: ToolChoice,
    ) -> LLMResponse:
        """One model call, reported as an `LLMCall` (a trace's ``llm`` record) when someone listens:
        its reply as the model sent it (replay gives it back to the same code), or its error,
        which is raised on. A model that streams hands its pieces to the run's event stream as
        they arrive (`DeltaEmitter`); the reply is the same whole either way. Each retry of the
        call is an `LLMRetry` between them, heard through the call's context
        (`agentfsm.model.retry_report`), set only when someone listens."""
        heard = None
        if self.listening:  # an exporter's span of the call starts here, and is current during it
            run = self.run_state
            self.emit(LLMCallStarted(agent=self.name, run_id=run.run_id, step=run.step, model=llm))
            heard = retries_to(self._retried)
        started = time.perf_counter()
        streaming, sink = streams(llm), None
        try:
            if streaming is None:
                reply = await llm.ask_tool(
                    messages, system_msgs=system_msgs, tools=tools, tool_choice=tool_choice
                )
            else:  # the pieces become events as they arrive; the reply is the same whole
                sink = DeltaEmitter(self)
                reply = await streaming.ask_tool(
                    messages, system_msgs=system_msgs, tools=tools, tool_choice=tool_choice, sink=sink
                )
        except Exception as exc:
            if self.listening:
                self._report_call(messages, system_msgs, tools, tool_choice, started, None, exc)
            raise
        except BaseException:  # cancelled mid-stream: the run's usage counts what streamed so far
            if sink is not None and sink.attempt:
                self.run_state.usage.add(sink.partial_usage())
            raise
        finally:
            if heard is not None:
                stop_retries(heard)
        if self.listening:  # nothing is built for nobody: the event copies the request
            self._report_call(messages, system_msgs, tools, tool_choice, started, reply, None)
        return reply

    def _retried(self, notice: RetryNotice) -> None:
        """An attempt of the call in flight failed and another follows: an `LLMRetry`."""
        run = self.run_state
        self.emit(
            LLMRetry(
                agent=self.name,
                run_id=run.run_id,
                step=run.step,
                attempt=notice.attempt,
                error_type=notice.error_type,
                error=notice.error,
                status_code=notice.status_code,
                wait_s=notice.wait_s,
            )
        )

    def _report_call(
        self,
        messages: Sequence[Message],
        system_msgs: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        tool_choice: ToolChoice,
        started: float,
        reply: LLMResponse | None,
        error: Exception | None,
    ) -> None:
        run = self.run_state
        self.emit(
            LLMCall(
                agent=self.name,
                run_id=run.run_id,
                step=run.step,
                messages=tuple(messages),
                system_msgs=tuple(system_msgs),
                tools=tuple(tools),
                tool_choice=tool_choice,
                reply=reply,
                error_type=type(error).__name__ if error is not None else None,
                error=str(error) if error is not None else None,
                duration_s=time.perf_counter() - started,
            )
        )

    # -- what the driver asks of the model (`agentfsm.run.view.Driven`) --------------------

    @abstractmethod
    def open_run(self, request: str) -> None:
        """Start a new run on `request` (a new `RunState`)."""

    @abstractmethod
    def interrupt(self) -> None:
        """The run ends outside its phases' control (fail, cancel): close what it left open."""

    @abstractmethod
    def run_result(self, spec: StateSpec, paused: StopReason | str | None) -> RunResult:
        """The result of the run now in `spec`: ended there, or `paused` there for that reason."""

    def driven_models(self) -> tuple[DrivenModel, ...]:
        """The models whose runs this one's runs drive (a flow's agents): an exporter makes their
        runs' spans children of this run's. An agent drives none."""
        return ()

    async def on_run_end(self, result: RunResult) -> None:
        """Awaited after every run, however it ended (release per-run resources here)."""


def _release_lease(opened: tuple[Lease, dict[str, Any]]) -> None:
    """A checkpoint opened for a resume that was cancelled meanwhile: its lease is given back."""
    opened[0].release()
