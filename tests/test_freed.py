"""An agent nobody holds any more is freed at once, by reference counts, with its memory and its
last run: no reference cycle keeps it for the garbage collector (which costs a worker that builds
an agent per run, as a durable worker does, a collection every few runs)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Terminate, ToolCallAgent, tool
from agentfsm.flow import PlanningFlow
from agentfsm.testing import ScriptedLLM, reply


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@pytest.fixture
def no_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def one_tool_agent() -> ToolCallAgent:
    script = [
        reply(tool_calls=[("add", {"a": 1, "b": 2})]),
        reply(tool_calls=[("terminate", {"status": "success"})]),
    ]
    return ToolCallAgent(llm=ScriptedLLM(script), tools=[add, Terminate()])


async def test_an_agent_dropped_after_its_run_is_freed_without_the_collector(no_collector: None) -> None:
    agent = one_tool_agent()
    result = await agent.run("add 1 and 2")
    assert result.ok and agent.memory.messages
    gone, memory = weakref.ref(agent), weakref.ref(agent.memory)
    del agent
    assert gone() is None and memory() is None  # freed by reference counts: the collector is off


async def test_an_agent_stepped_to_its_end_is_freed_too(no_collector: None) -> None:
    agent = one_tool_agent()
    async for _ in agent.iter("add 1 and 2"):
        pass
    gone = weakref.ref(agent)
    del agent
    assert gone() is None


async def test_a_paused_run_keeps_its_driver_and_resumes(no_collector: None) -> None:
    agent = ToolCallAgent(
        llm=ScriptedLLM([reply(tool_calls=[("add", {"a": 1, "b": 2})]), reply("3")]),
        tools=[add],
        require_approval=["add"],
    )
    assert (await agent.run("add")).paused
    agent.approve()
    result = await agent.resume()
    assert result.ok and result.output == "3"
    gone = weakref.ref(agent)
    del agent
    assert gone() is None


async def test_a_flow_and_its_agents_are_freed_after_its_run(no_collector: None) -> None:
    plan = reply(tool_calls=[("planning", {"command": "create", "title": "T", "steps": ["[coder] a"]})])
    coder = ToolCallAgent(llm=ScriptedLLM([reply("done")]), name="coder")
    flow = PlanningFlow(agents={"coder": coder}, planner_llm=ScriptedLLM([plan, reply("summary")]))
    assert (await flow.execute("task")).ok
    gone, agent = weakref.ref(flow), weakref.ref(coder)
    del flow, coder
    assert gone() is None and agent() is None


async def test_a_tool_runner_kept_without_its_agent_says_so(no_collector: None) -> None:
    from agentfsm import ToolCall
    from agentfsm.errors import DetachedError

    agent = one_tool_agent()
    runner = agent.tool_runner
    del agent
    with pytest.raises(DetachedError, match="the agent of this tool runner was freed; keep the agent"):
        await runner.run_once(ToolCall.create("c1", "add", {"a": 1, "b": 2}))


async def test_a_run_with_a_trace_and_a_checkpoint_is_freed_too(no_collector: None, tmp_path: Path) -> None:
    """The trace writer and the checkpointer are listeners that keep their own unsubscribe: it lets
    go of them once called, else each made a cycle (about 75 objects a run) that outlived the run."""
    agent = one_tool_agent()
    result = await agent.run("add 1 and 2", trace=tmp_path / "t.jsonl", checkpoint=tmp_path / "c.jsonl")
    assert result.ok and (tmp_path / "t.jsonl").read_text().count("\n") > 5
    gone, memory = weakref.ref(agent), weakref.ref(agent.memory)
    del agent
    assert gone() is None and memory() is None


async def test_a_durable_run_leaves_nothing_for_the_collector(no_collector: None) -> None:
    """A durable worker builds an agent for every run: its steps' seams (the model, the tool-call
    path, the listener that draws a call's place) hold no reference back to the agent."""
    from agentfsm.durable.run import durable_run

    built: list[weakref.ref[ToolCallAgent]] = []

    def factory(spec: object) -> ToolCallAgent:
        agent = one_tool_agent()
        built.append(weakref.ref(agent))
        return agent

    spec = {"agent": "one", "options": {}}
    output = await durable_run(_Unrecorded(), {"one": factory}, "add 1 and 2", spec)
    assert output["stop_reason"] == "terminated" and "trace" in output
    assert built and built[0]() is None  # freed by reference counts: the collector is off


class _Unrecorded:
    """A durable run's journal that records nothing: every step runs, nothing is kept."""

    run_id = "r1"

    def reserve(self, name: str) -> _Unrecorded:
        return self

    async def run(self, body: Callable[[], Awaitable[Any]]) -> Any:
        return await body()

    async def receive(self, topic: str, timeout_s: float) -> None:
        return None

    async def publish(self, key: str, value: object) -> None:
        return None

    async def mark_parked(self, pause: int | None) -> None:
        return None

    async def leave(self) -> None:
        raise AssertionError("this run does not pause")
