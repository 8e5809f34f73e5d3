"""`Runs`: the runs of an application in one process, with `DurableRuns`' verbs.

An app that serves agents needs the same few things whatever it is: start a run and get its
id, see where it is, decide its approvals and answer its questions from another request,
cancel it, and find every unfinished run again after a restart. `Runs` owns that: each run gets
a fresh agent from its factory (given the run's `AgentSpec`, as a durable worker's is), a folder
of its own under `directory` (``<run_id>/``: ``run.json``, the checkpoint, the trace), and a
task in this process. The verbs and `RunStatus` are `agentfsm.durable.DurableRuns`' own, so an
app moves to a DBOS cluster by changing one constructor. A factory may build a `PlanningFlow`
instead of an agent: its run is managed the same way (`agentfsm.runs.flows`), and a flow that waits
for a decision on its plan is decided with `review`.

What a restart finds, and why it is safe:

- ``run.json`` holds the task, the spec, the pause count and, once the run ended, its result:
  an ended run is reported from it without building an agent.
- Each run this process holds has a lease of its own (``run.lease``, `Lease`: a lock the kernel
  drops with the process), from its submission to its end. Entering `Runs` resumes every
  unfinished run in `directory` whose lease it gets: one not started yet starts, a running one
  goes on from its checkpoint (and its trace, cut back to the checkpoint: `cut_for_resume`), a
  paused one waits at its pause again. A second `Runs` on the same
  directory takes none of them, and a run is never driven twice.
- A run ended by `cancel()` stays ended (the checkpoint says so: `RunState.cancelled_for_good`);
  leaving `Runs` (`aclose()`, the end of ``async with``) stops the running runs as a shutdown
  does, and lets go of the paused ones (`DrivenModel.suspend`), so both go on at the next start.

At most `max_active` runs run at once; the others wait their turn (a paused run waits for its
decision without holding a place). `keep` prunes the folders of ended runs: a count (the most
recent that many) or a `timedelta` (those that ended within it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from ..agent.stepping import Breakpoint
from ..agent.toolcall import ToolCallAgent
from ..errors import (
    AgentfsmError,
    ConfigError,
    KeyNotFoundError,
    TraceError,
    WrongPhaseError,
    WrongValueError,
)
from ..flow.checkpoint import is_journal
from ..flow.flow import PlanningFlow
from ..log import event
from ..questions import AnswerAction
from ..recording.kinds import file_kind
from ..recording.lease import Lease
from ..recording.writer import off_loop
from ..run.events import Transition
from ..run.result import AgentState, RunResult, StopReason
from .events import Feed, RunEvent
from .flows import FlowRun, PlanVerdict
from .forking import ForkMemory, ForkPoint, check_fork_memory, fork_point, replayed_journal, write_fork
from .holding import Holding
from .spec import AgentSpec, RunsFactory
from .status import RunStatus, RunStatusState, check_page, stale_decision

__all__ = ["Runs"]

RUN_FILE = "run.json"
CHECKPOINT_FILE = "checkpoint.jsonl"
TRACE_FILE = "trace.jsonl"
EVENTS_FILE = "events.jsonl"
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
"""A run id chosen by the app names its folder: nothing a path could read otherwise."""
_LEASED = "run"
"""The path a run's own lease is named after (``run.lease`` in its folder)."""


