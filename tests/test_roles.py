"""State roles declared in the table: a user's final and pause states behave as declared everywhere."""

from __future__ import annotations

import dataclasses
import json

import pytest

from agentfsm import (
    AgentState,
    Edge,
    Guard,
    Payload,
    StateSpec,
    StopReason,
    Terminate,
    ToolCallAgent,
    Transition,
)
from agentfsm.agent.stepping import Stepper
from agentfsm.agent.table import AGENT_TABLE, NEXT_STEP
from agentfsm.cli.output import exit_code
from agentfsm.errors import AgentBusyError, MachineSetupError
from agentfsm.fsm import machine
from agentfsm.fsm.diagram import to_dot, to_mermaid
from agentfsm.testing import ScriptedLLM, reply

TERMINATE = reply(tool_calls=[("terminate", {"status": "success"})])

HANDOFF = Guard("handoff", lambda agent: "hand off" in (agent.run_state.output or ""), "the model hands off")


class HandOffAgent(ToolCallAgent):
    """A user's final state, declared as docs/concepts/machine.md does: reached by a guarded `think_done`
    edge."""

    table = AGENT_TABLE.extend(
        states=[StateSpec("HANDED_OFF", final=AgentState.FINISHED, doc="a person takes over")],
        edges=[Edge("think_done", "THINKING", "HANDED_OFF", HANDOFF, stop_reason="handed_off")],
        before=AGENT_TABLE.edge("THINKING", "ACTING"),
    )


async def test_a_users_final_state_ends_the_run_as_declared_and_the_next_run_starts_cleanly():
    llm = ScriptedLLM([reply("I will hand off to a person"), TERMINATE])
    agent = HandOffAgent(llm=llm, tools=[Terminate()])
    result = await agent.run("help")
    assert (result.state, result.stop_reason, agent.fsm_state) == (
        AgentState.FINISHED,
        "handed_off",
        "HANDED_OFF",
    )
    assert agent.state is AgentState.FINISHED and agent.phase is None and not result.paused
    assert exit_code(result) == 0
    seen: list[Transition] = []
    agent.on_transition(seen.append)
    again = await agent.run("next")  # not refused as a paused run: the implicit reset edge is taken
    assert again.stop_reason is StopReason.TERMINATED
    assert [(t.source, t.dest, t.trigger) for t in seen[:2]] == [
        ("HANDED_OFF", "IDLE", "reset"),
        ("IDLE", "THINKING", "start"),
    ]


def test_every_final_state_gets_the_reset_edge_and_is_drawn_final():
    table = HandOffAgent.table
    assert table.edge("HANDED_OFF", "IDLE").trigger == "reset"
    assert [s.name for s in table.finals] == ["FINISHED", "ERROR", "HANDED_OFF"]
    mermaid = to_mermaid(table)
    assert "HANDED_OFF --> [*]" in mermaid and "FINISHED --> [*]" in mermaid
    assert "THINKING --> HANDED_OFF: think_done [handoff] / handed_off" in mermaid
    assert '"HANDED_OFF" -> "IDLE" [label="reset", constraint=false]' in to_dot(table)


async def test_a_users_final_state_is_where_stepping_ends():
    agent = HandOffAgent(llm=ScriptedLLM([reply("hand off now")]), tools=[Terminate()])
    stepper = Stepper(agent, "help")
    while await stepper.step() is not None:
        pass
    assert stepper.finished and stepper.result is not None and stepper.result.stop_reason == "handed_off"


async def _wait_for_a_person(agent: ToolCallAgent) -> None:
    """Nothing to do: the pause has no action, the app resumes it."""


class ReviewAgent(ToolCallAgent):
    """A user's pause state: after each step's observations the run waits for a review."""

    table = AGENT_TABLE.extend(
        states=[StateSpec("REVIEW", "RUNNING", done="reviewed", pause=True, doc="a person reviews")],
        edges=[
            Edge("observe_done", "OBSERVING", "REVIEW", Guard("first_step", lambda a: a.run_state.step == 1)),
            Edge("reviewed", "REVIEW", "THINKING", effect=NEXT_STEP),
        ],
        before=AGENT_TABLE.edge("OBSERVING", "THINKING"),
    )


