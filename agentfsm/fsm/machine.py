"""The machine as data: states with their roles, named guards, edges, and one compiled `transitions.Machine`.

The table is declared once (the agent's is `agentfsm.agent.table`) and read by
the engine, the diagram renderer and the docs. Each state says what it *is*
(`StateSpec`: a phase, a pause, or final with the state it reports), so
nothing outside the table needs to know a state's name to know its meaning.
A table compiles to one `transitions.Machine` that every model using it
shares: models are not registered with the machine (no per-model build cost,
no references kept); `MachineTable.take` fires a trigger on a model through
transitions' own `Event.trigger`, specialised by its `event_cls` and
`transition_cls` extension points.

This is the only module that talks to `transitions`, and it knows nothing of
agents: any model with a `fsm_state` attribute can be driven.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from typing import Any, NamedTuple, cast

from transitions import Event, EventData, Machine, MachineError, Transition

from ..errors import MachineSetupError

__all__ = ["Edge", "Effect", "Guard", "GuardOutcome", "MachineTable", "Payload", "StateSpec"]

PhaseAction = Callable[[Any], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Guard:
    """A named condition on an edge. The name is the edge label and the log field."""

    name: str
    check: Callable[[Any], bool]
    """Called with the model; must be cheap and free of I/O."""
    doc: str = ""


@dataclass(frozen=True, slots=True)
class Effect:
    """Synchronous bookkeeping done when an edge fires (``step := 1``, say)."""

    name: str
    apply: Callable[[Any], None]


class Payload(StrEnum):
    """What of a run a phase works on or hands on (`StateSpec.consumes`, `produces`). A driver
    carries each on the transitions out of the phase that produces it (or into the one that
    consumes it), and an edit of it is allowed in the phase that consumes it. A member, not a
    string, so that a misspelt role is an error where the table is declared, not a payload that
    silently never travels."""

    REPLY = "reply"
    """The model's reply: a phase that produces it asks the model."""
    PENDING_CALLS = "pending_calls"
    """The tool calls about to run."""
    OBSERVATIONS = "observations"
    """The tools' results, before they reach memory."""


_PAYLOADS = frozenset(Payload) | frozenset(member.value for member in Payload)


@dataclass(frozen=True, slots=True)
class StateSpec:
    """A state, and its role in a run.

    - A *phase* has an `action` (the engine's I/O, awaited in this state) and a
      `done` trigger fired when the action returns.
    - A *pause* (`pause=True`) is a phase where a run may stop and wait: its
      action may raise `PauseRun`, and a pause with no action always stops on
      entry; `resume()` continues it (running the action again, or firing `done`).
    - A *final* state (`final=...`) ends the run; `final` is the top-level state
      a run ending there reports (``AgentState.FINISHED``, ``AgentState.ERROR``),
      and the table gives it the reset edge back to the initial state.
    - Otherwise the state is a resting one: the initial state, left by an edge.
    """

    name: str
    group: str | None = None
    """The top-level state this one belongs to (``"RUNNING"`` for phases)."""
    action: PhaseAction | None = None
    """Awaited with the model while the machine is in this state."""
    done: str | None = None
    """The trigger fired when `action` completes (or, in a pause without one, on resume)."""
    doc: str = ""
    final: str | None = None
    """A final state: the top-level state it reports (a `StrEnum` member or a string)."""
    pause: bool = False
    """A run may pause here (`PauseRun`, or always on entry when there is no `action`)."""
    consumes: frozenset[Payload] = frozenset()
    """What of the run this phase works on (`Payload.PENDING_CALLS`, ...): edits and the edges into
    it read this, so edges into it carry it and callers may change it here."""
    produces: frozenset[Payload] = frozenset()
    """What this phase leaves for the next (`Payload.REPLY`, ...): edges out of it carry it."""

    def __post_init__(self) -> None:
        for role in ("consumes", "produces"):
            given = getattr(self, role)
            if not isinstance(given, frozenset | set | tuple | list):
                raise MachineSetupError(
                    f"state {self.name!r}: `{role}` must be a set of `Payload` members, got {given!r}"
                )
            unknown = sorted(str(item) for item in given if item not in _PAYLOADS)
            if unknown:
                raise MachineSetupError(
                    f"state {self.name!r}: `{role}` names {unknown[0]!r}, which is no payload; "
                    f"use the `Payload` members: {', '.join(member.name for member in Payload)}"
                )
            object.__setattr__(self, role, frozenset(Payload(item) for item in given))

    @property
    def is_phase(self) -> bool:
        """The engine works here: an action to await, or a pause to wait in."""
        return self.action is not None or self.pause