@dataclass(slots=True, eq=False)
class _Run:
    """One run this manager knows: its declaration, its folder, and where it is."""

    run_id: str
    task: str
    spec: AgentSpec
    folder: Path
    submitted_at: str
    state: RunStatusState = "queued"
    pause: int = 0
    """How many times the run paused: the number of the pause it waits at, while paused."""
    was_paused: bool = False
    """Found paused at a start: resumed from its checkpoint, it waits at the same pause again."""
    asleep: RunStatus | None = None
    """Found paused at a start, as its ``run.json`` showed it then: its agent is built, and resumed
    from its checkpoint to the same pause, only when a decision or a cancel needs it (`Runs._awake`).
    A restart with a thousand paused runs reads one small file of each, not their checkpoints,
    traces and events, and holds no agent, model or open file for a run nobody has answered yet."""
    waking: asyncio.Task[None] | None = None
    """Its resumption to its pause, while a decision waits for it (`Runs._awake`)."""
    result: RunResult | None = None
    lease: Lease | None = None
    agent: ToolCallAgent | FlowRun | None = None
    """Its agent (a flow: `FlowRun`), while this process drives it."""
    driving: asyncio.Task[None] | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    saving: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Its ``run.json``'s writes, one at a time in the order asked (`_save`)."""
    event_buffer: int = 1000
    new: bool = False
    """Submitted in this process: its folder holds no events to read back."""
    holding: Holding = field(default_factory=Holding)
    """Its breakpoints, and whether it waits at one (`Runs.step`, `Runs.proceed`)."""
    forked_from: dict[str, Any] | None = None
    """The run and transition it was forked from (`Runs.fork`), if it was."""
    _feed: Feed | None = None

    def __post_init__(self) -> None:
        self.holding.on_hold, self.holding.on_release = self._held, self._released

    def _held(self, transition: Transition, why: str) -> None:
        edge = {"trigger": transition.trigger, "source": transition.source, "dest": transition.dest}
        self.feed.add("held", {**edge, "step": transition.step, "why": why})

    def _released(self) -> None:
        self.feed.add("released", {})

    @property
    def feed(self) -> Feed:
        """The run's events (read from its folder when first asked for)."""
        if self._feed is None:
            self._feed = Feed(self.run_id, self.folder / EVENTS_FILE, buffer=self.event_buffer, new=self.new)
            if self.result is not None:
                self._feed.end()
        return self._feed

    def let_go(self) -> None:
        """This process stops driving the unfinished run: its events file is closed and its readers'
        iterations end (they rejoin from their last `seq` when a `Runs` takes the run up again)."""
        if self._feed is not None:
            self._feed.close()

    @property
    def checkpoint(self) -> Path:
        return self.folder / CHECKPOINT_FILE

    @property
    def trace(self) -> Path:
        return self.folder / TRACE_FILE

    def status(self) -> RunStatus:
        """Where the run is, as `Runs.status` reports it."""
        if self.asleep is not None:
            return self.asleep
        agent = self.agent if self.state == "paused" else None
        return RunStatus(
            run_id=self.run_id,
            state=self.state,
            task=self.task,
            result=self.result,
            pending_approval=tuple(agent.pending_approval) if agent is not None else (),
            pending_input=tuple(agent.pending_input) if agent is not None else (),
            pause=self.pause if self.state == "paused" else None,
            decided=_decided(agent) if agent is not None else (),
            held=_held(self.holding),
            plan=agent.plan if isinstance(agent, FlowRun) else None,
        )

    def record(self) -> dict[str, Any]:
        paused = self.state == "paused" and (self.agent is not None or self.asleep is not None)
        return {
            "run_id": self.run_id,
            "task": self.task,
            "spec": self.spec.to_json(),
            "submitted_at": self.submitted_at,
            "state": self.state,
            "pause": self.pause,
            "breakpoints": [point.to_json() for point in self.holding.breakpoints],
            "forked_from": self.forked_from,
            "result": self.result.model_dump(mode="json") if self.result is not None else None,
            "waiting": self.status().model_dump(mode="json") if paused else None,
        }


