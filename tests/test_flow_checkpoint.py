"""A flow's checkpoint: a pause for plan review survives a SIGKILL; a killed step runs again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentfsm import ToolCallAgent
from agentfsm.errors import CheckpointError, CheckpointLeasedError
from agentfsm.flow import PlanningFlow
from agentfsm.testing import ScriptedLLM, reply

CHILD = Path(__file__).with_name("flow_checkpoint_child.py")


def child(action: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHILD), action, str(workdir)], capture_output=True, text=True, timeout=60
    )


def test_a_review_pause_survives_a_sigkill_and_the_approved_plan_runs(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, str(CHILD), "run", str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "paused"
        process.kill()  # SIGKILL
    finally:
        process.wait(timeout=30)
    assert process.returncode == -9

    again = child("resume", tmp_path)
    assert again.returncode == 0, again.stderr
    paused = json.loads(again.stdout)
    assert (paused["state"], paused["stop_reason"]) == ("RUNNING", "awaiting_plan_review")
    assert [s["text"] for s in paused["plan"]["steps"]] == ["one", "two"]

    done = child("approve", tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["state"], result["stop_reason"]) == ("FINISHED", "completed")
    assert [(s["agent"], s["status"]) for s in result["plan"]["steps"]] == [
        ("coder", "completed"),
        ("writer", "completed"),
    ]
    assert result["summary"] == "summary after the restart"
    final = json.loads((tmp_path / "flow.checkpoint.json").read_text())
    assert final["run_state"]["state"] == "DONE"


def test_a_flow_killed_inside_a_step_runs_that_step_again_and_keeps_the_one_before(tmp_path: Path) -> None:
    killed = child("run-kill", tmp_path)
    assert killed.returncode == -9, killed.stderr
    saved = json.loads((tmp_path / "flow.checkpoint.json").read_text())
    assert saved["run_state"]["state"] == "EXECUTING"
    assert [s["status"] for s in saved["flow_state"]["plan"]["steps"]] == ["completed", "not_started"]

    done = child("resume-kill", tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["stop_reason"] == "completed"
    assert [(s["status"], s["attempts"], s["notes"]) for s in result["plan"]["steps"]] == [
        ("completed", 1, "one done"),
        ("completed", 1, "two done"),
    ]
    assert [r["agent"] for r in result["runs"]] == ["coder", "writer"]  # the killed run left no result


async def test_resume_refuses_another_flow_and_a_held_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "flow.json"
    plan = reply(tool_calls=[("planning", {"command": "create", "title": "T", "steps": ["[coder] a"]})])
    flow = PlanningFlow(
        agents={"coder": ToolCallAgent(llm=ScriptedLLM([]), name="coder")},
        planner_llm=ScriptedLLM([plan]),
        review=True,
    )
    assert (await flow.execute("task", checkpoint=path)).paused
    other = PlanningFlow(
        agents={"coder": ToolCallAgent(llm=ScriptedLLM([]), name="coder")},
        planner_llm=ScriptedLLM([]),
        review=True,
    )
    with pytest.raises(CheckpointLeasedError):
        await other.resume(checkpoint=path)
    flow.cancel_plan()
    assert (await flow.resume()).stop_reason == "plan_cancelled"
    wrong = PlanningFlow(
        agents={"writer": ToolCallAgent(llm=ScriptedLLM([]), name="writer")}, planner_llm=ScriptedLLM([])
    )
    with pytest.raises(CheckpointError, match="build it as the one that wrote it"):
        await wrong.resume(checkpoint=path)


def test_a_document_that_is_not_a_flow_s_is_refused(tmp_path: Path) -> None:
    from agentfsm.flow.checkpoint import read_flow_checkpoint

    path = tmp_path / "x.json"
    path.write_text('{"schema": 1, "agent_class": "x"}')
    with pytest.raises(CheckpointError, match="is not a flow checkpoint of schema 1"):
        read_flow_checkpoint(path)