@dataclass(frozen=True, slots=True)
class Edge:
    """One row of the table: on `trigger`, from `source` to `dest` when `guard` holds.

    `source` may name a group (``"RUNNING"``): the edge then leaves every state
    of that group, including states added later by subclasses. `stop_reason`
    (a `StopReason`, or any string of a user's own) is what a run ending
    through this edge reports.
    """

    trigger: str
    source: str
    dest: str
    guard: Guard | None = None
    stop_reason: str | None = None
    effect: Effect | None = None

    @property
    def label(self) -> str:
        return f"{self.trigger} [{self.guard.name}]" if self.guard else self.trigger


class GuardOutcome(NamedTuple):
    """One guard evaluated while choosing an edge, and whether it held."""

    name: str
    held: bool


@dataclass(frozen=True)
class MachineTable:
    """States and edges, in priority order: for one trigger, the first edge whose guard holds wins.

    Every final state without an edge on `reset` gets one back to `initial`,
    appended to `edges`: a finished run can always start over. Every phase has
    an unguarded edge on `fail` and on `cancel` to a final state (the validation
    names a missing one): a driver fires them, whatever the phase, when its
    action raised or the run was cancelled, and a run always ends.
    """

    states: tuple[StateSpec, ...]
    edges: tuple[Edge, ...]
    initial: str
    reset: str = "reset"
    """The trigger that takes a final state back to `initial`."""
    fail: str = "fail"
    """The trigger that ends a run whose phase raised (or whose events could not be recorded)."""
    cancel: str = "cancel"
    """The trigger that ends a run cancelled in a phase or a pause (or abandoned there)."""

    def __post_init__(self) -> None:
        resettable = {e.source for e in self.edges if e.trigger == self.reset}
        implicit = tuple(
            Edge(self.reset, s.name, self.initial)
            for s in self.states
            if s.final is not None and s.name not in resettable
        )
        object.__setattr__(self, "edges", tuple(self.edges) + implicit)
        object.__setattr__(self, "states", tuple(self.states))
        self._validate()

    # -- reading --------------------------------------------------------------

    @cached_property
    def by_name(self) -> dict[str, StateSpec]:
        return {state.name: state for state in self.states}

    @cached_property
    def groups(self) -> dict[str, tuple[str, ...]]:
        """Group name -> member states, in declaration order."""
        groups: dict[str, list[str]] = {}
        for state in self.states:
            if state.group:
                groups.setdefault(state.group, []).append(state.name)
        return {name: tuple(members) for name, members in groups.items()}

    @cached_property
    def finals(self) -> tuple[StateSpec, ...]:
        """The final states, in declaration order."""
        return tuple(state for state in self.states if state.final is not None)

    @cached_property
    def start(self) -> str:
        """The trigger that starts a run: the first edge out of `initial`."""
        return next(edge.trigger for edge in self.edges if edge.source == self.initial)

    @cached_property
    def entry(self) -> str:
        """Where a run starts (and each step begins): the destination of `start`'s edge."""
        return next(edge.dest for edge in self.edges if edge.source == self.initial)

    def sources(self, edge: Edge) -> tuple[str, ...]:
        return self.groups.get(edge.source, (edge.source,))

    def phase_that(self, *, consumes: Payload) -> StateSpec | None:
        """The first phase (not a pause) that works on `consumes`, or None."""
        return next((s for s in self.states if consumes in s.consumes and not s.pause), None)

    # -- extending ------------------------------------------------------------

    def extend(
        self,
        *,
        states: Iterable[StateSpec] = (),
        edges: Iterable[Edge] = (),
        before: Edge | None = None,
    ) -> MachineTable:
        """A new table with more states and edges; the original is untouched.

        New edges go at the end, or just before `before` (an edge of this
        table), which is how a new guarded edge takes priority over an
        existing fallback such as ``OBSERVING -> THINKING [otherwise]``.
        """
        new_edges = tuple(edges)
        if before is None:
            all_edges = self.edges + new_edges
        else:
            if before not in self.edges:
                raise MachineSetupError(
                    f"`before` edge {before.source}->{before.dest} on {before.trigger!r} is not in "
                    "this table; pass one of `table.edges`"
                )
            at = self.edges.index(before)
            all_edges = self.edges[:at] + new_edges + self.edges[at:]
        return MachineTable(
            states=self.states + tuple(states),
            edges=all_edges,
            initial=self.initial,
            reset=self.reset,
            fail=self.fail,
            cancel=self.cancel,
        )

    def edge(self, source: str, dest: str, trigger: str | None = None) -> Edge:
        """Look up an edge by its ends (for `extend(before=...)`)."""
        for edge in self.edges:
            if edge.source == source and edge.dest == dest and trigger in (None, edge.trigger):
                return edge
        raise MachineSetupError(f"no edge {source}->{dest} in this table")

    # -- compiling and firing -------------------------------------------------------

    @cached_property
    def machine(self) -> Machine:
        """The `transitions.Machine` for this table, built once and shared by every model."""
        transitions = [
            {"trigger": edge.trigger, "source": list(self.sources(edge)), "dest": edge.dest, "edge": edge}
            for edge in self.edges
        ]
        machine = _TableMachine(
            model=None,
            states=[state.name for state in self.states],
            initial=self.initial,
            transitions=transitions,
            auto_transitions=False,
            send_event=True,
            model_attribute="fsm_state",
        )
        for event in machine.events.values():
            assert isinstance(event, _EdgeEvent)
            event.link()
        return machine

    def take(self, model: Any, trigger: str) -> tuple[Edge, tuple[GuardOutcome, ...]]:
        """Fire `trigger` on `model` through transitions' `Event.trigger`: the first edge from the
        model's `fsm_state` whose guard holds moves it. Returns that edge and the guards evaluated,
        in order. A trigger with no edge from the state, or no guard holding, is a table mistake
        (`MachineSetupError`): every phase's last edge is unguarded, so neither happens in a run."""
        event = cast("_EdgeEvent | None", self.machine.events.get(trigger))
        if event is None:
            raise MachineSetupError(f"unknown trigger {trigger!r}; known: {sorted(self.machine.events)}")
        taken: list[_EdgeTransition] = []
        try:
            fired = event.trigger(model, taken)
        except MachineError:
            state = model.fsm_state
            raise MachineSetupError(
                f"trigger {trigger!r} has no edge from state {state!r}; it fires from "
                f"{sorted(name for name, edges in event.transitions.items() if edges)!r}"
            ) from None
        if not fired:
            state = model.fsm_state
            evaluated = [GuardOutcome(t.guard.name, False) for t in event.transitions[state] if t.guard]
            raise MachineSetupError(
                f"no guard held for trigger {trigger!r} from state {state!r} "
                f"(evaluated: {evaluated!r}); add an unguarded fallback edge"
            )
        return taken[0].taken

    # -- validation -------------------------------------------------------------

    def _validate(self) -> None:
        names = [state.name for state in self.states]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise MachineSetupError(f"states declared twice: {duplicates!r}")
        known = set(names) | {state.group for state in self.states if state.group}
        if self.initial not in known:
            raise MachineSetupError(f"initial state {self.initial!r} is not declared; add a StateSpec for it")
        for edge in self.edges:
            for end in (edge.source, edge.dest):
                if end not in known:
                    raise MachineSetupError(
                        f"edge {edge.source}->{edge.dest} on {edge.trigger!r} names unknown state "
                        f"{end!r}; declare it with `extend(states=[StateSpec({end!r}, ...)])`"
                    )
            if edge.dest in self.groups:
                raise MachineSetupError(
                    f"edge {edge.label!r} ends in group {edge.dest!r}; name one of its states"
                )
        reachable = {self.initial}
        frontier = [self.initial]
        while frontier:
            here = frontier.pop()
            for edge in self.edges:
                if here in self.sources(edge) and edge.dest not in reachable:
                    reachable.add(edge.dest)
                    frontier.append(edge.dest)
        unreachable = [name for name in names if name not in reachable]
        if unreachable:
            raise MachineSetupError(
                f"states {unreachable!r} cannot be reached from {self.initial!r}; add an edge into them"
            )
        for state in self.states:
            self._validate_role(state)

    def _validate_role(self, state: StateSpec) -> None:
        name = state.name
        if state.final is not None:
            if state.is_phase:
                raise MachineSetupError(
                    f"final state {name!r} has an action or pauses; a run ends there: drop `final=` "
                    "to make it a phase, or drop the action"
                )
            return
        if not state.is_phase:
            if name != self.initial:
                raise MachineSetupError(
                    f"state {name!r} has no action, no pause and no final role, so a run reaching it "
                    f"could neither go on nor end; declare `StateSpec({name!r}, final=AgentState.FINISHED)` "
                    "(or ERROR), give it an `action` and a `done` trigger, or make it a `pause`"
                )
            return
        if state.done is None:
            raise MachineSetupError(
                f"phase {name!r} has no `done` trigger; name the trigger fired when it completes"
            )
        ways_out = [e for e in self.edges if e.trigger == state.done and name in self.sources(e)]
        if not ways_out or ways_out[-1].guard is not None:
            raise MachineSetupError(
                f"phase {name!r} needs an unguarded last edge on {state.done!r}, "
                "so the run can always move on"
            )
        for trigger, when in ((self.fail, "its action raises"), (self.cancel, "the run is cancelled")):
            ends = [e for e in self.edges if e.trigger == trigger and name in self.sources(e)]
            if not ends or ends[-1].guard is not None or self.by_name[ends[-1].dest].final is None:
                groups = sorted(
                    {e.source for e in self.edges if e.trigger == trigger and e.source in self.groups}
                )
                into = (
                    f", or put it in group {groups[0]!r}, whose edge on {trigger!r} it then has"
                    if groups
                    else ""
                )
                raise MachineSetupError(
                    f"phase {name!r} has no unguarded edge on {trigger!r} to a final state, and the "
                    f"driver fires {trigger!r} there when {when}: add Edge({trigger!r}, {name!r}, "
                    f"<an error state>){into}"
                )


