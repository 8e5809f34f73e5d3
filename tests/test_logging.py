"""One structured event per transition, on the `agentfsm` logger only; nothing on stdout."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from agentfsm import ToolCallAgent
from agentfsm.testing import ScriptedLLM, reply


async def test_one_event_per_transition_with_all_fields(toolbox, agentfsm_events):
    agent = ToolCallAgent(
        llm=ScriptedLLM(
            [
                reply(tool_calls=[("add", {"a": 1, "b": 1})]),
                reply(tool_calls=[("terminate", {"status": "success"})]),
            ]
        ),
        tools=toolbox,
        name="tester",
    )
    transitions = []
    agent.on_transition(transitions.append)
    result = await agent.run("task")
    logged = agentfsm_events.named("transition")
    assert len(logged) == len(transitions) == 7
    for entry, transition in zip(logged, transitions, strict=True):
        assert entry["agent"] == "tester"
        assert entry["run_id"] == result.run_id
        assert (entry["trigger"], entry["source"], entry["dest"], entry["step"]) == (
            transition.trigger,
            transition.source,
            transition.dest,
            transition.step,
        )
        assert entry["guards"] == {g.name: g.held for g in transition.guards}
        assert isinstance(entry["duration_ms"], float)
        assert "stop_reason" in entry
    assert logged[-1]["stop_reason"] == "terminated"
    assert logged[-1]["guards"] == {"terminated": True}
    assert agentfsm_events.named("run_finished")[0]["stop_reason"] == "terminated"


async def test_implicit_reset_is_logged(agentfsm_events):
    agent = ToolCallAgent(llm=ScriptedLLM([reply("a"), reply("b")]))
    await agent.run("one")
    await agent.run("two")
    triggers = [e["trigger"] for e in agentfsm_events.named("transition")]
    assert triggers == ["start", "think_done", "reset", "start", "think_done"]


def test_the_library_configures_no_logging_and_writes_nothing_to_stdout():
    code = textwrap.dedent(
        """
        import asyncio, logging
        import agentfsm
        from agentfsm import ToolCallAgent
        from agentfsm.testing import ScriptedLLM, reply
        root = logging.getLogger()
        before = (list(root.handlers), root.level)
        agent = ToolCallAgent(llm=ScriptedLLM([reply("done")]))
        asyncio.run(agent.run("task"))
        after = (list(root.handlers), root.level)
        lib = logging.getLogger("agentfsm")
        import sys
        sys.stderr.write(repr([type(h).__name__ for h in lib.handlers]) + "\\n")
        assert before == after, (before, after)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1] == "['NullHandler']"


def test_enabled_logging_goes_where_the_app_says_never_stdout():
    code = textwrap.dedent(
        """
        import asyncio, logging, sys
        logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
        from agentfsm import ToolCallAgent
        from agentfsm.testing import ScriptedLLM, reply
        asyncio.run(ToolCallAgent(llm=ScriptedLLM([reply("done")])).run("task"))
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert "'trigger': 'think_done'" in proc.stderr


def test_import_agentfsm_does_not_import_litellm_or_optional_dependencies():
    # asyncio too (a third of the import): the engine loads it when a run starts
    heavy = ("litellm", "docker", "mcp", "rich", "jsonschema", "openai", "pydantic", "asyncio")
    code = f"import sys, agentfsm; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.replace("'", '"')) == []
