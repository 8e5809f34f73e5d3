"""Forking an app's run from one of its past transitions, its memory edited or not (`Runs.fork`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Runs, Terminate, ToolCallAgent, tool
from agentfsm.errors import IndexOutOfRangeError, WrongPhaseError, WrongValueError
from agentfsm.messages import Message, Role, ToolCall
from agentfsm.runs import AgentSpec
from agentfsm.runs.forking import whole_memory
from agentfsm.testing import FunctionLLM, ModelRequest, reply

pytestmark = pytest.mark.usefixtures("clean_env")


class Lab:
    """Agents that note what they are given; the model adds the numbers it last saw, then stops."""

    def __init__(self) -> None:
        self.noted: list[str] = []
        self.asked: list[list[Message]] = []

    def factories(self) -> dict[str, Any]:
        lab = self

        @tool
        def note(text: str) -> str:
            """Write a note."""
            lab.noted.append(text)
            return f"noted {text}"

        def decide(request: ModelRequest) -> Any:
            lab.asked.append(list(request.messages))
            results = [m for m in request.messages if m.role is Role.TOOL]
            if not results:
                return reply(tool_calls=[ToolCall.create("c1", "note", {"text": "first"})])
            return reply(
                f"the last result: {results[-1].content}",
                [ToolCall.create("end", "terminate", {"status": "success"})],
            )

        def build(spec: AgentSpec) -> ToolCallAgent:
            return ToolCallAgent(llm=FunctionLLM(decide), tools=[note, Terminate()], name="noter")

        return {"noter": build}


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _edges(records: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(r["source"], r["dest"]) for r in records if r["kind"] == "transition"]


async def test_a_fork_goes_on_from_its_transition_with_the_parent_s_history_in_its_trace(tmp_path: Path):
    lab = Lab()
    async with Runs(tmp_path, agents=lab.factories()) as runs:
        parent = await runs.submit("note something", "noter", run_id="parent")
        assert (await runs.result(parent, wait=True, timeout=10)).ok  # type: ignore[union-attr]
        parent_trace = (tmp_path / "parent" / "trace.jsonl").read_text()
        point = await runs.fork_point(parent, 3)  # OBSERVING -> THINKING: the note's result in memory
        assert (point.state, point.step, point.pending) == ("THINKING", 2, ())
        assert [m.role for m in point.memory.messages][-2:] == [Role.ASSISTANT, Role.TOOL]

        fork = await runs.fork(parent, 3, fork_id="fork")
        result = await runs.result(fork, wait=True, timeout=10)
        assert result is not None and result.ok and result.run_id == "fork"
        assert lab.noted == ["first"]  # the fork asked the model again; the note was not run again
    assert (tmp_path / "parent" / "trace.jsonl").read_text() == parent_trace  # the parent untouched
    records = _records(tmp_path / "fork" / "trace.jsonl")
    assert records[0]["run_id"] == "fork"
    assert records[0]["forked_from"] == {"run_id": "parent", "transition": 3, "memory_edited": False}
    parent_edges = _edges(_records(tmp_path / "parent" / "trace.jsonl"))
    assert _edges(records) == parent_edges  # the same run again from THINKING, same answers
    assert records[-1]["kind"] == "result" and records[-1]["result"]["run_id"] == "fork"
    saved = json.loads((tmp_path / "fork" / "run.json").read_text())
    assert saved["forked_from"] == {"run_id": "parent", "transition": 3} and saved["task"] == "note something"


async def test_a_fork_with_an_edited_memory_is_asked_with_it(tmp_path: Path):
    lab = Lab()
    async with Runs(tmp_path, agents=lab.factories()) as runs:
        parent = await runs.submit("note something", "noter")
        await runs.result(parent, wait=True, timeout=10)
        point = await runs.fork_point(parent, 3)
        edited = [
            Message(role=m.role, content="noted something else", tool_call_id=m.tool_call_id, name=m.name)
            if m.role is Role.TOOL
            else m
            for m in point.memory.messages
        ]
        fork = await runs.fork(parent, 3, memory=edited)
        result = await runs.result(fork, wait=True, timeout=10)
        assert result is not None and result.ok
        assert lab.asked[-1][-1].content == "noted something else"  # the model saw the edit
        assert _records(tmp_path / fork / "trace.jsonl")[0]["forked_from"]["memory_edited"] is True
        parent_result = await runs.result(parent)
        assert parent_result is not None and "noted first" in str(lab.asked[1][-1].content)


async def test_a_fork_from_acting_runs_its_pending_call_again(tmp_path: Path):
    lab = Lab()
    async with Runs(tmp_path, agents=lab.factories()) as runs:
        parent = await runs.submit("note something", "noter")
        await runs.result(parent, wait=True, timeout=10)
        point = await runs.fork_point(parent, 1)  # THINKING -> ACTING: the note is pending
        assert (point.state, point.pending) == ("ACTING", ("c1",))
        fork = await runs.fork(parent, 1)
        assert (await runs.result(fork, wait=True, timeout=10)).ok  # type: ignore[union-attr]
    assert lab.noted == ["first", "first"]  # once by the parent, once by the fork


async def test_a_fork_is_refused_from_the_end_beyond_it_or_under_a_taken_id(tmp_path: Path):
    lab = Lab()
    async with Runs(tmp_path, agents=lab.factories()) as runs:
        parent = await runs.submit("note something", "noter", run_id="p")
        await runs.result(parent, wait=True, timeout=10)
        edges = len(_edges(_records(tmp_path / "p" / "trace.jsonl")))
        with pytest.raises(WrongPhaseError, match=f"transition {edges - 1} of run 'p' ended it"):
            await runs.fork(parent, edges - 1)
        with pytest.raises(IndexOutOfRangeError, match="run 'p' has no transition 99 in its checkpoint"):
            await runs.fork(parent, 99)
        with pytest.raises(WrongValueError, match="run id 'p' is taken"):
            await runs.fork(parent, 1, fork_id="p")
        assert [s.run_id for s in await runs.list()] == ["p"]  # nothing made


def test_a_dropped_tool_result_takes_its_call_with_it_unless_the_call_is_pending():
    call, other = ToolCall.create("a", "note", {}), ToolCall.create("b", "note", {})
    messages = [
        Message.user_message("task"),
        Message.from_tool_calls([call, other], content=""),
        Message.tool_message("done b", name="note", tool_call_id="b"),
        Message.from_tool_calls([ToolCall.create("c", "note", {})], content=""),
    ]
    kept = whole_memory(messages, pending=["c"])
    assert [c.id for c in kept[1].tool_calls] == ["b"] and [c.id for c in kept[3].tool_calls] == ["c"]
    assert len(kept) == 4
    assert whole_memory(messages[:2], pending=[]) == messages[:1]  # no call answered, no text: gone


async def test_a_run_known_only_by_its_trace_is_forked_by_replaying_it_to_the_transition(tmp_path: Path):
    lab = Lab()
    factories = lab.factories()
    agent = factories["noter"](AgentSpec(agent="noter"))
    trace = tmp_path / "solo.jsonl"
    assert (await agent.run("note something", trace=trace)).ok
    asked = len(lab.asked)
    async with Runs(tmp_path / "runs", agents=factories) as runs:
        with pytest.raises(WrongValueError, match="needs `agent`: the factory to run it"):
            await runs.fork(trace, 3)
        point = await runs.fork_point(trace, 3)
        assert (point.state, point.step, point.trace) == ("THINKING", 2, str(trace))
        assert lab.noted == ["first"] and len(lab.asked) == asked  # replayed: nothing ran, nobody asked
        edited = [
            Message(role=m.role, content="noted nothing", tool_call_id=m.tool_call_id, name=m.name)
            if m.role is Role.TOOL
            else m
            for m in point.memory.messages
        ]
        fork = await runs.fork(trace, 3, agent="noter", memory=edited)
        result = await runs.result(fork, wait=True, timeout=10)
        assert result is not None and result.ok and result.output == "the last result: noted nothing"
        status = await runs.status(fork)
        assert status.task == "note something"
        records = _records(tmp_path / "runs" / fork / "trace.jsonl")
        assert records[0]["forked_from"] == {
            "run_id": json.loads(trace.read_text().splitlines()[0])["run_id"],
            "transition": 3,
            "trace": str(trace),
            "memory_edited": True,
        }
        assert _edges(records)[:4] == _edges(_records(trace))[:4] and records[-1]["kind"] == "result"
        with pytest.raises(IndexOutOfRangeError, match="has no transition 40"):
            await runs.fork(trace, 40, agent="noter")


async def test_a_run_known_only_by_its_checkpoint_forks_and_its_fork_s_trace_begins_there(tmp_path: Path):
    from agentfsm.agent.replay import replay
    from agentfsm.errors import ReplayError

    lab = Lab()
    factories = lab.factories()
    agent = factories["noter"](AgentSpec(agent="noter"))
    checkpoint = tmp_path / "solo.ckpt"
    assert (await agent.run("note something", checkpoint=checkpoint)).ok
    async with Runs(tmp_path / "runs", agents=factories) as runs:
        point = await runs.fork_point(checkpoint, 3)
        assert (point.state, point.step, point.checkpoint, point.request) == (
            "THINKING",
            2,
            str(checkpoint),
            "note something",
        )
        fork = await runs.fork(checkpoint, 3, agent="noter")
        result = await runs.result(fork, wait=True, timeout=10)
        assert result is not None and result.ok and result.steps == 2
        assert lab.noted == ["first"]  # the fork asked the model again, and ran no note
        records = _records(tmp_path / "runs" / fork / "trace.jsonl")
        header = records[0]
        assert header["begins_after"] == {"edges": 4, "edits": 0} and header["request"] == "note something"
        assert header["forked_from"]["checkpoint"] == str(checkpoint)
        own = [("THINKING", "ACTING"), ("ACTING", "OBSERVING"), ("OBSERVING", "FINISHED")]
        assert _edges(records) == own  # its own, from the fork point on
        with pytest.raises(ReplayError, match="begins after 4 edges of its run"):
            await replay(tmp_path / "runs" / fork / "trace.jsonl")
        with pytest.raises(WrongValueError, match="is no recording agentfsm reads"):
            await runs.fork(tmp_path / "runs" / fork / "run.json", 1, agent="noter")
