"""Both model adapters over real HTTP, against the llmock OpenAI-compatible server on 127.0.0.1.

Each test scripts the server (replies, faults, delays), runs a real adapter
(`LLM`: litellm, the OpenAI SDK, a socket; `OpenAICompatible`: aiohttp, a
socket), and then checks what the server actually received: how many
requests, when, and with which bodies. Counting requests server-side is what
proves that no hidden retry layer multiplies attempts. The tests that take
the `adapter` fixture run once per adapter and expect the same outcomes and
attempt counts of both.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import EventCapture

from agentfsm import (
    LLM,
    AgentState,
    Message,
    OpenAICompatible,
    StopReason,
    Terminate,
    ToolCallAgent,
    ToolCollection,
    tool,
)
from agentfsm.agent.images import IMAGE_LEFT_OUT
from agentfsm.errors import LLMError, TokenLimitExceeded
from agentfsm.model.llm import IMAGE_OMITTED
from agentfsm.toolbox.tool import ToolResult

pytestmark = pytest.mark.http

ROOT = Path(__file__).resolve().parent.parent
UNPRICED = "openai/llmock-test-model"
"""Unknown to litellm's map: no price, no input window, no vision."""
PNG_1PX = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


ADAPTERS: dict[str, type[LLM] | type[OpenAICompatible]] = {"litellm": LLM, "native": OpenAICompatible}


@pytest.fixture(params=sorted(ADAPTERS))
def adapter(request: pytest.FixtureRequest) -> str:
    """Which adapter a test runs: ``litellm`` (`LLM`) or ``native`` (`OpenAICompatible`)."""
    return str(request.param)


def make_llm(
    llmock: Any, model: str = UNPRICED, *, adapter: str = "litellm", **options: Any
) -> LLM | OpenAICompatible:
    options.setdefault("backoff_base", 0.01)
    options.setdefault("backoff_max", 0.05)
    return ADAPTERS[adapter](model, api_base=llmock.base_url("openai"), api_key="test", **options)


def bodies(llmock: Any) -> list[dict[str, Any]]:
    return [record.body for record in llmock.requests]


def assert_wire_pairs(messages: list[dict[str, Any]]) -> None:
    """Each `tool` message directly follows the assistant message that called it (only tool
    messages in between), and every call gets its result before anything else is said."""
    open_ids: set[str] = set()
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            assert message["tool_call_id"] in open_ids, (
                f"message {index}: tool result {message['tool_call_id']!r} without its assistant call"
            )
            open_ids.discard(message["tool_call_id"])
        else:
            assert not open_ids, f"message {index} ({message['role']}) comes before the results of {open_ids}"
            if message["role"] == "assistant":
                open_ids = {call["id"] for call in message.get("tool_calls") or []}
    assert not open_ids, f"calls {open_ids} never got a result"


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


_warmed_up = False


@pytest.fixture
async def warm_llmock(llmock: Any) -> Any:
    """The llmock fixture, after one call in this session: litellm's import and first call
    take seconds, which must not count in tests that measure time."""
    global _warmed_up
    if not _warmed_up:
        await make_llm(llmock).ask_tool([Message.user_message("warm up")])
        llmock.reset()
        _warmed_up = True
    return llmock


@tool
def screenshot() -> ToolResult:
    """Take a screenshot."""
    return ToolResult(output="shot", base64_image=PNG_1PX)


# -- a whole run ---------------------------------------------------------------


async def test_agent_runs_to_terminate_over_http(
    adapter: str, llmock, toolbox, agentfsm_events: EventCapture
) -> None:
    llmock.call_tool("add", {"a": 2, "b": 3})
    llmock.call_tool("terminate", {"status": "success"})

    result = await ToolCallAgent(llm=make_llm(llmock, adapter=adapter), tools=toolbox).run(
        "add 2 and 3, then stop"
    )

    assert (result.state, result.stop_reason, result.steps) == (AgentState.FINISHED, StopReason.TERMINATED, 2)
    assert result.usage.llm_calls == 2
    assert result.usage.tool_calls == 2
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    assert result.usage.cost_usd is None  # an unpriced model: unknown, not 0.0

    sent = bodies(llmock)
    assert len(sent) == 2
    step_prompt = "If you want to stop interaction, use `terminate` tool/function call."
    for body, system in zip(sent, ["", f"\n\n{step_prompt}"], strict=True):  # after tool results: there
        assert body["messages"][0] == {
            "role": "system",
            "content": f"You are an agent that can execute tool calls{system}",
        }
        assert {t["function"]["name"] for t in body["tools"]} == {"add", "slow_echo", "explode", "terminate"}
        assert body["tool_choice"] == "auto"
        assert (body["temperature"], body["max_tokens"]) == (0.0, 4096)
        assert_wire_pairs(body["messages"])
    assert [m["content"] for m in tool_messages(sent[1])] == ["Observed output of cmd `add` executed:\n5"]
    assert sent[0]["messages"][-1] == {"role": "user", "content": step_prompt}  # after the request: here
    assert sent[1]["messages"][-1]["role"] == "tool"  # no user message after tool results

    calls = agentfsm_events.named("llm_call")
    assert [c["attempts"] for c in calls] == [1, 1]
    assert all(c["model"] == UNPRICED and c["cost_usd"] is None for c in calls)
    assert not agentfsm_events.named("llm_retry")


