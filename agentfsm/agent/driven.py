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
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from ..fsm.machine import MachineTable, StateSpec
from ..messages import Message
from ..model.base import ChatModel, LLMResponse, ToolChoice, streams
from ..model.retry_report import RetryNotice, retries_to, stop_retries
from ..run.driver import RunDriver
from ..run.events import Edit, LLMCall, LLMCallStarted, LLMRetry
from ..run.observers import observers_of
from ..run.result import AgentState, RunResult, StopReason
from ..run.state import RunState
from ..run.view import StepPayloads
from .deltas import DeltaEmitter
from .event_source import EventSource

__all__ = ["DrivenModel"]


class DrivenModel(EventSource, ABC):
    """A machine in `table` with one run at a time, run by a `RunDriver`."""

    table: MachineTable
    """The machine; an instance may switch to an extension of its class's table."""
    paused_edits: tuple[Edit, ...] = ()
    """Edits made while the run was paused, for the trace a resume appends to."""
    name: str
    run_state_class: ClassVar[type[RunState]] = RunState
    """The record of one run: `RunState`, or the subclass with what this kind of machine adds."""

    def _init_driven(self) -> None:
        """The state every run starts from: no listener, no run, the table's initial state."""
        EventSource.__init__(self)
        self.run_state = self.run_state_class(state=self.table.initial)
        self.last_result: RunResult | None = None
        self._run: RunDriver | None = None
        """The current run's driver, or the paused run's (None between runs)."""

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

    def _start_driver(self, closers: tuple[Callable[[], None], ...]) -> RunDriver:
        """The driver of a new run, in place of a paused run's (which stops being recorded); the
        process's run observers (an exporter of spans) watch it until it ends."""
        if self._run is not None:
            self._run.release()
        self._run = RunDriver(self, closers=(*closers, *observers_of(self)))
        return self._run

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