class Runs:
    """The runs under `directory`, each by a fresh agent from `agents` (factory by name), at most
    `max_active` running at once; `keep`: how many ended runs' folders stay (a count, or a
    `timedelta` since they ended; None: all); `event_buffer`: how far an `events` reader may fall
    behind before it is dropped. Enter it (``async with``) before the verbs."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        agents: Mapping[str, RunsFactory],
        max_active: int = 64,
        keep: int | timedelta | None = None,
        event_buffer: int = 1000,
    ) -> None:
        if not agents:
            raise ConfigError(
                "Runs needs at least one agent factory: Runs(directory, agents={'name': factory})"
            )
        if isinstance(max_active, bool) or not isinstance(max_active, int) or max_active < 1:
            raise WrongValueError(f"max_active must be a positive whole number, got {max_active!r}")
        if keep is not None and not isinstance(keep, timedelta) and (isinstance(keep, bool) or keep < 0):
            raise WrongValueError(f"keep must be a count of runs (>= 0) or a timedelta, got {keep!r}")
        self.directory = Path(directory)
        self.agents = dict(agents)
        self.max_active = max_active
        self.keep = keep
        if isinstance(event_buffer, bool) or not isinstance(event_buffer, int) or event_buffer < 1:
            raise WrongValueError(f"event_buffer must be a positive whole number, got {event_buffer!r}")
        self.event_buffer = event_buffer
        self._runs: dict[str, _Run] = {}
        self._slots: asyncio.Semaphore | None = None
        self._open = False
        self._making: dict[str, asyncio.Future[None]] = {}
        """The runs being submitted, by id, until their folders are made (`submit`)."""

    # -- the manager's life ------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._slots = asyncio.Semaphore(self.max_active)
        self._open = True
        found = await off_loop(self._taken_up)  # a file or two a run: off the loop, which may be serving
        for run in sorted(found, key=lambda run: run.submitted_at):
            self._reopen(run)  # in the order they were submitted
        self._prune()
        return self

    def _taken_up(self) -> list[_Run]:
        """The runs in the directory, each unfinished one leased for this manager (those another
        `Runs` holds left out)."""
        found = []
        for folder in self.directory.iterdir():
            run = self._found(folder) if folder.is_dir() else None
            if run is None:
                continue
            if run.result is None:
                try:
                    run.lease = Lease.acquire(run.folder / _LEASED)
                except AgentfsmError:  # CheckpointLeasedError: another `Runs` holds it
                    continue
            found.append(run)
        return found

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop: the running runs as a shutdown stops them, the paused ones let go of; both go on
        when `Runs` is entered again on this directory. Ended runs are not touched."""
        if not self._open:
            return
        self._open = False
        running = [run.driving for run in self._runs.values() if run.driving is not None]
        for task in running:
            task.cancel("Runs closed: the run goes on at the next start")
        await asyncio.gather(*running, return_exceptions=True)
        for run in self._runs.values():
            if run.result is None and run.agent is not None and run.agent.phase is not None:
                run.agent.suspend()
            if run.result is None:
                run.let_go()
            await self._release(run)

    def _found(self, folder: Path) -> _Run | None:
        """The run in `folder` as its ``run.json`` says (None: not a run's folder, or damaged)."""
        try:
            data = json.loads((folder / RUN_FILE).read_text(encoding="utf-8"))
            run = _Run(
                run_id=str(data["run_id"]),
                task=str(data["task"]),
                spec=AgentSpec.from_json(data["spec"]),
                folder=folder,
                submitted_at=str(data.get("submitted_at", "")),
                pause=int(data.get("pause", 0)),
                was_paused=data.get("state") == "paused",
                event_buffer=self.event_buffer,
                forked_from=data.get("forked_from"),
            )
            ended = data.get("result")
            run.result = RunResult.model_validate(ended) if ended is not None else None
            run.holding.set([Breakpoint(**point) for point in data.get("breakpoints", ())])
            if run.was_paused and run.result is None and data.get("waiting") is not None:
                shown = RunStatus.model_validate(data["waiting"])
                run.asleep = replace(shown, state="paused", pause=run.pause)
        except (OSError, ValueError, KeyError, TypeError, AgentfsmError) as exc:
            event(
                "runs_folder_skipped",
                level=logging.WARNING,
                folder=str(folder),
                message=f"{folder}: not a run's folder, or its {RUN_FILE} is damaged ({exc}); left alone",
            )
            return None
        return run

    def _reopen(self, run: _Run) -> None:
        """Take up `run` (`__aenter__`), leased for this manager unless it ended: ended, it is
        reported; paused, it waits for its decision (asleep: see `_Run.asleep`); otherwise it is
        resumed (started, if it never was)."""
        self._runs[run.run_id] = run
        if run.result is not None:
            run.state = _ended_state(run.result)
            run.ended.set()
        elif run.asleep is not None:
            run.state = "paused"
        else:
            self._start(run, self._drive(run, resumed=run.checkpoint.exists()))

    # -- the verbs ------------------------------------------------------------------------

    async def submit(
        self,
        task: str,
        agent: AgentSpec | str = "toolcall",
        *,
        run_id: str | None = None,
        breakpoints: Sequence[Breakpoint] = (),
    ) -> str:
        """Start a run of `task` by the agent `agent` (a spec, or a factory's name); its id (`run_id`,
        or a new one). Submitting again with the same `run_id` gives back that run, not a second one.
        `breakpoints`: where the run waits for `step` or `proceed` (`set_breakpoints`), from its
        first edge on; checked against its agent's machine when it starts (a wrong one ends it in
        ERROR, naming it)."""
        self._check_open()
        spec = AgentSpec(agent=agent) if isinstance(agent, str) else agent
        self._check_factory(spec)
        _check_id("run_id", run_id)
        run_id = run_id or uuid.uuid4().hex
        if run_id in self._runs:
            return run_id
        if (making := self._making.get(run_id)) is not None:  # submitted a moment ago, still being made
            await asyncio.shield(making)
            return run_id
        run = _Run(
            run_id=run_id,
            task=task,
            spec=spec,
            folder=self.directory / run_id,
            submitted_at=_now(),
            event_buffer=self.event_buffer,
            new=True,
            holding=Holding(breakpoints),
        )
        await self._made_and_started(run, lambda: _made(run), resumed=False)
        return run_id  # not made: its folder was there already, a run submitted before or another's

    async def fork_point(self, source: str | os.PathLike[str], transition: int) -> ForkPoint:
        """Where a run stood after its transition `transition` (from 0, as its trace counts them):
        its state, step and memory (a flow's: its agents', `ForkPoint.agents`; see `fork`).
        `source`: the id of one of these runs (read from its checkpoint), or the path of an agent's
        or a flow's checkpoint (read from it) or trace (replayed up to there)."""
        if isinstance(source, str):
            run = self._run(source)
            return await off_loop(lambda: fork_point(source, run.checkpoint, transition))
        path = Path(source)
        kind = await off_loop(lambda: file_kind(path))
        if kind == "flow checkpoint" and not await off_loop(lambda: is_journal(path)):
            raise WrongValueError(
                f"{path} is a flow's checkpoint written before they were journals: resume the flow from "
                "it once (it is written again as a journal), then fork it"
            )
        if kind in ("trace", "flow trace"):
            journal, run_id = await replayed_journal(path, transition)
            return replace(fork_point(run_id, journal, transition), trace=os.fspath(path))
        if kind in ("checkpoint", "flow checkpoint"):
            point = await off_loop(lambda: fork_point(path.name, path, transition))
            return replace(
                point, run_id=str(point.record["run_state"].get("run_id")), checkpoint=os.fspath(path)
            )
        raise WrongValueError(
            f"{path} is {f'a {kind}' if kind else 'no recording agentfsm reads'}: a fork starts from an "
            "agent's or a flow's trace or checkpoint"
        )

    async def fork(
        self,
        source: str | os.PathLike[str],
        transition: int,
        *,
        agent: AgentSpec | str | None = None,
        memory: ForkMemory | None = None,
        fork_id: str | None = None,
        breakpoints: Sequence[Breakpoint] = (),
    ) -> str:
        """Start a new run from where another stood after its transition `transition`, with
        `memory` as its messages (None: the memory it had there; see `fork_point`), by a fresh
        agent; its id (`fork_id`, or a new one). `source`: the id of one of these runs (the fork
        has its task and agent spec), or the path of any agent's trace or checkpoint
        (`run(trace=...)`, `run(checkpoint=...)`, another directory's; the fork has its request,
        and `agent` names the factory that runs it; a checkpoint's fork has a trace from the fork
        point on, no trace holding its history). A `PlanningFlow`'s run forks the same way (its
        trace or checkpoint, `execute(trace=..., checkpoint=...)`): no step it completed before
        the fork point runs again, and `memory` is its agents' messages by name (those not named
        are as they were: `ForkPoint.agents`), since a flow has no memory of its own.

        It goes on as a run resumed there does (a phase runs again, a pause waits again), with its
        own folder, checkpoint and trace; the trace holds the parent's history up to the fork, then
        its own, and names the parent (``forked_from`` in its header, and in ``run.json``). The
        parent is not touched, and may still be running. `IndexOutOfRangeError` for a transition
        the parent does not have; `WrongPhaseError` for the one that ended it."""
        self._check_open()
        _check_id("fork_id", fork_id)
        parent_trace: Path | None
        if isinstance(source, str):
            parent = self._run(source)
            task, spec, parent_trace = parent.task, parent.spec, parent.trace
            if agent is not None:
                raise WrongValueError(
                    f"run {source!r} is forked by its own agent ({spec.agent!r}): drop `agent`"
                )
        else:
            if agent is None:
                raise WrongValueError(
                    f"a fork of the trace {os.fspath(source)} needs `agent`: the factory to run it "
                    f"({', '.join(sorted(self.agents))})"
                )
            spec = AgentSpec(agent=agent) if isinstance(agent, str) else agent
            self._check_factory(spec)
        fork_id = fork_id or uuid.uuid4().hex
        if fork_id in self._runs or fork_id in self._making:
            raise WrongValueError(f"run id {fork_id!r} is taken: fork under another id, or none")
        point = await self.fork_point(source, transition)
        check_fork_memory(point, memory)
        if not isinstance(source, str):  # a file's run: its request, its trace if it is one
            task, parent_trace = point.request, Path(point.trace) if point.trace is not None else None
        run = _Run(
            run_id=fork_id,
            task=task,
            spec=spec,
            folder=self.directory / fork_id,
            submitted_at=_now(),
            event_buffer=self.event_buffer,
            new=True,
            holding=Holding(breakpoints),
            forked_from=point.parent,
        )

        def make() -> Lease | None:
            lease = _made(run)
            if lease is not None:
                try:
                    write_fork(
                        point,
                        fork_id,
                        checkpoint=run.checkpoint,
                        trace=run.trace,
                        parent_trace=parent_trace,
                        memory=memory,
                    )
                except BaseException:
                    _unmade(lease)
                    raise
            return lease

        if not await self._made_and_started(run, make, resumed=True):
            raise WrongValueError(f"run id {fork_id!r} is taken: fork under another id, or none")
        return fork_id

    async def _made_and_started(self, run: _Run, make: Callable[[], Lease | None], *, resumed: bool) -> bool:
        """`make()` the new run's folder and files off the loop (the slow part: see `_made`), the run
        known as being made meanwhile, then start it; False when its folder was there already."""
        making = self._making[run.run_id] = asyncio.get_running_loop().create_future()
        try:
            made = await off_loop(make, abandoned=_unmade)
        finally:
            del self._making[run.run_id]
            making.set_result(None)
        if made is None:
            return False
        run.lease = made
        self._runs[run.run_id] = run
        self._start(run, self._drive(run, resumed=resumed))
        return True

    async def status(self, run_id: str) -> RunStatus:
        return self._run(run_id).status()

    async def list(
        self,
        *,
        state: RunStatusState | None = None,
        limit: int | None = None,
        offset: int = 0,
        newest_first: bool = False,
    ) -> list[RunStatus]:
        """The status of every run this manager holds or has ended (in submission order, or the
        newest first), or of those in `state`; `limit` and `offset` page the runs in that order,
        before `state` picks among them (as `DurableRuns.list`)."""
        check_page(limit, offset)
        ordered = sorted(self._runs.values(), key=lambda run: run.submitted_at, reverse=newest_first)
        page = ordered[offset:] if limit is None else ordered[offset : offset + limit]
        return [run.status() for run in page if state is None or run.state == state]

    async def result(
        self, run_id: str, *, wait: bool = False, timeout: float | None = None
    ) -> RunResult | None:
        """The run's result once it ended; None while it has not (`wait`: wait for it, up to `timeout`)."""
        run = self._run(run_id)
        if wait and run.result is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(run.ended.wait(), timeout)
        return run.result

    async def trace(self, run_id: str) -> str | None:
        """The run's trace so far (JSON Lines, as `agent.run(trace=...)` writes it), or None."""
        run = self._run(run_id)
        try:
            return run.trace.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def events(self, run_id: str, *, after: int = 0) -> AsyncIterator[RunEvent]:
        """The run's events from number `after` on (0: all), the ones kept first, then the live ones,
        each a `RunEvent` (`seq`, `kind`, `to_json()`); the iteration ends when the run has ended.
        Any number of readers, joined at any time; one that falls `buffer` (1000) events behind is
        dropped with a last ``reader_dropped`` event saying where to rejoin. A reader never holds
        the run up, and one that leaves does not end it (see `agentfsm.runs.events`)."""
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise WrongValueError(f"after must be an event's seq (>= 0), got {after!r}")
        return self._run(run_id).feed.read(after)

    async def cancel(self, run_id: str) -> None:
        """End the run for good (`ToolCallAgent.cancel`): a queued one before it starts, a running one
        at once (a tool call in progress is interrupted), a paused one at its pause. An ended run
        stays as it ended."""
        run = self._run(run_id)
        await self._awake(run)
        if run.result is not None:
            return
        if run.state == "queued" and run.driving is not None:  # waiting for a place: it takes no step
            run.driving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run.driving
        agent = run.agent
        if agent is None:  # it never started
            error = "CancelledError: the run was cancelled before it started"
            await self._ended(run, _ended(run.run_id, error))
            return
        if run.state == "running":  # its own task settles it: `run()` returns the cancelled result
            await agent.cancel()
            await run.ended.wait()
            return
        # paused (or decided and not yet going on): its end is appended to its trace
        await self._ended(run, await agent.cancel(trace=run.trace))

    def breakpoints(self, run_id: str) -> tuple[Breakpoint, ...]:
        """The run's breakpoints."""
        return self._run(run_id).holding.breakpoints

    async def set_breakpoints(self, run_id: str, breakpoints: Sequence[Breakpoint]) -> None:
        """Replace the run's breakpoints (none: it runs on without waiting, unless a `step` is under
        way). A held run stays held: `step` or `proceed` moves it. Checked against the run's machine
        once it has an agent (`WrongValueError` naming the state or trigger that is not there); kept
        in its ``run.json``, so a run taken up after a restart waits at them too."""
        run = self._run(run_id)
        if run.result is not None:
            raise WrongPhaseError(f"run {run_id!r} has ended ({run.state}): its breakpoints no longer matter")
        _set_breakpoints(run, breakpoints)
        await _save(run)

    async def step(self, run_id: str) -> None:
        """Let the run held at a breakpoint take one edge, then wait again (`WrongPhaseError` when it
        is not held: see `RunStatus.held`)."""
        self._run(run_id).holding.step(run_id)

    async def proceed(self, run_id: str) -> None:
        """Let the run held at a breakpoint go on to the next breakpoint, or its end."""
        self._run(run_id).holding.proceed(run_id)

    async def approve(
        self, run_id: str, call_id: str, *, arguments: dict[str, Any] | None = None, pause: int | None = None
    ) -> None:
        """Approve the paused run's call `call_id` (with `arguments` instead of the model's, if given);
        bound to the pause `pause` (its number, `RunStatus.pause`; None: the one it waits at now).
        The decision that leaves nothing undecided resumes the run. A stale, duplicate or unknown
        decision raises, naming the pause."""
        agent = await self._paused(run_id, call_id, pause)
        agent.approve(call_id, arguments=arguments)
        await self._go_on_if_decided(self._runs[run_id])

    async def reject(
        self, run_id: str, call_id: str, reason: str | None = None, *, pause: int | None = None
    ) -> None:
        """Reject the paused run's call `call_id`; the model reads `reason`. Bound to a pause, and
        resuming the run when it was the last decision, as `approve`."""
        agent = await self._paused(run_id, call_id, pause)
        agent.reject(call_id, reason)
        await self._go_on_if_decided(self._runs[run_id])

    async def answer(
        self,
        run_id: str,
        call_id: str,
        content: dict[str, Any] | None = None,
        *,
        action: AnswerAction = "accept",
        key: str | None = None,
        pause: int | None = None,
    ) -> None:
        """Answer the question `key` (None: the call's only one) of the paused run's call `call_id`
        (as `ToolCallAgent.answer`); the last answer awaited resumes the run, as `approve`."""
        if action != "accept" and content is not None:
            raise WrongValueError(f"a {action!r} answer carries no content; got {content!r}")
        agent = await self._paused(run_id, call_id, pause)
        agent.answer(call_id, content, action=action, key=key)
        await self._go_on_if_decided(self._runs[run_id])

    async def review(
        self,
        run_id: str,
        verdict: PlanVerdict,
        steps: Sequence[str] | None = None,
        *,
        pause: int | None = None,
    ) -> None:
        """Decide the plan a flow's run waits for (`RunStatus.plan`): ``approve`` it, ``edit`` it
        (`steps`: the steps to run instead of those not completed, each with its ``[agent]`` tag),
        or ``cancel`` the flow (`PlanningFlow.approve_plan`, ...); bound to a pause and resuming
        the run, as `approve`."""
        model = await self._paused(run_id, "the plan", pause)
        if not isinstance(model, FlowRun) or model.plan is None:
            raise WrongPhaseError(
                f"run {run_id!r} waits for no decision on a plan (see `status({run_id!r}).plan`): "
                "`review` decides a flow's plan while it waits for one"
            )
        model.review(verdict, steps)
        await self._go_on_if_decided(self._runs[run_id])

    # -- driving runs -----------------------------------------------------------------------

    def _start(self, run: _Run, driving: Coroutine[Any, Any, None]) -> None:
        run.driving = asyncio.get_running_loop().create_task(driving, name=f"agentfsm run {run.run_id}")

    async def _drive(self, run: _Run, *, resumed: bool) -> None:
        """Run `run` (on from its checkpoint when `resumed`, or from its pause when it has an agent)
        to its end or its next pause, in one of the `max_active` places."""
        assert self._slots is not None
        async with self._slots:
            run.state = "running"
            try:
                result = await self._advance(run, resumed)
            except asyncio.CancelledError:
                if run.result is None and run.state == "running":
                    run.state = "queued"  # stopped by `aclose()`: it goes on at the next start
                raise
            except Exception as exc:  # the agent could not be built, or its checkpoint not read
                result = _ended(run.run_id, f"{type(exc).__name__}: {exc}", StopReason.ERROR)
            finally:
                run.driving = None
        if result.paused:
            if not (resumed and run.was_paused):  # a new pause (not the one a restart found it at)
                run.pause += 1
            run.state, run.was_paused = "paused", False
            await _save(run)
            return
        await self._ended(run, result)

    async def _advance(self, run: _Run, resumed: bool) -> RunResult:
        agent = run.agent
        if agent is not None:  # paused here, and decided: on from the pause
            return await agent.resume(trace=run.trace)
        made = self.agents[run.spec.agent](run.spec)
        agent = run.agent = FlowRun(made) if isinstance(made, PlanningFlow) else made
        agent.on_event(run.feed.publish)
        _set_breakpoints(run, run.holding.breakpoints)
        agent.hold = run.holding
        if resumed:  # its checkpoint goes on, and its trace from the same point
            if run.trace.exists():
                try:
                    return await agent.resume(run.checkpoint, trace=run.trace)
                except TraceError as exc:  # nothing ran: the run goes on, its trace stays as it was
                    event(
                        "runs_trace_not_continued",
                        level=logging.WARNING,
                        run_id=run.run_id,
                        message=f"run {run.run_id} goes on without its trace: {exc}",
                    )
            return await agent.resume(run.checkpoint)
        return await agent.run(run.task, checkpoint=run.checkpoint, trace=run.trace, run_id=run.run_id)

    async def _awake(self, run: _Run) -> None:
        """The run found asleep at its pause (`_Run.asleep`) resumed to it, its agent built, before a
        decision or a cancel is taken by it; at once for any other run. Two decisions at once share
        the one resumption."""
        if run.asleep is not None:
            run.asleep = None
            self._start(run, self._drive(run, resumed=True))
            run.waking = run.driving
        if run.waking is not None:
            waking = run.waking
            try:
                await asyncio.shield(waking)
            finally:
                if run.waking is waking and waking.done():
                    run.waking = None

    async def _go_on_if_decided(self, run: _Run) -> None:
        agent = run.agent
        if agent is not None and agent.still_waiting_for() is None:
            run.state = "queued"  # its pause is over: a restart from here goes on, it does not wait again
            await _save(run)  # before it goes on, so that no later save of it can land first
            if run.result is None:  # not cancelled meanwhile
                self._start(run, self._drive(run, resumed=False))

    async def _ended(self, run: _Run, result: RunResult) -> None:
        run.result, run.state = result, _ended_state(result)
        await _save(run)
        await self._release(run)
        run.feed.end()
        run.ended.set()
        self._prune()

    async def _release(self, run: _Run) -> None:
        agent, run.agent = run.agent, None
        if agent is not None:
            try:
                await agent.aclose()
            except Exception as exc:
                event(
                    "runs_agent_close_failed",
                    level=logging.WARNING,
                    run_id=run.run_id,
                    message=f"closing the agent of run {run.run_id} failed: {type(exc).__name__}: {exc}",
                )
        if run.lease is not None:
            lease, run.lease = run.lease, None
            await off_loop(lease.release)

    def _prune(self) -> None:
        """Remove the folders of ended runs beyond `keep`."""
        if self.keep is None:
            return
        ended = sorted(
            (run for run in self._runs.values() if run.result is not None and run.driving is None),
            key=lambda run: run.submitted_at,
            reverse=True,
        )
        if isinstance(self.keep, timedelta):
            cut = datetime.now(UTC) - self.keep
            gone = [run for run in ended if _submitted(run) < cut]
        else:
            gone = ended[self.keep :]
        for run in gone:
            shutil.rmtree(run.folder, ignore_errors=True)
            del self._runs[run.run_id]

    # -- lookups ------------------------------------------------------------------------------

    def _check_factory(self, spec: AgentSpec) -> None:
        if spec.agent not in self.agents:
            raise ConfigError(
                f"no agent factory {spec.agent!r} here; Runs has {', '.join(sorted(self.agents))}: "
                "submit one of those, or give Runs(agents=...) a factory of that name"
            )

    def _check_open(self) -> None:
        if not self._open:
            raise WrongPhaseError("Runs is not open: use it as `async with Runs(...) as runs:` first")

    def _run(self, run_id: str) -> _Run:
        run = self._runs.get(run_id)
        if run is None:
            raise KeyNotFoundError(
                f"no run {run_id!r} here; `await runs.list()` shows the runs this manager holds"
            )
        return run

    async def _paused(self, run_id: str, call_id: str, pause: int | None) -> ToolCallAgent | FlowRun:
        """The agent of the run paused at `pause` (None: now), for a decision about `call_id`."""
        self._check_open()
        run = self._run(run_id)
        await self._awake(run)
        if pause is not None and (run.state != "paused" or pause != run.pause):
            raise stale_decision(
                RunStatus(run_id=run_id, state=run.state, pause=run.pause if run.state == "paused" else None),
                call_id,
                pause,
                see=f"`status({run_id!r})`",
            )
        if run.state != "paused" or run.agent is None:
            raise WrongPhaseError(
                f"run {run_id!r} is {run.state}, not paused: a decision is taken only while it waits"
            )
        return run.agent