async def test_a_users_pause_state_pauses_run_and_resume_goes_on(toolbox):
    agent = ReviewAgent(
        llm=ScriptedLLM([reply(tool_calls=[("add", {"a": 1, "b": 2})]), TERMINATE]), tools=toolbox
    )
    paused = await agent.run("add")
    assert paused.paused and paused.state is AgentState.RUNNING and paused.stop_reason == "review"
    assert agent.fsm_state == "REVIEW" and agent.phase == "REVIEW"
    assert exit_code(paused) == 4
    with pytest.raises(AgentBusyError, match="has a paused run"):
        await agent.run("another")
    done = await agent.resume()
    assert done.stop_reason is StopReason.TERMINATED and done.steps == 2


async def test_a_paused_users_state_can_be_cancelled(toolbox):
    agent = ReviewAgent(llm=ScriptedLLM([reply(tool_calls=[("add", {"a": 1, "b": 2})])]), tools=toolbox)
    await agent.run("add")
    cancelled = await agent.cancel()
    assert (cancelled.state, cancelled.stop_reason) == (AgentState.ERROR, StopReason.CANCELLED)


def test_a_state_with_no_action_no_way_out_and_no_final_role_is_rejected_with_the_fix():
    with pytest.raises(
        MachineSetupError, match=r"'LIMBO' has no action, no pause and no final role.*final=AgentState"
    ):
        AGENT_TABLE.extend(
            states=[StateSpec("LIMBO")],
            edges=[Edge("think_done", "THINKING", "LIMBO", HANDOFF)],
            before=AGENT_TABLE.edge("THINKING", "ACTING"),
        )
    with pytest.raises(MachineSetupError, match="final state 'GONE' has an action"):
        AGENT_TABLE.extend(
            states=[StateSpec("GONE", action=_wait_for_a_person, done="x", final=AgentState.FINISHED)],
            edges=[Edge("think_done", "THINKING", "GONE", HANDOFF)],
            before=AGENT_TABLE.edge("THINKING", "ACTING"),
        )


async def test_run_and_a_drained_iter_emit_identical_events(toolbox):
    def events_of(drive: str) -> list[dict[str, object]]:
        return recorded[drive]

    recorded: dict[str, list[dict[str, object]]] = {}
    for drive in ("run", "iter"):
        script = [reply(tool_calls=[("add", {"a": 1, "b": 2}), ("explode", {"reason": "x"})]), reply("done")]
        agent = ToolCallAgent(llm=ScriptedLLM(script), tools=toolbox, name="same")
        events: list[object] = []
        agent.on_event(events.append)
        if drive == "run":
            await agent.run("go")
        else:
            yielded = [t async for t in agent.iter("go")]
            assert yielded == [e for e in events if isinstance(e, Transition)]
        recorded[drive] = [_comparable(e) for e in events]
    assert events_of("run") == events_of("iter")
    assert len(events_of("run")) > 8


def _comparable(event: object) -> dict[str, object]:
    """An event without what differs between any two runs (the run id, durations)."""
    fields = {k: getattr(event, k) for k in event.__dataclass_fields__}  # type: ignore[attr-defined]
    fields.pop("run_id", None)
    fields.pop("duration_s", None)
    if "observation" in fields:
        fields["observation"] = fields["observation"].model_copy(update={"duration_s": 0.0})
    if "observations" in fields:
        fields["observations"] = [o.model_copy(update={"duration_s": 0.0}) for o in fields["observations"]]
    return {"kind": type(event).__name__, **json.loads(json.dumps(fields, default=repr))}


async def test_every_trigger_walks_the_transitions_that_transitions_built(toolbox, monkeypatch):
    """transitions builds and holds the machine (its events and their transitions by state); every
    trigger of a run is `MachineTable.take`'s walk over those lists, never transitions' generic
    `Event.trigger` or `Transition.execute` (measured: ten times the cost of a trigger)."""
    calls: list[str] = []
    original = machine.MachineTable.take

    def spy(self, model, trigger):
        calls.append(trigger)
        return original(self, model, trigger)

    def generic(*args, **kwargs):
        raise AssertionError("transitions' generic trigger path was taken")

    monkeypatch.setattr(machine.MachineTable, "take", spy)
    monkeypatch.setattr(machine.Transition, "execute", generic)
    agent = ToolCallAgent(
        llm=ScriptedLLM([reply(tool_calls=[("add", {"a": 1, "b": 2})]), TERMINATE]), tools=toolbox
    )
    result = await agent.run("add")
    assert result.stop_reason is StopReason.TERMINATED
    assert calls == [
        "start",
        "think_done",
        "act_done",
        "observe_done",
        "think_done",
        "act_done",
        "observe_done",
    ]
    built = AGENT_TABLE.machine.events["observe_done"].transitions["OBSERVING"]
    assert [t.dest for t in built] == ["FINISHED", "FINISHED", "FINISHED", "THINKING"]  # the table's order
    assert all(isinstance(t, machine.Transition) for t in built)  # transitions' own, carrying the edge


