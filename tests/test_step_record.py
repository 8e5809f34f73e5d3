"""A record per concern: the run's own state, one step's record (`Turn`) that each think replaces
whole, a flow's run without an agent's fields, and the checkpoints written before the step had a
record of its own (schema 2), which still resume."""

from __future__ import annotations

import dataclasses
import gc
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentfsm import StopReason, Terminate, ToolCallAgent, tool
from agentfsm.agent.turn import AgentRunState, Turn
from agentfsm.flow import PlanningFlow
from agentfsm.flow.checkpoint import is_journal, read_flow_checkpoint
from agentfsm.recording.checkpoint import read_checkpoint
from agentfsm.run.state import RunState
from agentfsm.testing import ScriptedLLM, reply

FLOW_CHILD = Path(__file__).with_name("flow_checkpoint_child.py")
RUN_FIELDS = {"run_id", "state", "step", "request", "stop_reason", "error", "output", "usage", "traceparent"}
RUN_FIELDS |= {"cancelled_for_good"}  # how it ended, as the stop reason is: by `cancel()`, for good
RUN_FIELDS |= {"edges", "edits"}  # how far it went, which a resumed run's trace is cut back to
"""What a run's own state dumps: the issue's list (id, state, step, request, stop reason, error,
output, usage, trace context), whether `cancel()` ended it, how many edges and edits it had, and
nothing an agent's step adds."""
TURN_FIELDS = {f.name for f in dataclasses.fields(Turn)}


@tool
def look(path: str) -> str:
    """Read-only."""
    return f"{path} exists"