# -- retries -------------------------------------------------------------------


async def test_rate_limit_waits_as_long_as_retry_after_asks(
    adapter: str, llmock, agentfsm_events: EventCapture
) -> None:
    llmock.rate_limit(times=2, retry_after=0.3)
    llm = make_llm(llmock, adapter=adapter, backoff_max=5.0)

    reply = await llm.ask_tool([Message.user_message("hello")])

    assert reply.content
    records = llmock.requests
    assert [r.status for r in records] == [429, 429, 200]
    for before, after in itertools.pairwise(records):
        assert after.started_at - before.ended_at >= 0.3
    assert all(r.sdk_retry_count in (0, None) for r in records)  # the OpenAI SDK did not retry by itself
    retries = agentfsm_events.named("llm_retry")
    assert [(r["attempt"], r["wait_s"]) for r in retries] == [(1, 0.3), (2, 0.3)]
    named = {"litellm": "RateLimitError", "native": "ProviderError"}[adapter]
    assert all(str(r["error"]).startswith(f"{named}: HTTP 429") for r in retries)
    assert agentfsm_events.named("llm_call")[0]["attempts"] == 3


async def test_retry_after_is_capped_by_backoff_max(adapter: str, warm_llmock) -> None:
    llmock = warm_llmock
    llmock.rate_limit(times=1, retry_after=30)
    started = time.monotonic()
    await make_llm(llmock, adapter=adapter, backoff_max=0.1).ask_tool([Message.user_message("hello")])
    assert time.monotonic() - started < 5
    assert [r.status for r in llmock.requests] == [429, 200]


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_server_errors_are_retried_until_attempts_run_out(
    adapter: str, llmock, toolbox, status: int
) -> None:
    llmock.fail(status, times=None)
    agent = ToolCallAgent(llm=make_llm(llmock, adapter=adapter, max_attempts=3), tools=toolbox)

    result = await agent.run("anything")

    assert len(llmock.requests) == 3
    assert all(r.status == status for r in llmock.requests)
    assert (result.state, result.stop_reason) == (AgentState.ERROR, StopReason.ERROR)
    assert agent.state is AgentState.ERROR
    assert result.error is not None
    assert result.error.startswith(f"LLMError: {UNPRICED}: ")
    assert f"HTTP {status}" in result.error
    assert result.error.endswith("(after 3 attempts)")


async def test_read_timeout_is_retried_then_reported(adapter: str, warm_llmock, toolbox) -> None:
    llmock = warm_llmock
    llmock.delay(2.0, times=None)
    agent = ToolCallAgent(llm=make_llm(llmock, adapter=adapter, timeout=0.5, max_attempts=2), tools=toolbox)

    started = time.monotonic()
    result = await agent.run("anything")
    elapsed = time.monotonic() - started

    assert elapsed < 2.0  # two attempts of 0.5 s, not two full 2 s delays
    assert len(llmock.requests) == 2
    assert result.state is AgentState.ERROR
    assert result.error is not None
    assert result.error.startswith("LLMError: ")
    assert "timeout" in result.error.lower()
    assert result.error.endswith("(after 2 attempts)")


@pytest.mark.parametrize("status", [400, 404])
async def test_client_errors_are_not_retried(adapter: str, llmock, toolbox, status: int) -> None:
    llmock.fail(status, times=None)
    result = await ToolCallAgent(llm=make_llm(llmock, adapter=adapter), tools=toolbox).run("anything")

    assert len(llmock.requests) == 1
    assert (result.state, result.stop_reason) == (AgentState.ERROR, StopReason.ERROR)
    assert result.error is not None
    assert result.error.startswith("LLMError: ")
    assert f"HTTP {status}" in result.error
    assert result.error.endswith("(after 1 attempt)")