async def _review(agent):
    raise OSError("the reviewer is out")


def test_a_phase_the_fail_or_cancel_edges_do_not_reach_is_refused_naming_the_edge():
    """The driver fires the table's `fail` and `cancel` from whatever phase it is in: a phase outside
    the group those edges leave is refused when the table is built, not when a run fails there."""
    review = StateSpec("REVIEWING", None, _review, "review_done")  # in no group
    into = Edge("observe_done", "OBSERVING", "REVIEWING", HANDOFF)
    out = Edge("review_done", "REVIEWING", "THINKING")
    fallback = AGENT_TABLE.edge("OBSERVING", "THINKING")
    with pytest.raises(
        MachineSetupError,
        match=r"phase 'REVIEWING' has no unguarded edge on 'fail' to a final state, and the driver fires "
        r"'fail' there when its action raises: add Edge\('fail', 'REVIEWING', <an error state>\), or put "
        r"it in group 'RUNNING'",
    ):
        AGENT_TABLE.extend(states=[review], edges=[into, out], before=fallback)
    failing = Edge("fail", "REVIEWING", "ERROR", stop_reason=StopReason.ERROR)
    with pytest.raises(MachineSetupError, match=r"phase 'REVIEWING' has no unguarded edge on 'cancel'"):
        AGENT_TABLE.extend(states=[review], edges=[into, out, failing], before=fallback)
    cancelled = Edge("cancel", "REVIEWING", "ERROR", stop_reason=StopReason.CANCELLED)
    AGENT_TABLE.extend(states=[review], edges=[into, out, failing, cancelled], before=fallback)  # accepted


async def test_the_driver_fires_the_tables_own_fail_trigger():
    """A table that names its failure trigger otherwise ends a failing run through that edge."""
    edges = tuple(
        Edge("crash", edge.source, edge.dest, edge.guard, edge.stop_reason)
        if edge.trigger == "fail"
        else edge
        for edge in AGENT_TABLE.edges
    )

    class Crashing(ToolCallAgent):
        table = dataclasses.replace(AGENT_TABLE, edges=edges, fail="crash")

        async def act(self) -> None:
            raise OSError("disk full")

    agent = Crashing(llm=ScriptedLLM([reply(tool_calls=[("terminate", {"status": "success"})])]))
    seen: list[Transition] = []
    agent.on_transition(seen.append)
    result = await agent.run("task")
    assert (result.state, result.stop_reason, result.error) == (
        AgentState.ERROR,
        StopReason.ERROR,
        "OSError: disk full",
    )
    assert (seen[-1].source, seen[-1].dest, seen[-1].trigger) == ("ACTING", "ERROR", "crash")
    with pytest.raises(MachineSetupError, match=r"phase 'THINKING' has no unguarded edge on 'fail'"):
        dataclasses.replace(AGENT_TABLE, edges=edges)  # the edges renamed, the trigger not


def test_payload_roles_are_payload_members_and_a_misspelt_one_is_refused():
    """`produces={"replies"}` was a string nothing read, so the reply silently never travelled."""
    assert AGENT_TABLE.by_name["THINKING"].produces == {Payload.REPLY, Payload.PENDING_CALLS}
    spec = StateSpec("ASKING", "RUNNING", _review, "ask_done", produces=frozenset({"reply"}))
    assert spec.produces == {Payload.REPLY} and all(type(p) is Payload for p in spec.produces)
    with pytest.raises(
        MachineSetupError,
        match=r"state 'ASKING': `produces` names 'replies', which is no payload; use the `Payload` "
        r"members: REPLY, PENDING_CALLS, OBSERVATIONS",
    ):
        StateSpec("ASKING", "RUNNING", _review, "ask_done", produces=frozenset({"replies"}))
    with pytest.raises(MachineSetupError, match=r"`consumes` must be a set of `Payload` members, got 'x'"):
        StateSpec("ASKING", consumes="x")  # type: ignore[arg-type]
