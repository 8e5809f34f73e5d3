"""The order of a request's messages is one every provider accepts: no user message right after
tool results, none ending on the model's own answer; the step prompt still reaches every request."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from agentfsm import Message, Role, StopReason, ToolCallAgent
from agentfsm.agent.react import STUCK_HINT
from agentfsm.agent.replay import replay
from agentfsm.model.wire import to_wire
from agentfsm.testing import ModelRequest, ScriptedLLM, reply

TERMINATE_REPLY = reply(tool_calls=[("terminate", {"status": "success"})])


def wire_of(request: ModelRequest) -> list[dict[str, Any]]:
    return to_wire(request.messages, request.system_msgs, vision=False)


def roles(request: ModelRequest) -> list[str]:
    return [m["role"] for m in wire_of(request)]


async def test_no_user_message_follows_tool_results_and_the_step_prompt_still_arrives(toolbox) -> None:
    same = reply(tool_calls=[("add", {"a": 1, "b": 1})])
    llm = ScriptedLLM([same, same, same, same, reply("thinking it over"), TERMINATE_REPLY])
    agent = ToolCallAgent(
        llm=llm, tools=toolbox, system_prompt="SYS", next_step_prompt="NEXT", finish_on_answer=False
    )
    result = await agent.run("task")
    assert result.stop_reason is StopReason.TERMINATED
    for request in llm.requests:
        sent = roles(request)
        assert all((a, b) != ("tool", "user") for a, b in itertools.pairwise(sent)), sent
        assert sent[-1] != "assistant", sent  # a prefill to Anthropic, refused by Mistral
        wire = wire_of(request)
        step = wire[0]["content"] if sent[-1] == "tool" else wire[-1]["content"]
        assert step.endswith("NEXT"), wire  # every request has it, in one place or the other
        assert wire[0]["content"].startswith("SYS") and sent.count("system") == 1
    first, after_tools, hinted, after_answer = (
        llm.requests[0],
        llm.requests[1],
        llm.requests[3],
        llm.requests[5],
    )
    assert (first.system_msgs[0].content, first.messages[-1].content) == ("SYS", "NEXT")
    assert after_tools.system_msgs[0].content == "SYS\n\nNEXT"
    assert hinted.system_msgs[0].content == f"SYS\n\n{STUCK_HINT}\nNEXT"  # the hint comes before it
    assert after_answer.messages[-1] == Message.user_message("NEXT")  # after the model's own answer
    assert all(m.role is not Role.SYSTEM and m.content != "NEXT" for m in agent.memory)


async def test_without_a_system_prompt_the_step_prompt_is_the_system_message(toolbox, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    llm = ScriptedLLM([reply(tool_calls=[("add", {"a": 1, "b": 1})]), TERMINATE_REPLY])
    agent = ToolCallAgent(llm=llm, tools=toolbox, system_prompt=None, next_step_prompt="NEXT")
    await agent.run("task", trace=path)
    assert [m.content for m in llm.requests[0].system_msgs] == []
    assert [m.content for m in llm.requests[1].system_msgs] == ["NEXT"]
    replayed = await replay(path)
    assert replayed.result is not None and replayed.result.stop_reason is StopReason.TERMINATED