def _check_id(name: str, value: str | None) -> None:
    """`WrongValueError` unless `value` (None: a new id is made) can name a run's folder."""
    if value is not None and not _RUN_ID.fullmatch(value):
        raise WrongValueError(
            f"{name} {value!r} cannot name a folder: use 1 to 128 letters, digits, '-', '_' and '.', "
            "beginning with a letter or digit"
        )


def _set_breakpoints(run: _Run, breakpoints: Sequence[Breakpoint]) -> None:
    """`run`'s breakpoints, checked against its machine once it has one (`Holding.set`). A flow's run
    waits at the flow's own edges: a tool's breakpoint, its agents' business, would never be hit."""
    if isinstance(run.agent, FlowRun) and (tool := next((p for p in breakpoints if p.tool), None)):
        raise WrongValueError(
            f"run {run.run_id!r} is a flow's: it waits at its own states and edges, never at a tool's "
            f"call ({tool}); set a breakpoint on a state of its machine (EXECUTING, ...) instead"
        )
    run.holding.set(breakpoints, run.agent.table if run.agent is not None else None)


def _decided(agent: ToolCallAgent | FlowRun) -> tuple[str, ...]:
    """The calls decided at the pause the run waits at (a flow's: its paused step's agent's)."""
    return agent.decided if isinstance(agent, FlowRun) else tuple(agent.run_state.turn.decisions)


