"""`BaseAgent`: an agent whose life is the machine in its table. `run()` and `iter()` only drive it.

The agent is the definition: its table, options, memory and phases. One run
of it is a `RunDriver` (`agentfsm.run.driver`), which holds that run's
private state and the one engine loop: `iter()` exposes the loop, `run()`
drains it. What a state means (a phase, a pause, final and which state it
reports) comes from the table's `StateSpec`s, never from a state's name.
Every event of a run (transitions, model calls, tool calls, edits) goes
through `emit`, to the `on_event` listeners, so a tracer and a checkpointer
see everything in the order it happened.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Any, ClassVar, Self

from ..errors import (
    CheckpointError,
    IndexOutOfRangeError,
    KeyNotFoundError,
    RunningLoopError,
    WrongPhaseError,
    WrongTypeError,
    WrongValueError,
)
from ..fsm.machine import MachineTable, Payload, StateSpec
from ..memory import Memory
from ..messages import Message, ToolCall
from ..options import ConstructorSignature
from ..questions import Question
from ..recording.checkpoint import Checkpointer, open_checkpoint
from ..recording.files import RecordPath
from ..recording.lease import Lease
from ..recording.restore import read_run_state, restore
from ..recording.session import Session
from ..recording.trace import MemoryTrace, Trace, TraceWriter
from ..run.driver import RunDriver
from ..run.events import AgentEvent, Edit, Transition
from ..run.result import RunResult, StopReason
from ..run.state import RunState
from .driven import DrivenModel
from .options import AgentOptions
from .streaming import stream_run
from .table import AGENT_TABLE
from .turn import AgentRunState, Turn

__all__ = ["BaseAgent"]

RUN_ENDED = "Error: the run ended before this tool call produced a result"


class BaseAgent(DrivenModel, ABC):
    """An agent whose life is the machine in `table`.

    Subclasses implement the three phases (`think`, `act`, `observe`) and may
    extend `table` with states and edges of their own.
    """

    table: MachineTable = AGENT_TABLE
    """The machine; an instance may switch to an extension of its class's table (approvals do)."""
    options_class: ClassVar[type[AgentOptions]] = AgentOptions
    """The record of the class's options: its constructor takes each of them by name, and a
    subclass that changes only their defaults names a record that does (`ManusOptions`)."""
    run_state_class: ClassVar[type[RunState]] = AgentRunState
    run_state: AgentRunState
    """The run's record: the run's own fields, the current step's `Turn`, and what spans steps."""

    __signature__ = ConstructorSignature()
    """What `inspect.signature` and `help()` show of each agent class: its own parameters and its
    record's options, made when asked (nothing at import or class creation)."""

    def __init__(
        self,
        *,
        name: str | None = None,
        memory: Memory | None = None,
        options: AgentOptions | None = None,
        **values: Any,
    ) -> None:
        """The options are `options_class`'s, by name (`values`), over the record `options` if
        given (documented and checked there; `inspect.signature` lists them)."""
        record = self.options_class.build(values, start=options, owner=type(self).__qualname__)
        self._init_agent(record, name=name, memory=memory)

    def _init_agent(self, options: AgentOptions, *, name: str | None, memory: Memory | None) -> None:
        """The constructor's work once the options are a checked record. A subclass with options
        of its own builds its record (a subclass of `AgentOptions`) and calls this instead of
        `BaseAgent.__init__`, so each option is checked once, where it is declared."""
        self._init_driven()
        self.options = options
        """The agent's options; `trace_config()`, checkpoints, replay and resume read them."""
        self.name = name or type(self).__name__.removesuffix("Agent").lower() or "agent"
        self.memory = memory if memory is not None else Memory()
        self._deps: Any = None
        """The dependencies the current (or last) run was given (`run(..., deps=...)`)."""

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
    def current_step(self) -> int:
        return self.run_state.step

    @property
    def deps(self) -> Any:
        """The dependencies of the current run (or the last one): what `run(..., deps=...)` was given."""
        return self._deps

    @property
    def pending_approval(self) -> list[ToolCall]:
        """While the run is paused for approval: the calls waiting for a decision (none here)."""
        return []

    @property
    def pending_input(self) -> list[tuple[ToolCall, Question]]:
        """While the run is paused for input: each unanswered question and its call (none here)."""
        return []

    # -- driving the machine --------------------------------------------------------

    async def run(
        self,
        request: str,
        *,
        trace: Trace | None = None,
        checkpoint: RecordPath | None = None,
        deps: Any = None,
        run_id: str | None = None,
        session: Session | None = None,
    ) -> RunResult:
        """Run the machine from `request` to a final state, or a pause (`result.paused`); say why.

        Errors inside a phase end the run in ERROR (the result names them);
        cancellation ends it in ERROR with `cancelled` and is re-raised.
        `trace`: a file to write the run's JSON Lines trace to (see `agentfsm.recording.trace`), or a
        `MemoryTrace` to keep it in.
        `checkpoint`: a journal appended to after every transition and tool call, for `resume`
        (see `agentfsm.recording.checkpoint`).
        `deps`: the app's objects this run's tools take (a tool's `deps_type`); never shown to
        the model, traced or checkpointed, so a resumed run is given them again.
        `run_id`: the run's id, for an app that names its runs (a durable run takes its
        workflow's); None: a new one. Results, events, traces and checkpoints carry it.
        `session`: a conversation kept between runs (`agentfsm.recording.session`): its messages
        become the agent's memory before the run (when it holds any), and the memory is saved to
        it after the run, however it ended; the memory window applies across the conversation.
        """
        self.check_deps(deps)
        if run_id is not None and (not isinstance(run_id, str) or not run_id.strip()):
            raise WrongValueError(
                f"`run_id` must be a non-empty string, got {run_id!r}: name the run, or pass None"
            )
        if session is None:
            return await self._start(request, checkpoint, trace, run_id, lambda: self._take_deps(deps))
        if not isinstance(session, Session):
            raise WrongTypeError(f"`session` must be a Session (FileSession, or your own), got {session!r}")
        self._check_startable()  # before the memory is replaced: a run in progress keeps its own
        saved = await session.load()
        if saved is not None:
            self.memory = Memory.from_snapshot(replace(saved, max_messages=self.memory.max_messages))
        try:
            return await self._start(request, checkpoint, trace, run_id, lambda: self._take_deps(deps))
        finally:
            await session.save(self.memory.snapshot())

    def run_sync(
        self,
        request: str,
        *,
        trace: Trace | None = None,
        checkpoint: RecordPath | None = None,
        deps: Any = None,
        session: Session | None = None,
    ) -> RunResult:
        """`run()` for a script, where no event loop runs: the run on an event loop of its own.

        What the agent opened on that loop (MCP servers, a sandbox, a browser) cannot outlive it,
        so `aclose()` closes it before the loop ends, and the model's connections there end with
        the loop (`OpenAICompatible`'s session closes at its shutdown); memory stays, so the next
        `run_sync` goes on with the conversation. Inside a running loop (async code, a notebook) this refuses
        with `RunningLoopError`: ``await agent.run(...)`` there instead.
        """
        self._check_no_loop("run")
        self._check_startable()  # before a loop is made: a refusal leaves nothing to close
        return self._on_own_loop(
            lambda: self.run(request, trace=trace, checkpoint=checkpoint, deps=deps, session=session)
        )

    def resume_sync(
        self,
        checkpoint: RecordPath | None = None,
        *,
        trace: Trace | None = None,
        deps: Any = None,
    ) -> RunResult:
        """`resume()` for a script, as `run_sync` is `run()`: the paused run (answer it first: a
        run that pauses again returns paused), or the one saved in `checkpoint`, on an event loop
        of its own, closed with what the agent opened on it. Inside a running loop this refuses
        with `RunningLoopError`: ``await agent.resume(...)`` there instead."""
        self._check_no_loop("resume")
        self._check_idle()  # before a loop is made, as `run_sync`
        if checkpoint is None:
            self._paused_run()
        return self._on_own_loop(lambda: self.resume(checkpoint, trace=trace, deps=deps))

    def _check_no_loop(self, method: str) -> None:
        """`RunningLoopError` where an event loop runs: `{method}_sync()` makes one of its own."""
        import asyncio

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        raise RunningLoopError(
            f"`{method}_sync()` of agent {self.name!r} was called inside a running event loop; "
            f"use `await agent.{method}(...)` there"
        )

    def _on_own_loop(self, start: Callable[[], Awaitable[RunResult]]) -> RunResult:
        """`start()`'s run on an event loop of its own, then `aclose()` before that loop ends."""
        import asyncio

        async def run_then_close() -> RunResult:
            try:
                return await start()
            finally:
                await self.aclose()

        return asyncio.run(run_then_close())

    async def aclose(self) -> None:
        """Close what the agent made and holds open (subclasses: a sandbox, a browser, MCP servers
        it connected). The agent can run again afterwards: it opens them anew.

        Never its model: a model is given to an agent, often to many at once (one per concurrent
        run), and whoever made it closes it (`await llm.aclose()`, else its event loop's end
        does). Closing it here would cut the requests the other runs have in flight."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def resume(
        self,
        checkpoint: RecordPath | None = None,
        *,
        trace: Trace | None = None,
        deps: Any = None,
    ) -> RunResult:
        """Continue a run to its end: the paused one (no `checkpoint`), or the one saved in `checkpoint`.

        A paused run (`result.paused`, e.g. awaiting approval) continues in place; its
        checkpoint, if it had one, keeps being written, and `trace` (the run's trace file)
        is appended to. From a `checkpoint` file (written by `run(..., checkpoint=...)`),
        the agent must be built as the one that wrote it (same class and options; the
        model may differ), else `CheckpointError`; its parts are set up as the run had them
        first (`prepare_resume`: Manus runs its commands in the sandbox the checkpoint
        records); `trace` there is the trace file that run wrote: cut back to where the
        checkpoint stands (what came after it is done again), then written on, so that it replays
        as the whole run (`cut_for_resume`; `TraceError` when it cannot be, and nothing runs).
        A finished run's checkpoint gives back its result and runs nothing. `deps`: the run's
        dependencies (None: a paused run keeps those it was given; a run from a checkpoint has
        none unless given).
        """
        if checkpoint is not None and isinstance(trace, MemoryTrace):
            raise WrongValueError(
                "a run resumed from a checkpoint goes on with the trace file it wrote; a trace in "
                "memory goes on only with a run paused in this process (`resume(trace=...)`)"
            )
        if checkpoint is None and (waiting := self.still_waiting_for()) is not None:
            raise WrongPhaseError(
                f"{self.kind} {self.name!r} waits in {self.fsm_state} for {waiting}; give it first "
                "(resuming now would only pause again)"
            )
        opened = None
        if checkpoint is not None:
            self._check_idle()
            self.check_deps(deps)
            opened = await self._opened(checkpoint)
            if trace is not None and not isinstance(trace, MemoryTrace):  # refused above
                await self._cut_trace(trace, opened)
        return await self._continue(self._resumed_run(checkpoint, deps, opened), trace)

    def run_stream(
        self,
        request: str,
        *,
        final_only: bool = False,
        trace: Trace | None = None,
        checkpoint: RecordPath | None = None,
        deps: Any = None,
    ) -> AsyncGenerator[AgentEvent | RunResult, None]:
        """`run`, as an async iterator of every event as it happens, ending with the `RunResult`.

        With a streaming model (``stream=True``) the events include the reply's pieces
        (`TextDelta`, `ToolCallDelta`) as they arrive, in order with the transitions and tool
        calls. The run goes on in a task of its own and never waits for the reader; leaving the
        loop early cancels it (it ends `cancelled`). `final_only`: only the deltas of the turn
        that ends the run, each turn's held back until the machine has decided the edge after
        it (see `agentfsm.agent.streaming`); every other event comes as it happens.
        `trace`, `checkpoint`, `deps`: as `run`'s.
        """
        self._check_startable()
        return stream_run(
            self,
            lambda: self.run(request, trace=trace, checkpoint=checkpoint, deps=deps),
            final_only=final_only,
        )

    def iter(
        self, request: str, *, checkpoint: RecordPath | None = None, deps: Any = None
    ) -> AsyncGenerator[Transition, None]:
        """Run step by step: yields one `Transition` per edge; the run advances between yields."""
        return self._stepped(request, checkpoint, lambda: self._take_deps(deps))

    def resume_iter(
        self, checkpoint: RecordPath | None = None, *, deps: Any = None
    ) -> AsyncGenerator[Transition, None]:
        """`resume`, step by step. A checkpoint is read and checked at once (`CheckpointError`).

        The run continues in its state: a phase runs its action again (THINKING asks
        the model again; ACTING runs only the calls not recorded as completed, see
        `ToolRunner.run_once`; OBSERVING records the observations).
        """
        return self._stepped_on(self._resumed_run(checkpoint, deps))

    async def cancel(self, *, trace: Trace | None = None) -> RunResult:
        """End the run for good in ERROR with `cancelled` (releasing what it holds); returns its result.
        `trace`: a paused run's trace (the one its run or resume wrote), which the end is appended
        to, as `resume(trace=...)` appends the rest of a run."""
        return await self._cancel(trace)

    def reset(self, clear_memory: bool = False) -> None:
        """Back to IDLE from a final state (a logged edge). Memory stays unless `clear_memory`."""
        self._reset()
        if clear_memory:
            self.memory.clear()

    def still_waiting_for(self) -> str | None:
        """What the paused run waits for that nobody has given and nothing will (the approvals,
        the answers of a tool-calling agent without an approver or input handler), as an error
        names it; None when a resume can go on. None here: a base agent's pauses wait for
        nothing in particular."""
        return None

    def check_deps(self, deps: Any) -> None:
        """Refuse, before a run starts, `deps` that its tools cannot take (`WrongTypeError`);
        the tool-calling agent checks each tool's `deps_type`. Nothing to check here."""

    def _take_deps(self, deps: Any) -> None:
        self.check_deps(deps)
        self._deps = deps

    def _resumed_run(
        self,
        checkpoint: RecordPath | None,
        deps: Any = None,
        opened: tuple[Lease, dict[str, Any]] | None = None,
    ) -> RunDriver:
        """The paused run's driver (no `checkpoint`), or a new one for the run restored from it
        (`opened`: its lease and its contents, already taken by `open_checkpoint`)."""
        try:
            if checkpoint is None:
                driver = self._paused_run()
                self._take_deps(deps if deps is not None else self._deps)
                return driver
            self._check_idle()
            self._take_deps(deps)
            if opened is None:
                opened = open_checkpoint(checkpoint)
        except BaseException:
            if opened is not None:
                opened[0].release()
            raise
        return self._restored_run(checkpoint, opened)

    # -- the lifecycle's hooks (`DrivenModel`): the agent's checkpoint is a journal ------------

    def _open_checkpoint(self, path: RecordPath) -> tuple[Lease, dict[str, Any]]:
        return open_checkpoint(path)

    def _restore(self, data: dict[str, Any]) -> None:
        if isinstance(data["config"], dict):
            self.prepare_resume(data["config"])
        self.run_state, self.memory = restore(self, data, type(self.run_state))

    def _checkpointer(
        self, path: RecordPath, lease: Lease | None, saved: dict[str, Any] | None
    ) -> Callable[[], None]:
        return Checkpointer(path, self, lease=lease).close

    def prepare_resume(self, config: Mapping[str, Any]) -> None:
        """Before a run is restored from a checkpoint whose configuration is `config`: set the
        agent's parts up as the run had them (Manus: the sandbox its commands ran in), or
        `CheckpointError`. Nothing to do here."""

    @property
    def turn(self) -> Turn:
        """The current step's record (`run_state.turn`): what its phases hand on."""
        return self.run_state.turn

    def restore_paused(self, dump: Any, *, what: str = "the paused run") -> None:
        """Put back a run that paused (for approval, for input) and was saved elsewhere (a flow's
        checkpoint holds its step's agent so), from the dump of its run state (`what` names it in
        an error): `resume()` then continues it from that pause."""
        self._check_startable()
        run_state = read_run_state("", dump, type(self.run_state), what=what)
        spec = self.table.by_name.get(run_state.state)
        if spec is None or not spec.pause:
            raise CheckpointError(
                f"the saved run of agent {self.name!r} is in {run_state.state!r}, not a pause of "
                f"{type(self).__qualname__}'s machine; build the agent as the one that paused"
            )
        self.run_state = run_state
        self._new_run(None).restarted()

    def checkpoint_parts(self) -> dict[str, Any]:
        """Nothing beside the run state and memory: an agent's checkpoint holds its whole run."""
        return {}

    def _trace(self, path: Trace | None, *, append: bool) -> AbstractContextManager[object]:
        if path is None:
            return nullcontext()
        return TraceWriter(path, self, append=append)

    # -- edits between steps: in the phase that runs the calls, and in the one that records results

    def replace_pending_calls(self, calls: Iterable[ToolCall]) -> Edit:
        """Before the tools run (in ACTING): run `calls` instead of the model's.

        Memory's last assistant message is rewritten to the same calls, so each
        result still answers a call the model is shown to have made.
        """
        self._require_phase(
            Payload.PENDING_CALLS,
            "replace_pending_calls",
            "before the tools run (after iter() yielded the edge into it)",
        )
        new = tuple(calls)
        bad = [c for c in new if not isinstance(c, ToolCall)]
        if bad:
            raise WrongTypeError(
                f"pending calls must be ToolCall objects (ToolCall.create(id, name, args)), got {bad!r}"
            )
        run = self.run_state
        before = tuple(run.turn.pending_calls)
        self.memory.replace_open_calls(new)
        run.turn.pending_calls = list(new)
        run.edits += 1
        edit = Edit(
            agent=self.name, run_id=run.run_id, step=run.step, kind="pending_calls", before=before, after=new
        )
        self.emit(edit)
        return edit

    def edit_observation(self, key: int | str, content: str) -> Edit:
        """Before memory (in OBSERVING): replace the content of an observation (`key`: index or call id)."""
        self._require_phase(
            Payload.OBSERVATIONS,
            "edit_observation",
            "before the results reach memory (after iter() yielded the edge into it)",
        )
        run = self.run_state
        observations = run.turn.observations
        if isinstance(key, int):
            if not -len(observations) <= key < len(observations):
                raise IndexOutOfRangeError(f"no observation {key}: this step has {len(observations)}")
            index = key % len(observations)
        else:
            ids = [o.call.id for o in observations]
            if key not in ids:
                raise KeyNotFoundError(f"no observation for call id {key!r}; this step's calls: {ids!r}")
            index = ids.index(key)
        old = observations[index]
        # A new object, so the transition that reported the original keeps it.
        observations[index] = old.model_copy(update={"content": content})
        run.edits += 1
        edit = Edit(
            agent=self.name,
            run_id=run.run_id,
            step=run.step,
            kind="observation",
            before=old.content,
            after=content,
            call_id=old.call.id,
        )
        self.emit(edit)
        return edit

    def _require_phase(self, consumes: Payload, what: str, when: str) -> None:
        """Refuse an edit unless the machine rests in the phase that works on `consumes`."""
        phase = self.table.phase_that(consumes=consumes)
        if phase is None or self.fsm_state != phase.name or self.phase_running:
            where = phase.name if phase is not None else f"a phase consuming {consumes!r}"
            raise WrongPhaseError(
                f"`{what}` is allowed only in {where}, {when}; agent {self.name!r} is in {self.position}"
            )

    # -- the phases (subclasses) ------------------------------------------------------

    @abstractmethod
    async def think(self) -> None:
        """Decide what to do next: set `run.turn.reply` and `run.turn.pending_calls`."""

    @abstractmethod
    async def act(self) -> None:
        """Execute `run.turn.pending_calls`; set `run.turn.observations`."""

    @abstractmethod
    async def observe(self) -> None:
        """Record `run.turn.observations` in memory and update stuck detection."""

    def trace_config(self) -> dict[str, Any]:
        """What a trace's header and a checkpoint record of the agent (JSON values, never secrets):
        its options, and what its parts add (subclasses add theirs)."""
        config = {**self.options.to_json(), "max_messages": self.memory.max_messages}
        if self.built_by is not None:
            config["built_by"] = self.built_by
        return config

    # -- what the driver asks of the agent (`agentfsm.run.view.Driven`) ------------------

    def open_run(self, request: str) -> None:
        """A new run on `request`: a new `AgentRunState` (a result keeps its own), the request in memory."""
        run = self.run_state
        if run.run_id:
            run = self.run_state = AgentRunState(state=run.state)
        run.run_id, run.request = self._next_run_id or os.urandom(6).hex(), request
        self._next_run_id = None
        self.memory.add_request(Message.user_message(request))

    def interrupt(self) -> None:
        """The run ends outside its phases (fail, cancel): answer its open tool calls in memory."""
        self.memory.close_open_calls(RUN_ENDED)

    def run_result(self, spec: StateSpec, paused: StopReason | str | None) -> RunResult:
        """The result of the run now in `spec`: ended there, or `paused` there for that reason."""
        run = self.run_state
        if paused is not None:
            return RunResult(
                run_id=run.run_id,
                state=self.state,
                stop_reason=paused,
                steps=run.step,
                output=run.output,
                usage=run.usage.copy(),
                pending_approval=tuple(self.pending_approval),
                pending_input=tuple(self.pending_input),
            )
        assert run.stop_reason is not None
        return RunResult(
            run_id=run.run_id,
            state=self.state,
            stop_reason=run.stop_reason,
            steps=run.step,
            output=self._output(run.stop_reason),
            error=run.error,
            exception=run.exception,
            usage=run.usage,  # not a copy: the run is over, and the next one starts a new `RunState`
        )

    def _output(self, reason: StopReason | str) -> str | None:
        """A run's final text: what the model last said, else a note on why it stopped."""
        run = self.run_state
        if run.output:
            return run.output
        if reason is StopReason.TERMINATED and run.turn.observations:
            return run.turn.observations[-1].content
        if reason is StopReason.MAX_STEPS:
            return f"Terminated: Reached max steps ({self.max_steps})"
        if reason is StopReason.TOKEN_LIMIT:
            return f"Stopped: token limit reached ({run.turn.token_limit})"
        if reason is StopReason.STUCK:
            return "Stopped: the model kept repeating itself"
        return None
