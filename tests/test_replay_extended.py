"""Replay drives the recorded agent's own machine: a trace of an agent whose class extends its table
(the docs' `ReflectingAgent` of docs/examples/extending.py, a user's `MachineTable.extend`) replays, its
own phases included, and a replay that lacks the class says which states it lacks and how to give it."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import agentfsm
from agentfsm.agent.replay import replay
from agentfsm.errors import ReplayError
from agentfsm.testing import ScriptedLLM, reply

AGENTS = """
from agentfsm import AgentState, Edge, Guard, Message, StateSpec, ToolCallAgent
from agentfsm.agent.table import AGENT_TABLE, NEXT_STEP


async def reflect(agent):  # the new phase's work: a note the next request carries
    agent.memory.add_message(Message.user_message(f"Reflect on step {agent.run_state.step}."))


EVERY_2ND = Guard("every_2nd_step", lambda agent: agent.run_state.step % 2 == 0)
WANTS_A_PERSON = Guard("wants_a_person", lambda agent: "[handoff]" in (agent.run_state.output or ""))


class ReflectingAgent(ToolCallAgent):
    table = AGENT_TABLE.extend(
        states=[StateSpec("REFLECTING", "RUNNING", reflect, "reflect_done")],
        edges=[
            Edge("observe_done", "OBSERVING", "REFLECTING", EVERY_2ND),
            Edge("reflect_done", "REFLECTING", "THINKING", effect=NEXT_STEP),
        ],
        before=AGENT_TABLE.edge("OBSERVING", "THINKING"),
    ).extend(
        states=[StateSpec("HANDED_OFF", final=AgentState.FINISHED, doc="a person takes over")],
        edges=[Edge("think_done", "THINKING", "HANDED_OFF", WANTS_A_PERSON, stop_reason="handed_off")],
        before=AGENT_TABLE.edge("THINKING", "ACTING"),
    )
"""


@pytest.fixture
def agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The docs' extended agent, in a module of the user's own (`my_agents`)."""
    (tmp_path / "my_agents.py").write_text(AGENTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_agents", raising=False)
    return importlib.import_module("my_agents")


def calc(a: int, b: int) -> int:
    """Add `a` and `b`."""
    return a + b


async def recorded(agents: ModuleType, path: Path) -> None:
    from agentfsm import tool

    llm = ScriptedLLM(
        [
            reply(tool_calls=[("calc", {"a": 1, "b": 1})]),
            reply(tool_calls=[("calc", {"a": 2, "b": 2})]),
            reply("I cannot finish this; a person should. [handoff]"),
        ]
    )
    agent = agents.ReflectingAgent(llm=llm, tools=[tool(calc)], name="reflecting")
    result = await agent.run("add things", trace=path)
    assert (result.stop_reason, agent.fsm_state) == ("handed_off", "HANDED_OFF")
    assert any(m.content == "Reflect on step 2." for m in llm.requests[2].messages)


def _of_a_class_not_imported(path: Path) -> str:
    """The trace at `path`, its header naming a class no module of this process holds."""
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    header["agent_class"] = "not_imported_here.ReflectingAgent"
    return "\n".join([json.dumps(header), *lines[1:]]) + "\n"


async def test_a_trace_of_an_extended_agent_replays_on_its_table(agents: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    await recorded(agents, path)
    replayed = await replay(path)  # the class is imported in this process: found by its recorded name
    assert replayed.result is not None and replayed.result.stop_reason == "handed_off"
    hops = [(t.source, t.dest) for t in replayed.transitions]
    assert ("OBSERVING", "REFLECTING") in hops and hops[-1] == ("THINKING", "HANDED_OFF")
    recorded_hops = [
        (r["source"], r["dest"])
        for r in map(json.loads, path.read_text().splitlines())
        if r["kind"] == "transition"
    ]
    assert hops == recorded_hops


async def test_without_the_class_the_replay_names_the_missing_states_and_the_fix(
    agents: ModuleType, tmp_path: Path
) -> None:
    path = tmp_path / "run.jsonl"
    await recorded(agents, path)
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text(_of_a_class_not_imported(path))
    with pytest.raises(
        ReplayError,
        match=r"the trace goes through states \['HANDED_OFF', 'REFLECTING'\] of its agent class "
        r"not_imported_here.ReflectingAgent, which is not imported here: give the class",
    ):
        await replay(elsewhere)
    given = await replay(elsewhere, agent_class=agents.ReflectingAgent)
    assert given.result is not None and given.result.stop_reason == "handed_off"


async def test_the_command_line_replays_it_with_agent_class(agents: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    await recorded(agents, path)
    package_root = Path(agentfsm.__file__).resolve().parent.parent  # this checkout's, wherever run from
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(package_root)])}

    def replayed(*flags: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "agentfsm", "replay", str(path), "--json", *flags]
        return subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)

    bare = replayed()
    assert bare.returncode == 2 and "--agent-class MODULE:CLASS" in bare.stderr, bare.stderr
    given = replayed("--agent-class", "my_agents:ReflectingAgent")
    assert given.returncode == 0, given.stderr
    assert json.loads(given.stdout)["stop_reason"] == "handed_off"
    wrong = replayed("--agent-class", "my_agents:reflect")
    assert wrong.returncode == 2 and "is not a tool-calling agent class" in wrong.stderr, wrong.stderr


async def test_a_divergence_without_the_class_says_the_class_may_be_why(
    agents: ModuleType, tmp_path: Path
) -> None:
    """A run that never entered the added states still evaluated the added guards: the replay on the
    tool-calling agent's table diverges there, and says whose table the trace may need."""
    path = tmp_path / "run.jsonl"
    llm = ScriptedLLM([reply(tool_calls=[("terminate", {"status": "success"})])])
    await agents.ReflectingAgent(llm=llm).run("finish", trace=path)
    path.write_text(_of_a_class_not_imported(path))
    with pytest.raises(
        ReplayError,
        match=r"transition 2 differs: .*wants_a_person.* \(the trace's agent class "
        r"not_imported_here.ReflectingAgent is not imported here; if it extends its table, give it",
    ):
        await replay(path)
