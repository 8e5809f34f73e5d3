"""The machine table: one declaration, validated, extensible by subclasses."""

from __future__ import annotations

import pytest

from agentfsm import AgentState, Edge, Guard, MachineTable, StateSpec, StopReason, ToolCallAgent
from agentfsm.agent.table import AGENT_TABLE, NEXT_STEP
from agentfsm.errors import MachineSetupError
from agentfsm.testing import ScriptedLLM, reply

TERMINATE = reply(tool_calls=[("terminate", {"status": "success"})])


def test_the_table_is_the_spec_table():
    rows = [
        (e.trigger, e.source, e.dest, e.guard.name if e.guard else None, e.stop_reason)
        for e in AGENT_TABLE.edges
    ]
    assert rows == [
        ("start", "IDLE", "THINKING", None, None),
        ("think_done", "THINKING", "FINISHED", "token_limit", StopReason.TOKEN_LIMIT),
        ("think_done", "THINKING", "ACTING", "has_tool_calls", None),
        ("think_done", "THINKING", "FINISHED", "final_answer", StopReason.FINAL_ANSWER),
        ("think_done", "THINKING", "ERROR", "tool_calls_required", StopReason.ERROR),
        ("think_done", "THINKING", "OBSERVING", None, None),
        ("act_done", "ACTING", "OBSERVING", None, None),
        ("observe_done", "OBSERVING", "FINISHED", "terminated", StopReason.TERMINATED),
        ("observe_done", "OBSERVING", "FINISHED", "max_steps", StopReason.MAX_STEPS),
        ("observe_done", "OBSERVING", "FINISHED", "stuck", StopReason.STUCK),
        ("observe_done", "OBSERVING", "THINKING", None, None),
        ("fail", "RUNNING", "ERROR", None, StopReason.ERROR),
        ("cancel", "RUNNING", "ERROR", None, StopReason.CANCELLED),
        ("reset", "FINISHED", "IDLE", None, None),
        ("reset", "ERROR", "IDLE", None, None),
    ]
    assert AGENT_TABLE.groups == {"RUNNING": ("THINKING", "ACTING", "OBSERVING")}
    assert {s.name for s in AGENT_TABLE.states} == {
        "IDLE",
        "THINKING",
        "ACTING",
        "OBSERVING",
        "FINISHED",
        "ERROR",
    }


def test_one_machine_is_shared_by_all_agents():
    a = ToolCallAgent(llm=ScriptedLLM([]))
    b = ToolCallAgent(llm=ScriptedLLM([]))
    assert type(a).table.machine is type(b).table.machine
    assert type(a).table.machine.models == []  # agents are not registered, so never kept alive by it
    machine = AGENT_TABLE.machine
    assert "to_IDLE" not in machine.events  # no automatic transitions a model could trigger by name


async def _reflect(agent: ToolCallAgent) -> None:
    agent.reflections.append(agent.run_state.step)  # type: ignore[attr-defined]


EVERY_SECOND_STEP = Guard("every_second_step", lambda agent: agent.run_state.step % 2 == 0)


class ReflectingAgent(ToolCallAgent):
    """Reflects after every second step: a subclass adds a state and two edges."""

    table = AGENT_TABLE.extend(
        states=[StateSpec("REFLECTING", "RUNNING", _reflect, "reflect_done", "think about progress")],
        edges=[
            Edge("observe_done", "OBSERVING", "REFLECTING", EVERY_SECOND_STEP),
            Edge("reflect_done", "REFLECTING", "THINKING", effect=NEXT_STEP),
        ],
        # priority among edges of one trigger is table order: reflect before the fallback edge
        before=AGENT_TABLE.edge("OBSERVING", "THINKING"),
    )

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.reflections: list[int] = []


