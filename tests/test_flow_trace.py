"""A flow's trace: its header, every transition with its guards, the planner's calls, the result."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentfsm import ToolCallAgent
from agentfsm.cli import commands as cli_main
from agentfsm.flow import PlanningFlow
from agentfsm.recording.trace import read_trace
from agentfsm.testing import ScriptedLLM, reply

pytestmark = pytest.mark.usefixtures("clean_env")


async def test_a_flow_trace_holds_its_transitions_planner_calls_and_result(tmp_path: Path) -> None:
    path = tmp_path / "flow.jsonl"
    plan = reply(tool_calls=[("planning", {"command": "create", "title": "T", "steps": ["[coder] a"]})])
    flow = PlanningFlow(
        agents={"coder": ToolCallAgent(llm=ScriptedLLM([reply("a done")]), name="coder")},
        planner_llm=ScriptedLLM([plan, reply("the summary")]),
    )
    result = await flow.execute("task", trace=path)
    header, records = read_trace(path)
    assert header["agent_class"] == "agentfsm.flow.flow.PlanningFlow" and header["request"] == "task"
    assert header["config"]["executors"] == ["coder"] and header["config"]["max_replans"] == 3
    own = [r for r in records if "agent" not in r]
    kinds = [r["kind"] for r in own]
    assert kinds == ["transition", "llm", "transition", "transition", "llm", "transition", "result"]
    # the step's agent run is there too, in order, each record tagged with the agent and the step
    assert [(r["kind"], r["agent"], r["flow_step"]) for r in records if "agent" in r] == [
        ("transition", "coder", 1),
        ("llm", "coder", 1),
        ("transition", "coder", 1),
    ]
    assert [r["kind"] for r in records].index("llm", 2) == 4  # the agent's call, between the flow's edges
    assert header["agents"] == {"coder": {"history": []}}
    assert records[-1]["flow"]["plan"]["steps"][0]["status"] == "completed"
    edges = [(r["source"], r["dest"]) for r in own if r["kind"] == "transition"]
    assert edges == [("IDLE", "PLANNING"), ("PLANNING", "EXECUTING"), ("EXECUTING", "FINALIZING"),
                     ("FINALIZING", "DONE")]  # fmt: skip
    finalizing = [r for r in own if r["kind"] == "transition"][2]
    assert finalizing["guards"][-1] == {"name": "plan_done", "held": True}
    llm = [r for r in own if r["kind"] == "llm"]
    assert llm[0]["request"]["tools"][0]["function"]["name"] == "planning"
    assert llm[1]["reply"]["content"] == "the summary"
    assert (
        records[-1]["result"]["stop_reason"] == "completed"
        and records[-1]["result"]["run_id"] == result.run_id
    )


async def test_diagram_draws_a_flow_trace_over_the_flow_machine(
    tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    path = tmp_path / "flow.jsonl"
    plan = reply(tool_calls=[("planning", {"command": "create", "title": "T", "steps": ["[coder] a"]})])
    flow = PlanningFlow(
        agents={"coder": ToolCallAgent(llm=ScriptedLLM([reply("a done")]), name="coder")},
        planner_llm=ScriptedLLM([plan, reply("sum")]),
    )
    await flow.execute("task", trace=path)
    assert cli_main.main(["diagram", "--trace", str(path)]) == 0
    drawn = capfdbinary.readouterr().out.decode()
    assert "EXECUTING --> FINALIZING: step_done [plan_done] / completed (1×)" in drawn