class _EdgeTransition(Transition):
    """transitions' `Transition`, specialised for a table edge (its `transition_cls` extension point).

    transitions' `Event` picks the edge: it tries the transitions of the
    current state in declaration order and stops at the first whose `execute`
    returns True. The generic `execute` runs callback lists a table never
    declares (prepare, before, after, on_enter, on_exit) and logs a dozen
    debug lines per trigger; this one evaluates the named guard, moves the
    model, applies the edge's effect and reports itself to the caller.
    """

    def __init__(self, source: str, dest: str, *args: Any, edge: Edge, **kwargs: Any) -> None:
        super().__init__(source, dest, *args, **kwargs)
        self.edge = edge
        self.guard = edge.guard
        self.taken: tuple[Edge, tuple[GuardOutcome, ...]] = (edge, ())
        """The edge and the guards evaluated when this transition fires (`_EdgeEvent.link`)."""

    def execute(self, event_data: EventData) -> bool:
        model: Any = event_data.model  # the stubs type it `object`; it is the table's model
        if self.guard is not None and not self.guard.check(model):
            return False
        model.fsm_state = self.dest
        if self.edge.effect is not None:
            self.edge.effect.apply(model)
        args: Any = event_data.args
        taken: list[_EdgeTransition] = args[0]  # passed by `MachineTable.take`
        taken.append(self)
        return True


