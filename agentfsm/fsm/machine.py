"""The machine as data: states, named guards, edges, and one compiled `transitions.Machine`.

The table is declared once (see `table.py`) and read by the engine, the
diagram renderer and the docs. A table compiles to one `transitions.Machine`
that every agent using it shares: agents are not registered with the machine
(no per-agent build cost, no references kept), the engine fires events on an
agent explicitly: `MachineTable.take` walks the transitions the machine's
`Event` holds for the agent's state (``Event.trigger(agent, firing=...)`` does
the same through transitions' `EventData`).

This is the only module that talks to `transitions`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple, cast

from transitions import Event, EventData, Machine, MachineError, Transition

from ..errors import MachineSetupError
from ..run.result import StopReason

__all__ = ["Edge", "Effect", "Firing", "Guard", "GuardOutcome", "MachineTable", "StateSpec"]

PhaseAction = Callable[[Any], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Guard:
    """A named condition on an edge. The name is the edge label and the log field."""

    name: str
    check: Callable[[Any], bool]
    """Called with the agent; must be cheap and free of I/O."""
    doc: str = ""


@dataclass(frozen=True, slots=True)
class Effect:
    """Synchronous bookkeeping done when an edge fires (``step := 1``, say)."""

    name: str
    apply: Callable[[Any], None]


@dataclass(frozen=True, slots=True)
class StateSpec:
    """A state. A *phase* has an `action` (the engine's I/O) and a `done` trigger."""

    name: str
    group: str | None = None
    """The top-level state this one belongs to (``"RUNNING"`` for phases)."""
    action: PhaseAction | None = None
    """Awaited with the agent while the machine is in this state."""
    done: str | None = None
    """The trigger fired when `action` completes."""
    doc: str = ""


@dataclass(frozen=True, slots=True)
class Edge:
    """One row of the table: on `trigger`, from `source` to `dest` when `guard` holds.

    `source` may name a group (``"RUNNING"``): the edge then leaves every state
    of that group, including states added later by subclasses.
    """

    trigger: str
    source: str
    dest: str
    guard: Guard | None = None
    stop_reason: StopReason | None = None
    effect: Effect | None = None

    @property
    def label(self) -> str:
        return f"{self.trigger} [{self.guard.name}]" if self.guard else self.trigger


class GuardOutcome(NamedTuple):
    """One guard evaluated while choosing an edge, and whether it held."""

    name: str
    held: bool


@dataclass(slots=True)
class Firing:
    """What happened during one trigger: guards evaluated in order, and the edge taken."""

    guards: list[GuardOutcome] = field(default_factory=list)
    edge: Edge | None = None


@dataclass(frozen=True)
class MachineTable:
    """States and edges, in priority order: for one trigger, the first edge whose guard holds wins."""

    states: tuple[StateSpec, ...]
    edges: tuple[Edge, ...]
    initial: str

    def __post_init__(self) -> None:
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

    def sources(self, edge: Edge) -> tuple[str, ...]:
        return self.groups.get(edge.source, (edge.source,))

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
        return MachineTable(states=self.states + tuple(states), edges=all_edges, initial=self.initial)

    def edge(self, source: str, dest: str, trigger: str | None = None) -> Edge:
        """Look up an edge by its ends (for `extend(before=...)`)."""
        for edge in self.edges:
            if edge.source == source and edge.dest == dest and trigger in (None, edge.trigger):
                return edge
        raise MachineSetupError(f"no edge {source}->{dest} in this table")

    # -- compiling --------------------------------------------------------------

    @cached_property
    def machine(self) -> Machine:
        """The `transitions.Machine` for this table, built once and shared by every agent."""
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
            event.link()  # type: ignore[attr-defined]
        return machine

    @cached_property
    def _moves(self) -> dict[str, defaultdict[str, list[_EdgeTransition]]]:
        """Trigger -> state -> the transitions tried from it, in order: the machine's events' own lists."""
        return {name: cast(_EdgeEvent, event).transitions for name, event in self.machine.events.items()}

    def fire(self, model: Any, trigger: str) -> Firing:
        """Fire `trigger` on `model`; return the guards evaluated and the edge taken."""
        edge, guards = self.take(model, trigger)
        return Firing(list(guards), edge)

    def take(
        self, model: Any, trigger: str, state: str | None = None
    ) -> tuple[Edge, tuple[GuardOutcome, ...]]:
        """Fire `trigger` on `model`; return the edge taken and the guards evaluated, in order.
        `state` is the model's `fsm_state`, from a caller that has just read it (None: read it).

        The engine's path (`fire` without the `Firing` record). Guards are pure
        reads of the run, evaluated in table order up to the first that holds, so
        the outcomes are fixed by the edge taken: each edge carries them, built once.
        """
        moves = self._moves.get(trigger)
        if moves is None:
            raise MachineSetupError(f"unknown trigger {trigger!r}; known: {sorted(self.machine.events)}")
        if state is None:
            state = model.fsm_state
        candidates = moves.get(state)
        if candidates:
            # The event's transitions for this state, in declaration order (`_EdgeEvent.trigger`
            # without `EventData`); the first whose guard holds moves the model.
            for transition in candidates:
                check = transition.check
                if check is None or check(model):
                    transition.enter(model)
                    return transition.taken
            evaluated = [GuardOutcome(t.guard.name, False) for t in candidates if t.guard]
            raise MachineSetupError(
                f"no guard held for trigger {trigger!r} from state {state!r} "
                f"(evaluated: {evaluated!r}); add an unguarded fallback edge"
            )
        raise MachineSetupError(
            f"trigger {trigger!r} has no edge from state {state!r}; "
            f"it fires from {sorted(name for name, edges in moves.items() if edges)!r}"
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
            if state.action is None:
                continue
            if state.done is None:
                raise MachineSetupError(f"phase {state.name!r} has an action but no `done` trigger")
            ways_out = [e for e in self.edges if e.trigger == state.done and state.name in self.sources(e)]
            if not ways_out or ways_out[-1].guard is not None:
                raise MachineSetupError(
                    f"phase {state.name!r} needs an unguarded last edge on {state.done!r}, "
                    "so the run can always move on"
                )


class _EdgeTransition(Transition):
    """transitions' `Transition`, specialised for a table edge (its `transition_cls` extension point).

    transitions' `Event` still picks the edge: it tries the transitions of the
    current state in declaration order and stops at the first whose
    `execute` returns True. The generic version runs callback lists this
    engine never declares (prepare, before, after, on_enter, on_exit) and
    logs a dozen debug lines per trigger, which made a trigger cost twice
    the plain machine's; this one evaluates the named guard, moves the model
    and applies the edge's effect.
    """

    def __init__(self, source: str, dest: str, *args: Any, edge: Edge, **kwargs: Any) -> None:
        super().__init__(source, dest, *args, **kwargs)
        self.edge = edge
        self.guard = edge.guard
        self.check = edge.guard.check if edge.guard is not None else None
        self.apply = edge.effect.apply if edge.effect is not None else None
        self.taken: tuple[Edge, tuple[GuardOutcome, ...]] = (edge, ())
        """The edge and the guards evaluated when this transition fires (`_EdgeEvent.link`)."""

    def take(self, model: Any) -> bool:
        """Fire if the guard holds: move the model and apply the edge's effect."""
        check = self.check
        if check is not None and not check(model):
            return False
        self.enter(model)
        return True

    def enter(self, model: Any) -> None:
        """Move the model to `dest` and apply the edge's effect (the guard held)."""
        model.fsm_state = self.dest
        if self.apply is not None:
            self.apply(model)

    def execute(self, event_data: EventData) -> bool:
        if not self.take(event_data.model):
            return False
        firing: Firing | None = event_data.kwargs.get("firing")
        if firing is not None:
            firing.edge, guards = self.taken
            firing.guards = list(guards)
        return True


class _EdgeEvent(Event):
    """transitions' `Event`, specialised for table triggers (its `event_cls` extension point).

    It tries the transitions registered for the model's state in declaration
    order and stops at the first that executes, as the generic one does; it
    skips the machine-wide callback lists (prepare_event, finalize_event,
    on_exception) and the event queue, which tables never declare, and the
    generic path's debug logging (see BENCHMARKS.md). The engine's own path,
    `MachineTable.take`, walks the same per-state `transitions` lists without
    building an `EventData`.
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

    def trigger(self, model: object, *args: Any, **kwargs: Any) -> bool:
        state: str = model.fsm_state  # type: ignore[attr-defined]
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