async def test_a_subclass_adds_a_reflection_state(toolbox):
    script = [reply(tool_calls=[("add", {"a": i, "b": 1})]) for i in range(4)] + [TERMINATE]
    agent = ReflectingAgent(llm=ScriptedLLM(script), tools=toolbox)
    path = []
    async for transition in agent.iter("task"):
        path.append(transition.dest)
        if transition.dest == "REFLECTING":
            assert agent.state is AgentState.RUNNING and agent.phase == "REFLECTING"
    assert agent.reflections == [2, 4]
    assert path.count("REFLECTING") == 2
    assert path[-1] == "FINISHED"
    # terminate still wins over reflection, and the new state inherits the group's fail/cancel edges
    assert "REFLECTING" in ReflectingAgent.table.sources(
        ReflectingAgent.table.edge("RUNNING", "ERROR", "fail")
    )
    assert AGENT_TABLE.by_name.get("REFLECTING") is None  # the base table is untouched


async def test_an_error_in_an_added_phase_ends_in_error(toolbox):
    async def broken(agent):
        raise OSError("disk full")

    class Broken(ToolCallAgent):
        table = AGENT_TABLE.extend(
            states=[StateSpec("REFLECTING", "RUNNING", broken, "reflect_done")],
            edges=[
                Edge("observe_done", "OBSERVING", "REFLECTING"),
                Edge("reflect_done", "REFLECTING", "THINKING"),
            ],
            before=AGENT_TABLE.edge("OBSERVING", "THINKING"),
        )

    agent = Broken(llm=ScriptedLLM([reply(tool_calls=[("add", {"a": 1, "b": 1})])]), tools=toolbox)
    result = await agent.run("task")
    assert (result.state, result.stop_reason, result.error) == (
        AgentState.ERROR,
        StopReason.ERROR,
        "OSError: disk full",
    )


def test_validation_names_the_problem_and_the_fix():
    idle, done = StateSpec("IDLE"), StateSpec("DONE")
    with pytest.raises(MachineSetupError, match=r"unknown state 'NOWHERE'.*extend\(states="):
        MachineTable(states=(idle,), edges=(Edge("go", "IDLE", "NOWHERE"),), initial="IDLE")
    with pytest.raises(MachineSetupError, match=r"states \['DONE'\] cannot be reached"):
        MachineTable(states=(idle, done), edges=(), initial="IDLE")
    with pytest.raises(MachineSetupError, match="declared twice"):
        MachineTable(states=(idle, idle), edges=(), initial="IDLE")

    async def noop(agent):
        return None

    guard = Guard("sometimes", lambda agent: True)
    phase = StateSpec("WORK", "RUNNING", noop, "work_done")
    with pytest.raises(MachineSetupError, match="needs an unguarded last edge on 'work_done'"):
        MachineTable(
            states=(idle, phase, done),
            edges=(Edge("start", "IDLE", "WORK"), Edge("work_done", "WORK", "DONE", guard)),
            initial="IDLE",
        )
    with pytest.raises(MachineSetupError, match="is not in this table"):
        AGENT_TABLE.extend(before=Edge("x", "IDLE", "ERROR"))


def test_a_trigger_with_no_edge_from_the_state_is_a_clear_error():
    agent = ToolCallAgent(llm=ScriptedLLM([]))
    with pytest.raises(MachineSetupError, match="trigger 'act_done' has no edge from state 'IDLE'"):
        AGENT_TABLE.take(agent, "act_done")
    with pytest.raises(MachineSetupError, match="unknown trigger 'jump'"):
        AGENT_TABLE.take(agent, "jump")
    assert agent.fsm_state == "IDLE"


def test_guards_are_evaluated_in_table_order_until_one_holds():
    agent = ToolCallAgent(llm=ScriptedLLM([]), max_steps=1)
    agent.fsm_state = "OBSERVING"
    agent.run_state.step = 1
    edge, guards = AGENT_TABLE.take(agent, "observe_done")
    assert guards == (("terminated", False), ("max_steps", True))
    assert edge is AGENT_TABLE.edges[8] and agent.fsm_state == "FINISHED"