def deleting_agent(script: list[Any], ran: list[str]) -> ToolCallAgent:
    @tool(needs_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        ran.append(path)
        return f"deleted {path}"

    return ToolCallAgent(llm=ScriptedLLM(script), tools=[delete, look, Terminate()])


async def test_each_think_begins_a_new_turn_and_nothing_of_the_step_before_is_in_it() -> None:
    agent = ToolCallAgent(
        llm=ScriptedLLM(
            [
                reply("looking", [("look", {"path": "a"})]),
                reply(tool_calls=[("terminate", {"status": "success"})]),
            ]
        ),
        tools=[look, Terminate()],
    )
    turns: list[tuple[str, int, Turn, dict[str, Any]]] = []
    async for transition in agent.iter("look at a"):
        turn = agent.run_state.turn
        turns.append((transition.dest, transition.step, turn, turn.model_dump()))
    first, had = next((t, d) for dest, step, t, d in turns if dest == "OBSERVING" and step == 1)
    second, has = next((t, d) for dest, step, t, d in turns if dest == "ACTING" and step == 2)
    assert second is not first
    assert [o["content"].splitlines()[-1] for o in had["observations"]] == ["a exists"]
    assert list(had["completed_calls"]) == had["started_calls"] == ["call_1"]
    assert had["reply"]["content"] == "looking"
    # step 2's record, as ACTING begins, holds only what step 2 did so far: its reply and calls
    assert [c["name"] for c in has["pending_calls"]] == ["terminate"]
    assert has["observations"] == [] and has["completed_calls"] == {} and has["started_calls"] == []
    assert has["decisions"] == {} and has["input_requests"] == {} and has["token_limit"] is None
    assert len(first.observations) == 1  # step 1's record is left as step 1 left it
    assert agent.run_state.step == 2 and agent.last_result is not None
    assert agent.last_result.stop_reason is StopReason.TERMINATED


def test_the_run_s_state_holds_the_run_and_an_agent_s_adds_its_step_apart() -> None:
    assert {f.name for f in dataclasses.fields(RunState)} - {"exception"} == RUN_FIELDS
    assert set(RunState().model_dump()) == RUN_FIELDS
    agent_fields = set(AgentRunState().model_dump())
    assert agent_fields - RUN_FIELDS == {
        "turn", "nudge", "missed_tool_calls", "stuck_streak", "seen", "output_failures",
        "output_problem", "final_output",
    }  # fmt: skip
    assert TURN_FIELDS.isdisjoint(agent_fields)  # the step's fields only inside `turn`
    assert type(ToolCallAgent(llm=ScriptedLLM([])).run_state) is AgentRunState


async def test_a_flow_s_run_carries_none_of_an_agent_s_fields() -> None:
    plan = reply(tool_calls=[("planning", {"command": "create", "title": "T", "steps": ["[coder] one"]})])
    coder = ToolCallAgent(llm=ScriptedLLM([reply("done it")]), name="coder")
    flow = PlanningFlow(agents={"coder": coder}, planner_llm=ScriptedLLM([plan, reply("summary")]))
    assert type(flow.run_state) is RunState
    result = await flow.execute("do one thing")
    assert result.summary == "summary"
    assert type(flow.run_state) is RunState and set(flow.run_state.model_dump()) == RUN_FIELDS


def test_a_dump_of_schema_2_reads_back_with_its_step_in_the_turn() -> None:
    """Schema 2 dumped the step's fields beside the run's (`RunState` held both)."""
    old = {
        "run_id": "r1",
        "state": "AWAITING_APPROVAL",
        "step": 2,
        "pending_calls": [{"id": "call_1", "name": "look", "arguments": "{}"}],
        "started_calls": ["call_1"],
        "decisions": {"call_1": {"approved": True, "arguments": None, "reason": None}},
        "stuck_streak": 1,
        "seen": {"abc": 2},
    }
    run = AgentRunState.model_validate(old)
    assert (run.run_id, run.state, run.step, run.stuck_streak, run.seen) == (
        "r1", "AWAITING_APPROVAL", 2, 1, {"abc": 2},
    )  # fmt: skip
    assert [c.id for c in run.turn.pending_calls] == run.turn.started_calls == ["call_1"]
    assert run.turn.decisions["call_1"].approved
    assert AgentRunState.model_validate(run.model_dump(mode="json")) == run  # and the new layout


def _to_schema_2(run_state: dict[str, Any]) -> dict[str, Any]:
    """A run state's dump as schema 2 wrote it: the step's fields beside the run's."""
    old = {key: value for key, value in run_state.items() if key != "turn"}
    return {**old, **run_state.get("turn", {})}


async def test_an_agent_s_checkpoint_of_schema_2_resumes_its_pause(tmp_path: Path) -> None:
    path, ran = tmp_path / "run.checkpoint.jsonl", []
    first = deleting_agent([reply("cleaning", [("delete", {"path": "a"})])], ran)
    paused = await first.run("clean", checkpoint=path)
    assert paused.paused
    del first
    gc.collect()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["schema"] == 3 and all("turn" in r["run_state"] for r in lines[1:])
    lines[0]["schema"] = 2
    for record in lines[1:]:
        record["run_state"] = _to_schema_2(record["run_state"])
    path.write_text("".join(json.dumps(record) + "\n" for record in lines))

    second = deleting_agent([reply(tool_calls=[("terminate", {"status": "success"})])], ran)
    again = await second.resume(path)
    assert again.paused and [(c.id, c.name) for c in again.pending_approval] == [("call_1", "delete")]
    second.approve("call_1")
    result = await second.resume()
    assert result.stop_reason is StopReason.TERMINATED and ran == ["a"]  # approved, run once
    last = read_checkpoint(path)["run_state"]
    assert last["state"] == "FINISHED" and "turn" in last  # what it appended is in the new layout


def test_a_flow_checkpoint_of_schema_2_resumes_its_paused_step(tmp_path: Path) -> None:
    """A flow's checkpoint was one JSON document before the journal; schema 2's held its agents'
    steps beside their runs' fields. It resumes, and goes on as a journal."""
    process = subprocess.Popen(
        [sys.executable, str(FLOW_CHILD), "step-run", str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "paused"
        process.kill()
    finally:
        process.wait(timeout=30)
    path = tmp_path / "flow.checkpoint.json"
    assert is_journal(path)
    doc = read_flow_checkpoint(path)  # the flow as one document, as schema 3 kept it in the file
    assert doc["schema"] == 3 and "turn" in doc["agents"]["coder"]["run_state"]
    doc["schema"] = 2
    saved = doc["agents"]["coder"]
    saved["run_state"] = _to_schema_2(saved["run_state"])
    # schema 2's flow run state held an agent's fields too, all empty
    doc["run_state"] = {**_to_schema_2(AgentRunState().model_dump(mode="json")), **doc["run_state"]}
    assert doc["run_state"]["state"] == "AWAITING_AGENT" and "pending_calls" in doc["run_state"]
    path.write_text(json.dumps(doc))

    done = subprocess.run(
        [sys.executable, str(FLOW_CHILD), "step-approve", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    waiting, final = (json.loads(line) for line in done.stdout.splitlines())
    assert [(c["name"], c["arguments"]) for c in waiting] == [("record", '{"n": 1}')]
    assert (final["state"], final["stop_reason"]) == ("FINISHED", "completed")
    assert (tmp_path / "ran").read_text() == "1\n"
    assert is_journal(path) and read_flow_checkpoint(path)["run_state"]["state"] == "DONE"  # a journal now


@pytest.mark.parametrize("schema", [1, 4])
def test_a_checkpoint_of_another_schema_is_refused_naming_both(tmp_path: Path, schema: int) -> None:
    from agentfsm.errors import CheckpointError

    path = tmp_path / "run.checkpoint.jsonl"
    path.write_text(json.dumps({"kind": "header", "schema": schema, "agent_class": "x", "config": {}}) + "\n")
    with pytest.raises(
        CheckpointError, match=f"schema {schema} is not supported; this agentfsm reads schemas 2 and 3"
    ):
        read_checkpoint(path)