async def test_cancellation_propagates_without_a_retry(adapter: str, warm_llmock) -> None:
    llmock = warm_llmock
    llmock.delay(1.0, times=None)
    task = asyncio.create_task(make_llm(llmock, adapter=adapter).ask_tool([Message.user_message("hello")]))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(llmock.requests) == 1  # no retry after cancellation


async def test_llm_error_chains_the_provider_error(adapter: str, llmock) -> None:
    llmock.fail(400, message="Invalid value for 'messages'")
    with pytest.raises(LLMError, match="Invalid value for 'messages'") as info:
        await make_llm(llmock, adapter=adapter).ask_tool([Message.user_message("hello")])
    assert (
        type(info.value.__cause__).__name__
        == {"litellm": "BadRequestError", "native": "ProviderError"}[adapter]
    )


@pytest.mark.parametrize("status", [401, 403])
async def test_refused_credentials_are_never_retried(adapter: str, llmock, toolbox, status: int) -> None:
    llmock.fail(status, times=None)
    result = await ToolCallAgent(llm=make_llm(llmock, adapter=adapter, max_attempts=6), tools=toolbox).run(
        "anything"
    )

    assert len(llmock.requests) == 1
    assert result.state is AgentState.ERROR
    assert result.error is not None
    assert f"HTTP {status}" in result.error
    assert "check the API key (`api_key`, --api-key" in result.error
    assert result.error.endswith("(after 1 attempt; credentials are never retried)")


def _dead_port() -> int:
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_server_that_never_answered_gets_two_attempts_and_is_named(adapter: str, warm_llmock) -> None:
    base = f"http://127.0.0.1:{_dead_port()}/v1"
    llm = ADAPTERS[adapter](UNPRICED, api_base=base, api_key="test", max_attempts=6, backoff_base=0.01)
    with pytest.raises(LLMError) as info:
        await llm.ask_tool([Message.user_message("hello")])
    tried = "/chat/completions" if adapter == "native" else ""  # the native model names the endpoint
    assert str(info.value) == (
        f"{UNPRICED}: cannot connect to {base}{tried} (connection refused) after 2 attempts; "
        "the server has never answered: check the URL and that it is running"
    )
    assert "HTTP 500" not in str(info.value)  # litellm says 500, but no server answered


async def test_a_server_that_answered_once_gets_every_attempt_when_it_goes_away(
    adapter: str, warm_llmock
) -> None:
    """A server that answered and then stops (a restart) is worth the full retries."""
    llmock = warm_llmock
    llmock.reply("first")
    llm = make_llm(llmock, adapter=adapter, max_attempts=4)
    assert (await llm.ask_tool([Message.user_message("hello")])).content == "first"
    dead = dataclasses.replace(llm, api_base=f"http://127.0.0.1:{_dead_port()}/v1")
    dead.__dict__["_retry"] = llm._retry  # the same adapter's policy, now pointed at a dead port
    with pytest.raises(LLMError, match=r"\(connection refused\) after 4 attempts$"):
        await dead.ask_tool([Message.user_message("hello")])


async def test_retries_end_when_retry_timeout_is_spent(
    adapter: str, warm_llmock, agentfsm_events: EventCapture
) -> None:
    llmock = warm_llmock
    llmock.fail(500, times=None)
    llm = make_llm(
        llmock, adapter=adapter, max_attempts=50, backoff_base=0.2, backoff_max=0.2, retry_timeout=1.0
    )
    started = time.monotonic()
    with pytest.raises(LLMError, match=r"; `retry_timeout` \(1 s\) spent\)$"):
        await llm.ask_tool([Message.user_message("hello")])
    assert time.monotonic() - started < 2.0
    assert 2 <= len(llmock.requests) <= 6  # backoff kept: one try per 0.2 s wait, not a tight loop
    assert all(r["wait_s"] >= 0.2 for r in agentfsm_events.named("llm_retry"))


