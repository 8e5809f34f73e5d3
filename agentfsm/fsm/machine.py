"""The machine as data: states with their roles, named guards, edges, and one compiled `transitions.Machine`.

The table is declared once (the agent's is `agentfsm.agent.table`) and read by
the engine, the diagram renderer and the docs. Each state says what it *is*
(`StateSpec`: a phase, a pause, or final with the state it reports), so
nothing outside the table needs to know a state's name to know its meaning.
A table compiles to one `transitions.Machine` that every model using it
shares: models are not registered with the machine (no per-model build cost,
no references kept). transitions builds and holds the machine: its states, its
events, and each event's transitions from each state, in the table's order.
Firing a trigger is this module's own walk over those lists (`MachineTable.take`,
one function): the first transition from the model's state whose guard holds
moves the model and applies the edge's effect. It does not go through
transitions' generic `Event.trigger` and `Transition.execute`, which resolve
callback lists a table never declares, build an `EventData` and log on every
trigger: measured side by side (`tools/bench.py --only overhead`, "a trigger"),
10 µs a trigger against 1, and a one-tool-call run fires seven, about 70% of
the whole run's cost.

This is the only module that talks to `transitions`, and it knows nothing of
agents: any model with a `fsm_state` attribute can be driven.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any, NamedTuple, cast

from transitions import Machine, Transition

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
    PLAN = "plan"
    """A flow's plan: a phase that produces it asks a planner for it (a tracer's ``plan`` span)."""


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
    is_phase: bool = field(init=False, repr=False, compare=False)
    """The engine works here: an action to await, or a pause to wait in. Derived from `action`
    and `pause` when the state is declared (the driver reads it at every step)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_phase", self.action is not None or self.pause)
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

    def describe(self) -> dict[str, Any]:
        """The table as JSON-able data: each state with its role, each edge in priority order.

        Why: a trace's header records it, so whatever reads the trace later (the inspector, a
        diagram of the run) draws the run's own machine, an extended agent's or a flow's, without
        importing its classes. Guards and effects are named (their code is not data); a state's
        ``role`` is ``phase``, ``pause``, ``final`` or ``rest``.
        """

        def role(state: StateSpec) -> str:
            if state.final is not None:
                return "final"
            if state.pause:
                return "pause"
            return "phase" if state.is_phase else "rest"

        return {
            "initial": self.initial,
            "reset": self.reset,
            "fail": self.fail,
            "cancel": self.cancel,
            "states": [
                {
                    "name": s.name,
                    "group": s.group,
                    "role": role(s),
                    "final": None if s.final is None else str(s.final),
                    "done": s.done,
                    "doc": s.doc,
                }
                for s in self.states
            ],
            "edges": [
                {
                    "trigger": e.trigger,
                    "source": e.source,
                    "dest": e.dest,
                    "guard": e.guard.name if e.guard else None,
                    "guard_doc": e.guard.doc if e.guard else "",
                    "stop_reason": None if e.stop_reason is None else str(e.stop_reason),
                    "effect": e.effect.name if e.effect else None,
                }
                for e in self.edges
            ],
        }

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
        _link(machine)
        return machine

    def take(self, model: Any, trigger: str) -> tuple[Edge, tuple[GuardOutcome, ...]]:
        """Fire `trigger` on `model`: the walk (see the module's docstring). Over transitions' list
        of the trigger's transitions from the model's `fsm_state`, in table order, the first whose
        guard holds (or that has none) sets `fsm_state` to its destination and applies its edge's
        effect. Returns that edge and the guards evaluated, in order (each transition knows them:
        the guards of those before it from its state failed). A trigger with no edge from the
        state, or no guard holding, is a table mistake (`MachineSetupError`): every phase's last
        edge is unguarded, so neither happens in a run."""
        event = self.machine.events.get(trigger)
        if event is None:
            raise MachineSetupError(f"unknown trigger {trigger!r}; known: {sorted(self.machine.events)}")
        state = model.fsm_state
        # Typed, not cast (a call at every trigger): the machine makes only `_EdgeTransition`s.
        candidates: list[_EdgeTransition] | None = event.transitions.get(state)  # type: ignore[assignment]
        if not candidates:
            raise MachineSetupError(
                f"trigger {trigger!r} has no edge from state {state!r}; it fires from "
                f"{sorted(name for name, edges in event.transitions.items() if edges)!r}"
            )
        for transition in candidates:
            edge = transition.edge
            if edge.guard is not None and not edge.guard.check(model):
                continue
            model.fsm_state = transition.dest
            if edge.effect is not None:
                edge.effect.apply(model)
            return transition.taken
        evaluated = [GuardOutcome(t.edge.guard.name, False) for t in candidates if t.edge.guard]
        raise MachineSetupError(
            f"no guard held for trigger {trigger!r} from state {state!r} "
            f"(evaluated: {evaluated!r}); add an unguarded fallback edge"
        )

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
    """transitions' `Transition` of a table edge (its `transition_cls` extension point): it carries
    the edge and what `MachineTable.take` returns when it is taken. transitions' own `execute` is
    never called (the walk is `take`'s)."""

    def __init__(self, source: str, dest: str, *args: Any, edge: Edge, **kwargs: Any) -> None:
        super().__init__(source, dest, *args, **kwargs)
        self.edge = edge
        self.taken: tuple[Edge, tuple[GuardOutcome, ...]] = (edge, ())
        """The edge and the guards evaluated when this transition is taken (`_link`)."""


def _link(machine: Machine) -> None:
    """Give each transition the guard outcomes of its being taken: the guards of the transitions
    tried before it from the same state (all failed), then its own."""
    for event in machine.events.values():
        for candidates in event.transitions.values():
            failed: tuple[GuardOutcome, ...] = ()
            for transition in cast("list[_EdgeTransition]", candidates):
                guard = transition.edge.guard
                held = (GuardOutcome(guard.name, True),) if guard is not None else ()
                transition.taken = (transition.edge, failed + held)
                if guard is not None:
                    failed += (GuardOutcome(guard.name, False),)


class _TableMachine(Machine):
    transition_cls = _EdgeTransition
