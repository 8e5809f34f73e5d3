"""Stuck detection compares content and tool calls; the hint is one-shot; `stuck_limit` ends the run."""

from __future__ import annotations

from agentfsm import Role, StopReason, ToolCallAgent
from agentfsm.agent.react import STUCK_HINT
from agentfsm.testing import ModelRequest, ScriptedLLM, reply


def step_prompt(request: ModelRequest) -> str:
    """The step prompt (and any hint) of `request`: after tool results it ends the system prompt
    (a user message there is refused by some providers); else it is a user message at the end."""
    last = request.messages[-1]
    if last.role is Role.TOOL:
        return request.system_msgs[0].content or ""
    assert last.role is Role.USER
    return last.content or ""


def hints(llm: ScriptedLLM) -> list[bool]:
    return [STUCK_HINT in step_prompt(r) for r in llm.requests]


async def test_repeated_tool_calls_with_empty_content_are_caught(toolbox):
    same = reply(tool_calls=[("add", {"a": 1, "b": 1})])
    llm = ScriptedLLM([same] * 6)
    agent = ToolCallAgent(llm=llm, tools=toolbox)
    result = await agent.run("loop")
    # occurrences 1 and 2 are fine; 3, 4, 5 are stuck (duplicate_threshold=2), the third in a row ends it
    assert result.stop_reason is StopReason.STUCK
    assert result.steps == 5
    assert hints(llm) == [False, False, False, True, True]


async def test_hint_applies_to_the_next_think_only_and_never_accumulates(toolbox):
    same = reply(tool_calls=[("add", {"a": 1, "b": 1})])
    other = [reply(tool_calls=[("add", {"a": 2, "b": i})]) for i in range(3)]
    llm = ScriptedLLM([same, same, same, *other])
    agent = ToolCallAgent(llm=llm, tools=toolbox, max_steps=6)
    result = await agent.run("loop")
    assert result.stop_reason is StopReason.MAX_STEPS
    assert hints(llm) == [False, False, False, True, False, False]
    hinted = step_prompt(llm.requests[3])
    assert hinted.count(STUCK_HINT) == 1
    assert all(STUCK_HINT not in (m.content or "") for m in agent.memory)


async def test_repeated_content_is_caught_too():
    llm = ScriptedLLM([reply("I need to look at the file")] * 5)
    agent = ToolCallAgent(llm=llm, finish_on_answer=False, max_steps=10)
    result = await agent.run("loop")
    assert result.stop_reason is StopReason.STUCK and result.steps == 5


async def test_different_arguments_are_not_duplicates(toolbox):
    llm = ScriptedLLM([reply(tool_calls=[("add", {"a": 1, "b": i})]) for i in range(5)])
    agent = ToolCallAgent(llm=llm, tools=toolbox, max_steps=5)
    assert (await agent.run("count")).stop_reason is StopReason.MAX_STEPS
    assert not any(hints(llm))


async def test_stuck_limit_none_disables_the_edge_but_keeps_the_hint(toolbox):
    same = reply(tool_calls=[("add", {"a": 1, "b": 1})])
    llm = ScriptedLLM([same] * 8)
    agent = ToolCallAgent(llm=llm, tools=toolbox, stuck_limit=None, max_steps=8)
    result = await agent.run("loop")
    assert result.stop_reason is StopReason.MAX_STEPS
    assert sum(hints(llm)) == 5


async def test_duplicate_threshold_is_honoured(toolbox):
    same = reply(tool_calls=[("add", {"a": 1, "b": 1})])
    llm = ScriptedLLM([same] * 3)
    agent = ToolCallAgent(llm=llm, tools=toolbox, duplicate_threshold=1, stuck_limit=2)
    result = await agent.run("loop")
    assert result.stop_reason is StopReason.STUCK and result.steps == 3