async def test_a_retry_after_beyond_retry_timeout_ends_the_retries(adapter: str, warm_llmock) -> None:
    llmock = warm_llmock
    llmock.rate_limit(times=1, retry_after=30)
    llm = make_llm(llmock, adapter=adapter, backoff_max=60, retry_timeout=5)
    started = time.monotonic()
    with pytest.raises(LLMError) as info:
        await llm.ask_tool([Message.user_message("hello")])
    assert time.monotonic() - started < 2.0
    assert len(llmock.requests) == 1
    assert "the provider asked to wait 30 s, more than the" in str(info.value)
    assert str(info.value).endswith("left of `retry_timeout` (5 s): raise `retry_timeout` to wait)")


async def test_reasoning_model_gets_max_completion_tokens_on_the_wire(adapter: str, llmock) -> None:
    llmock.reply("ok")
    await make_llm(llmock, "openai/o3-mini", adapter=adapter, max_tokens=321).ask_tool(
        [Message.user_message("hi")]
    )
    body = bodies(llmock)[0]
    assert body["max_completion_tokens"] == 321
    assert "max_tokens" not in body and "temperature" not in body


# -- token limits --------------------------------------------------------------


async def test_provider_context_window_error_ends_with_token_limit(adapter: str, llmock, toolbox) -> None:
    llmock.context_overflow(times=None)
    result = await ToolCallAgent(llm=make_llm(llmock, adapter=adapter), tools=toolbox).run("anything")

    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TOKEN_LIMIT)
    assert len(llmock.requests) == 1  # never retried


async def test_request_over_max_input_tokens_is_never_sent(adapter: str, llmock, toolbox) -> None:
    llm = make_llm(llmock, adapter=adapter, max_input_tokens=50)
    result = await ToolCallAgent(llm=llm, tools=toolbox).run("please read this " * 100)

    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TOKEN_LIMIT)
    assert llmock.requests == []
    with pytest.raises(TokenLimitExceeded, match=r"input tokens, over the limit of 50 \(max_input_tokens\)"):
        await llm.ask_tool([Message.user_message("please read this " * 100)])
    assert llmock.requests == []


# -- broken tool calls ---------------------------------------------------------


async def test_malformed_tool_arguments_reach_the_agent_intact(adapter: str, llmock, toolbox) -> None:
    arguments = {"a": 1, "b": 2}
    llmock.call_tool("add", arguments)
    llmock.break_tool_call("malformed_arguments")  # corrupts the reply the same request consumes
    llmock.call_tool("terminate", {"status": "success"})

    result = await ToolCallAgent(llm=make_llm(llmock, adapter=adapter), tools=toolbox).run("add 1 and 2")

    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TERMINATED)
    second = bodies(llmock)[1]
    assert_wire_pairs(second["messages"])
    full = json.dumps(arguments)
    assistant = next(m for m in second["messages"] if m.get("tool_calls"))
    assert assistant["tool_calls"][0]["function"]["arguments"] == full[: len(full) // 2]
    assert [m["content"] for m in tool_messages(second)] == [
        "Error: Error parsing arguments for add: Invalid JSON format"
    ]


async def test_unknown_tool_becomes_an_error_observation(adapter: str, llmock, toolbox) -> None:
    llmock.call_tool("add", {"a": 1, "b": 2})
    llmock.break_tool_call("unknown_tool")
    llmock.call_tool("terminate", {"status": "success"})

    result = await ToolCallAgent(llm=make_llm(llmock, adapter=adapter), tools=toolbox).run("add 1 and 2")

    assert result.stop_reason is StopReason.TERMINATED
    second = bodies(llmock)[1]
    assert_wire_pairs(second["messages"])
    assert [m["content"] for m in tool_messages(second)] == ["Error: Unknown tool 'llmock_unknown_tool'"]


# -- cost ----------------------------------------------------------------------


async def test_cost_is_none_for_an_unpriced_model(adapter: str, llmock) -> None:
    llmock.reply("hello")
    reply = await make_llm(llmock, adapter=adapter).ask_tool([Message.user_message("hi")])
    assert reply.content == "hello"
    assert reply.usage.cost_usd is None
    assert reply.usage.llm_calls == 1


async def test_cost_is_priced_for_a_model_litellm_knows(adapter: str, llmock) -> None:
    # llmock echoes the requested model ("gpt-4o-mini") in its reply, which litellm prices.
    llmock.reply("hello")
    reply = await make_llm(llmock, "openai/gpt-4o-mini", adapter=adapter).ask_tool(
        [Message.user_message("hi")]
    )
    assert reply.model == "gpt-4o-mini"
    assert reply.usage.cost_usd is not None and reply.usage.cost_usd > 0


# -- images --------------------------------------------------------------------


async def test_tool_image_reaches_a_vision_model_as_an_image_part(adapter: str, llmock) -> None:
    llmock.call_tool("screenshot", {})
    llmock.call_tool("terminate", {"status": "success"})
    tools = ToolCollection(screenshot, Terminate())

    result = await ToolCallAgent(llm=make_llm(llmock, "openai/gpt-4o", adapter=adapter), tools=tools).run(
        "look"
    )

    assert result.stop_reason is StopReason.TERMINATED
    messages = bodies(llmock)[1]["messages"]
    assert_wire_pairs(messages)
    at = next(i for i, m in enumerate(messages) if m["role"] == "tool")
    assert messages[at]["content"] == "Observed output of cmd `screenshot` executed:\nshot"
    assert messages[at + 1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Image returned by tool screenshot:"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_1PX}"}},
        ],
    }