class _EdgeEvent(Event):
    """transitions' `Event`, specialised for table triggers (its `event_cls` extension point).

    It tries the transitions registered for the model's state in declaration
    order and stops at the first that executes, as the generic one does; it
    skips the machine-wide callback lists (prepare_event, finalize_event,
    on_exception) and the event queue, which tables never declare (the
    generic path costs about three times as much per trigger, see BENCHMARKS.md).
    """

    transitions: defaultdict[str, list[_EdgeTransition]]  # type: ignore[assignment]

    def link(self) -> None:
        """Give each transition the guard outcomes of its firing: the guards of the
        transitions tried before it from the same state (all failed), then its own."""
        for candidates in self.transitions.values():
            failed: tuple[GuardOutcome, ...] = ()
            for transition in candidates:
                guard = transition.guard
                held = (GuardOutcome(guard.name, True),) if guard is not None else ()
                transition.taken = (transition.edge, failed + held)
                if guard is not None:
                    failed += (GuardOutcome(guard.name, False),)

    def trigger(self, model: Any, *args: Any, **kwargs: Any) -> bool:
        state: str = model.fsm_state
        candidates = self.transitions.get(state)
        if not candidates:
            raise MachineError(f"Can't trigger event {self.name} from state {state}!")
        event_data = EventData(None, self, self.machine, model, args, kwargs)
        for transition in candidates:
            event_data.transition = transition
            if transition.execute(event_data):
                event_data.result = True
                return True
        return False


class _TableMachine(Machine):
    transition_cls = _EdgeTransition
    event_cls = _EdgeEvent
