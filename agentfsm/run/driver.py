"""`RunDriver`: one run of a machine, and the one loop that drives it.

The definition (a `MachineTable` and the model that owns it, an agent) is
apart from one run of it, as pydantic-graph keeps `Graph` apart from
`GraphRun`: the driver holds that run's private state (whether it is
active, paused, where a phase's action is running, when the state was
entered, what records it) and its loop. `iter()` exposes the loop; `run()`
drains the same loop. The driver reads states by their role in the table
(phase, pause, final), never by name, so any table runs on it.

Every edge goes through `fire`: the table picks the edge (through
transitions), this builds the `Transition` event (only when someone reads
it), logs it and hands it to the listeners, a checkpointer among them.

An app may hold a run between edges (`Driven.hold`, an app's breakpoints):
after each edge into a phase, before the phase's work, the loop awaits the
hold; the run is then neither paused nor ended, its task simply waits, and
a cancellation there ends it `cancelled` as one inside a phase does.

Recording never breaks a run: a listener's exception (a trace or a
checkpoint that cannot be written, a callback's bug) is kept by the event
delivery instead of escaping from the middle of an edge or a phase, and the
loop reads it between phases (before an action, and after it, before its
`done`): the run then ends on `fail`, its open calls answered, with the
failure as its error. A failure of the edge into a final state, or one found
when the run's last records are flushed (a checkpoint writes off the event
loop), has no phase left to fail: the run keeps that state, and its error
names the failure.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from time import perf_counter

from ..errors import AgentBusyError, PauseRun
from ..fsm.machine import Payload
from ..log import enabled as log_enabled
from ..log import event
from .events import RunPaused, Transition
from .result import RunResult, StopReason
from .view import Driven

__all__ = ["RunDriver"]


def _cancellation() -> type[BaseException]:
    """asyncio's `CancelledError`. `import agentfsm` does not load asyncio (a fifth of its import
    time); a phase runs in an event loop, so asyncio is loaded by the time this is asked."""
    import asyncio

    return asyncio.CancelledError


def _interruption(exc: BaseException) -> str:
    """The error of a run that something outside its phases stopped: a task's cancellation, a
    KeyboardInterrupt (a second Ctrl-C under `asyncio.run`), a SystemExit (`sys.exit()` in a
    tool). None of them is the phase's failure, so the run ends `cancelled` (every open call
    answered) and the exception goes on up: a process asked to stop, stops."""
    if isinstance(exc, _cancellation()):
        return "CancelledError: the run was cancelled"
    if isinstance(exc, SystemExit):
        code = "" if exc.code is None else f" (exit code {exc.code})"
        return f"SystemExit: the run was interrupted{code}"
    return f"{type(exc).__name__}: the run was interrupted"


class RunDriver:
    """One run of `model`'s table: `steps()` is the loop, `fire()` takes an edge.

    A driver lives as long as its run, pauses included: a paused run's driver
    stays with the model, and `steps(None)` continues it. `closers` are called
    when the run ends (not when it pauses): the listeners a run subscribed,
    such as its checkpointer, unsubscribe there.
    """

    def __init__(self, model: Driven, *, closers: tuple[Callable[[], None], ...] = ()) -> None:
        self.model = model
        self.closers = closers
        self.active = False
        """True while the loop runs (a second run on the model is refused meanwhile)."""
        self.paused: str | None = None
        """Why the run paused, while it is paused."""
        self.phase_running = False
        """True while a phase's action is awaited (edits wait for it to finish)."""
        self._yields = False
        self._entered_at = perf_counter()

    # -- the loop ----------------------------------------------------------------

    async def steps(self, request: str | None, *, yields: bool) -> AsyncGenerator[Transition | None, None]:
        """The engine loop. Start a run on `request` (None: continue this one, after a pause or a
        restore), then await each phase's action and fire its `done` trigger, until the run
        reaches a state that is not a phase (final), fails, or pauses. Yields after every edge:
        the `Transition`, or None when nobody reads it (`yields` False, nobody listening)."""
        model = self.model
        table = model.table
        if self.active:
            raise AgentBusyError("a run's loop was entered twice")  # the model checks first
        self.active, self._yields, self.paused = True, yields, None
        try:
            resuming = request is None
            entered: Transition | None = None
            if request is not None:
                if model.run_state.state != table.initial:
                    yield self.fire(table.reset)
                model.open_run(request)
                yield (entered := self.fire(table.start))
            while (spec := table.by_name[model.run_state.state]).is_phase:
                assert spec.done is not None  # the table's validation guarantees it
                if (failure := model.listener_failure()) is not None:  # an edge or an edit unrecorded
                    yield self.abort(table.fail, _described(failure), failure)
                    break
                if entered is not None and (hold := model.hold) is not None:
                    try:
                        await hold(entered)
                    except Exception as exc:  # the hold's own bug: the run fails, as a phase's would
                        yield self.abort(table.fail, f"{type(exc).__name__}: {exc}", exc)
                        break
                    except BaseException as exc:  # cancelled while held: as in a phase
                        self.abort(table.cancel, _interruption(exc), exc)
                        raise
                    self._entered_at = perf_counter()  # the time held is not the phase's work
                action, resumed, resuming = spec.action, resuming, False
                if action is None:  # a pause with nothing to do: stop on entry, go on when resumed
                    if not resumed:
                        self.paused = spec.name.lower()
                        break
                    yield (entered := self.fire(spec.done))
                    continue
                self.phase_running = True
                try:
                    await action(model)
                except PauseRun as pause:
                    self.phase_running, self.paused = False, pause.reason
                    break
                except Exception as exc:  # a phase failed: the run ends in ERROR, never crashes
                    self.phase_running = False
                    yield self.abort(table.fail, f"{type(exc).__name__}: {exc}", exc)
                    break
                except BaseException as exc:  # cancelled, KeyboardInterrupt, SystemExit: end, then go on up
                    self.phase_running = False
                    self.abort(table.cancel, _interruption(exc), exc)
                    raise
                self.phase_running = False
                if (failure := model.listener_failure()) is not None:  # the phase's events unrecorded
                    yield self.abort(table.fail, _described(failure), failure)
                    break
                yield (entered := self.fire(spec.done))
        except GeneratorExit:
            # The consumer stopped iterating mid-run: treat it as a cancellation.
            if table.by_name[model.run_state.state].is_phase:
                self.abort(table.cancel, "CancelledError: iteration stopped before the run ended")
            raise
        finally:
            self.active, self._yields = False, False
            try:
                await model.flush_listeners()  # the run's records are durable before it returns
            finally:
                ended = self.settle()
            if ended is not None:
                await model.on_run_end(ended)

    async def run(self, request: str | None) -> RunResult:
        """The loop to its end (or a pause): nobody reads the transitions between steps."""
        async for _ in self.steps(request, yields=False):
            pass
        assert self.model.last_result is not None
        return self.model.last_result

    # -- edges --------------------------------------------------------------------

    def fire(self, trigger: str) -> Transition | None:
        """Take the edge for `trigger` and report it. The `Transition` is built when someone reads
        it: the loop's consumer, a listener, a hold or the `agentfsm` logger; else this returns None."""
        model = self.model
        table, run = model.table, model.run_state
        source = run.state
        edge, guards = table.take(model, trigger)
        run.edges += 1
        now = perf_counter()
        started, self._entered_at = self._entered_at, now
        if edge.stop_reason is not None:
            run.stop_reason = edge.stop_reason
        logs = log_enabled()
        if not (self._yields or logs or model.listening or model.hold is not None):
            return None
        came, went, turn = table.by_name[source], table.by_name[edge.dest], model.turn
        transition = Transition(
            agent=model.name,
            run_id=run.run_id,
            trigger=trigger,
            source=source,
            dest=edge.dest,
            step=run.step,
            guards=guards,
            stop_reason=edge.stop_reason,
            duration_s=now - started,
            reply=turn.reply if turn is not None and Payload.REPLY in came.produces else None,
            tool_calls=tuple(turn.pending_calls)
            if turn is not None and Payload.PENDING_CALLS in went.consumes
            else (),
            observations=tuple(turn.observations)
            if turn is not None and Payload.OBSERVATIONS in came.produces
            else (),
            error=run.error if went.final is not None else None,
        )
        if logs:
            event("transition", **transition.log_fields())
        model.emit(transition)
        return transition

    def abort(self, trigger: str, error: str, exception: BaseException | None = None) -> Transition | None:
        """End the run on `trigger` (the table's `fail` or `cancel`) with `error` (the text of
        `exception`, when an exception ended it), closing what it left open first."""
        run = self.model.run_state
        run.error, run.exception = error, exception
        self.model.interrupt()
        return self.fire(trigger)

    async def cancel(self) -> RunResult:
        """End this paused run on `cancel` (its `on_run_end` included); returns its result."""
        self.paused = None
        self.abort(self.model.table.cancel, "CancelledError: the paused run was cancelled")
        try:
            await self.model.flush_listeners()
        finally:
            ended = self.settle()
        assert ended is not None
        await self.model.on_run_end(ended)
        return ended

    def release(self) -> None:
        """Call the `closers` (once): the run is over, or replaced by one restored from a checkpoint."""
        closers, self.closers = self.closers, ()
        for close in closers:
            close()

    def restarted(self) -> None:
        """The run was restored from a checkpoint: time in its state counts from now."""
        self._entered_at = perf_counter()

    # -- the outcome ------------------------------------------------------------------

    def settle(self) -> RunResult | None:
        """Close the run that ended or paused: its result in `last_result`, logged.

        Returns the result of a run that ended, whose `on_run_end` the caller awaits;
        None for a paused run (its `on_run_end` comes when it ends) or one that never
        started (its request was refused before the `start` edge).
        """
        model = self.model
        run = model.run_state
        spec = model.table.by_name[run.state]
        if self.paused is not None:
            reason = StopReason.of(self.paused)
            model.last_result = model.run_result(spec, reason)
            if model.listening:  # the run waits: an exporter ends its span here, not at a far-off end
                model.emit(
                    RunPaused(
                        agent=model.name, run_id=run.run_id, step=run.step, state=run.state, reason=reason
                    )
                )
            event("run_paused", agent=model.name, run_id=run.run_id, state=run.state, reason=self.paused)
            return None
        self.release()
        failure = model.listener_failure()  # the ones `abort`'s own edge raised follow from its error
        if spec.final is None or run.stop_reason is None:
            return None
        if failure is not None and run.error is None:  # the edge into the final state was not recorded
            run.error, run.exception = _described(failure), failure
        result = model.last_result = model.run_result(spec, None)
        if log_enabled():  # its fields are built only for a logger that writes them
            event(
                "run_finished",
                agent=model.name,
                run_id=run.run_id,
                state=str(result.state),
                stop_reason=str(result.stop_reason),
                steps=result.steps,
            )
        return result


def _described(failure: Exception) -> str:
    """A listener's failure as a run's `error`: ``"ExceptionType: message"``, as a phase's."""
    return f"{type(failure).__name__}: {failure}"