def _held(holding: Holding) -> str | None:
    """What a held run waits at, as `RunStatus.held` says it (None: it is not held)."""
    edge = holding.held
    if edge is None:
        return None
    return f"{holding.why}: {edge.source} -> {edge.dest} on {edge.trigger}"


def _ended_state(result: RunResult) -> RunStatusState:
    if result.stop_reason == StopReason.CANCELLED:
        return "cancelled"
    return "finished" if result.state is AgentState.FINISHED else "error"


def _ended(run_id: str, error: str, reason: StopReason = StopReason.CANCELLED) -> RunResult:
    """The result of a run that ended without running (cancelled first, or its agent not built)."""
    return RunResult(run_id=run_id, state=AgentState.ERROR, stop_reason=reason, steps=0, error=error)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _submitted(run: _Run) -> datetime:
    try:
        return datetime.fromisoformat(run.submitted_at)
    except ValueError:
        return datetime.now(UTC)


def _made(run: _Run) -> Lease | None:
    """Make the folder of the new `run`, lease it and write its ``run.json`` and an empty events
    file; None when the folder exists already. In the writers' threads (`off_loop`): creating a
    file or a folder is the slow part of a submission (0.15-0.3 ms each, measured on this project's
    machines with a thousand runs open, against microseconds to open one that exists), and the
    loop goes on meanwhile. The events file is made here so that the run's first event opens it."""
    try:
        run.folder.mkdir()
    except FileExistsError:
        return None
    lease = Lease.acquire(run.folder / _LEASED)
    try:
        _write(run.folder / RUN_FILE, run.record())
        (run.folder / EVENTS_FILE).touch()
    except BaseException:
        lease.release()
        raise
    return lease


def _unmade(lease: Lease | None) -> None:
    """The submission was cancelled while its folder was made: nothing runs it, so it goes."""
    if lease is not None:
        folder = Path(lease.checkpoint).parent
        lease.release()
        shutil.rmtree(folder, ignore_errors=True)


async def _save(run: _Run) -> None:
    """The run's ``run.json`` replaced by what it says now, off the loop (as `_made`), after the
    saves asked before it: a decision taken the moment a run shows it paused saves while the
    pause's own save may still be writing, and the later one must land last."""
    async with run.saving:
        record = run.record()
        await off_loop(lambda: _write(run.folder / RUN_FILE, record))


def _write(path: Path, data: dict[str, Any]) -> None:
    """`data` as the JSON at `path`, replaced whole (a kill leaves the old file or the new one)."""
    temporary = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")  # a write cancelled mid-way races none
    temporary.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    os.replace(temporary, path)