async def test_tool_image_is_omitted_with_a_note_for_a_text_model(adapter: str, llmock) -> None:
    llmock.call_tool("screenshot", {})
    llmock.call_tool("terminate", {"status": "success"})
    tools = ToolCollection(screenshot, Terminate())

    result = await ToolCallAgent(llm=make_llm(llmock, adapter=adapter), tools=tools).run("look")

    assert result.stop_reason is StopReason.TERMINATED
    messages = bodies(llmock)[1]["messages"]
    assert [m["content"] for m in tool_messages(bodies(llmock)[1])] == [
        f"Observed output of cmd `screenshot` executed:\nshot\n{IMAGE_OMITTED}"
    ]
    assert all(isinstance(m.get("content"), str | None) for m in messages)
    assert PNG_1PX not in json.dumps(messages)


async def test_a_model_declared_to_see_images_gets_them_as_image_parts(adapter: str, llmock) -> None:
    """A vision model litellm's map does not know (Qwen2.5-VL on vLLM, say): `vision=True` sends
    the screenshot as an image part, where it would otherwise be a note."""
    llmock.call_tool("screenshot", {})
    llmock.call_tool("terminate", {"status": "success"})
    tools = ToolCollection(screenshot, Terminate())
    llm = make_llm(llmock, "openai/qwen2.5-vl-7b", adapter=adapter, vision=True)

    result = await ToolCallAgent(llm=llm, tools=tools).run("look")

    assert result.stop_reason is StopReason.TERMINATED
    assert llm.supports_vision
    messages = bodies(llmock)[1]["messages"]
    assert_wire_pairs(messages)
    at = next(i for i, m in enumerate(messages) if m["role"] == "tool")
    assert messages[at]["content"] == "Observed output of cmd `screenshot` executed:\nshot"
    assert messages[at + 1]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": f"data:image/png;base64,{PNG_1PX}"},
    }
    assert IMAGE_OMITTED not in json.dumps(messages)


async def test_a_model_declared_blind_gets_a_note_though_the_map_says_it_sees(adapter: str, llmock) -> None:
    llmock.call_tool("screenshot", {})
    llmock.call_tool("terminate", {"status": "success"})
    tools = ToolCollection(screenshot, Terminate())
    llm = make_llm(llmock, "openai/gpt-4o", adapter=adapter, vision=False)

    await ToolCallAgent(llm=llm, tools=tools).run("look")

    assert [m["content"] for m in tool_messages(bodies(llmock)[1])] == [
        f"Observed output of cmd `screenshot` executed:\nshot\n{IMAGE_OMITTED}"
    ]
    assert PNG_1PX not in json.dumps(bodies(llmock)[1])


async def test_a_declared_window_under_a_mapped_one_ends_the_run_with_token_limit(
    adapter: str, llmock, toolbox
) -> None:
    """gpt-4o-mini's window is 128,000 tokens by the map; the declared 60 is the one checked."""
    llm = make_llm(llmock, "openai/gpt-4o-mini", adapter=adapter, max_input_tokens=60)
    assert llm.input_limit == 60
    result = await ToolCallAgent(llm=llm, tools=toolbox).run("please read this " * 20)

    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TOKEN_LIMIT)
    assert llmock.requests == []


async def test_a_model_declared_not_to_take_a_temperature_is_sent_none(adapter: str, llmock) -> None:
    for takes in (False, None, True):
        llmock.reply("ok")
        llm = make_llm(llmock, adapter=adapter, temperature=0.3, takes_temperature=takes)
        await llm.ask_tool([Message.user_message("hi")])
    sent = bodies(llmock)
    assert "temperature" not in sent[0]
    assert sent[1]["temperature"] == sent[2]["temperature"] == 0.3


async def test_a_model_declared_reasoning_gets_max_completion_tokens(adapter: str, llmock) -> None:
    """Declared `reasoning` decides the token field (a local R1 or QwQ); the temperature is
    `takes_temperature`'s to decide, and an unknown name takes one."""
    for reasoning in (True, None):
        llmock.reply("ok")
        llm = make_llm(llmock, adapter=adapter, reasoning=reasoning, max_tokens=321, temperature=0.3)
        await llm.ask_tool([Message.user_message("hi")])
    declared, undeclared = bodies(llmock)
    assert declared["max_completion_tokens"] == 321 and "max_tokens" not in declared
    assert declared["temperature"] == 0.3
    assert undeclared["max_tokens"] == 321 and "max_completion_tokens" not in undeclared


async def test_with_max_images_a_request_carries_the_latest_images_and_memory_keeps_them_all(
    adapter: str, llmock
) -> None:
    for _ in range(3):
        llmock.call_tool("screenshot", {})
    llmock.call_tool("terminate", {"status": "success"})
    tools = ToolCollection(screenshot, Terminate())
    agent = ToolCallAgent(llm=make_llm(llmock, "openai/gpt-4o", adapter=adapter), tools=tools, max_images=2)

    result = await agent.run("look three times")

    assert result.stop_reason is StopReason.TERMINATED
    sent = bodies(llmock)
    images = [json.dumps(body["messages"]).count(f"base64,{PNG_1PX}") for body in sent]
    assert images == [0, 1, 2, 2]  # the third look's request already leaves the first out
    last = sent[3]["messages"]
    assert_wire_pairs(last)
    marked = IMAGE_LEFT_OUT.format(keep=2)
    assert [m["content"] for m in tool_messages(sent[3])] == [
        f"Observed output of cmd `screenshot` executed:\nshot\n{marked}",
        "Observed output of cmd `screenshot` executed:\nshot",
        "Observed output of cmd `screenshot` executed:\nshot",
    ]
    assert sum(1 for m in agent.memory.messages if m.base64_image == PNG_1PX) == 3  # memory keeps each


# -- process-level guarantees ----------------------------------------------------


def _run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_litellm_writes_nothing_to_stdout_and_loads_off_the_event_loop(llmock) -> None:
    """A fresh process, logging at DEBUG, failing calls: litellm's own handler would send its
    debug lines to stdout, and unsuppressed it prints help banners there. Its import (seconds)
    runs in a thread, so the event loop keeps ticking meanwhile."""
    llmock.fail(500, times=None)
    code = f"""
        import asyncio, logging, sys, time
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
        from agentfsm import LLM, Message, ToolCallAgent

        async def ticker(gaps):
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.02)
                gaps.append(time.monotonic() - last)
                last = time.monotonic()

        async def main():
            gaps = []
            ticking = asyncio.create_task(ticker(gaps))
            llm = LLM({UNPRICED!r}, api_base={llmock.base_url("openai")!r}, api_key="test",
                      max_attempts=2, backoff_base=0.01)
            result = await ToolCallAgent(llm=llm).run("hello")
            ticking.cancel()
            print("RESULT", result.error, file=sys.stderr)
            print("MAXGAP", max(gaps), file=sys.stderr)
            try:
                await LLM("no-provider-model-xyz").ask_tool([Message.user_message("hi")])
            except Exception as exc:
                print("RAISED", type(exc).__name__, exc, file=sys.stderr)

        asyncio.run(main())
    """
    proc = _run_python(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == ""
    assert "RESULT LLMError: " in proc.stderr
    assert "RAISED LLMError" in proc.stderr
    assert "LiteLLM" in proc.stderr  # litellm's logs still go somewhere: to the app's handler
    assert len(llmock.requests) == 2
    max_gap = float(proc.stderr.split("MAXGAP ", 1)[1].split()[0])
    assert max_gap < 2.0  # importing litellm alone takes 4-8 s here


def test_importing_the_adapter_does_not_import_litellm() -> None:
    code = """
        import sys
        import agentfsm, agentfsm.model.llm
        from agentfsm import LLM
        llm = LLM("openai/gpt-4o-mini", api_base="http://127.0.0.1:9/v1", max_input_tokens=100)
        print(repr(llm), "litellm" in sys.modules)
    """
    proc = _run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "LLM(model='openai/gpt-4o-mini', api_base='http://127.0.0.1:9/v1') False"
