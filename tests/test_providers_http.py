"""One agent run per provider through `LLM` (litellm) against `provider_server` on 127.0.0.1.

Each run calls a tool, gets its result and finishes; the server checks every request the way
the provider does (thinking blocks and their signatures, reasoning content, thought
signatures, message order), so a run that finishes is a history the provider accepts. The
second half proves the checks bite: the history as agentfsm used to send it (provider fields
dropped, the step prompt as a user message after the tool results) is refused with the
provider's 400.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from provider_server import ANTHROPIC_THINKING_ERROR, Call, ProviderServer

from agentfsm import LLM, AgentState, Message, StopReason, Terminate, ToolCallAgent, ToolCollection, tool
from agentfsm.agent.toolcall import NEXT_STEP_PROMPT, SYSTEM_PROMPT
from agentfsm.errors import LLMError
from agentfsm.messages import ToolCall

pytestmark = pytest.mark.http


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@dataclass(frozen=True)
class Provider:
    model: str
    extra: dict[str, Any] | None = None


PROVIDERS = {
    "anthropic": Provider(
        "anthropic/claude-sonnet-4-5-20250929", {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    ),
    "gemini": Provider("gemini/gemini-2.5-flash"),
    "deepseek": Provider("deepseek/deepseek-reasoner"),
    "mistral": Provider("mistral/mistral-large-latest"),
}


@pytest.fixture
async def providers() -> AsyncIterator[ProviderServer]:
    server = ProviderServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def llm_for(server: ProviderServer, name: str) -> LLM:
    provider = PROVIDERS[name]
    return LLM(
        provider.model, api_base=server.base(name), api_key="test-key", extra=provider.extra, max_attempts=1
    )


async def run_one(server: ProviderServer, name: str) -> tuple[Any, ToolCallAgent]:
    server.script(name, [Call("add", {"a": 2, "b": 3}), "The sum is 5."])
    agent = ToolCallAgent(llm=llm_for(server, name), tools=ToolCollection(add, Terminate()))
    return await agent.run("add 2 and 3"), agent


@pytest.mark.parametrize("name", sorted(PROVIDERS))
async def test_a_run_calls_a_tool_and_finishes_on_each_provider(providers: ProviderServer, name: str) -> None:
    result, agent = await run_one(providers, name)
    assert (result.state, result.stop_reason, result.output) == (
        AgentState.FINISHED,
        StopReason.FINAL_ANSWER,
        "The sum is 5.",
    ), result.error
    first, second = providers.received(name)
    assert (first.status, second.status) == (200, 200)
    assert (result.usage.llm_calls, result.usage.tool_calls) == (2, 1)
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    assistant = next(m for m in agent.memory if m.tool_calls)
    assert assistant.provider_fields or assistant.tool_calls[0].provider_fields  # kept in memory
    CHECKS[name](providers, first.body, second.body, first.reply)


def check_anthropic(
    server: ProviderServer, first: dict[str, Any], second: dict[str, Any], reply: Any
) -> None:
    issued = next(block for block in reply["content"] if block["type"] == "thinking")
    turn = next(m for m in second["messages"] if m["role"] == "assistant")
    assert turn["content"][0] == issued  # the thinking block came back first, its signature intact
    assert [b["type"] for b in turn["content"]] == ["thinking", "tool_use"]
    assert second["system"][-1]["text"].endswith(NEXT_STEP_PROMPT)  # after tool results: the system prompt
    assert first["messages"][-1]["content"][-1]["text"] == NEXT_STEP_PROMPT  # before: the last user text


def check_gemini(server: ProviderServer, first: dict[str, Any], second: dict[str, Any], reply: Any) -> None:
    issued = reply["candidates"][0]["content"]["parts"][0]["thoughtSignature"]
    model_turn = next(c for c in second["contents"] if c["role"] == "model")
    part = model_turn["parts"][0]
    assert part.get("thoughtSignature", part.get("thought_signature")) == issued
    text = "".join(p["text"] for p in second["system_instruction"]["parts"])
    assert text == f"{SYSTEM_PROMPT}\n\n{NEXT_STEP_PROMPT}"


def check_deepseek(server: ProviderServer, first: dict[str, Any], second: dict[str, Any], reply: Any) -> None:
    issued = reply["choices"][0]["message"]["reasoning_content"]
    turn = next(m for m in second["messages"] if m.get("tool_calls"))
    assert turn["reasoning_content"] == issued
    assert_order_mistral_accepts(second["messages"])


def check_mistral(server: ProviderServer, first: dict[str, Any], second: dict[str, Any], reply: Any) -> None:
    assert_order_mistral_accepts(second["messages"])
    assert second["messages"][0] == {"role": "system", "content": f"{SYSTEM_PROMPT}\n\n{NEXT_STEP_PROMPT}"}
    assert first["messages"][-1] == {"role": "user", "content": NEXT_STEP_PROMPT}


def assert_order_mistral_accepts(messages: list[dict[str, Any]]) -> None:
    roles = [m["role"] for m in messages]
    assert ("tool", "user") not in set(itertools.pairwise(roles)) and roles[-1] != "assistant", roles


CHECKS = {
    "anthropic": check_anthropic,
    "gemini": check_gemini,
    "deepseek": check_deepseek,
    "mistral": check_mistral,
}


# -- the server refuses what the providers refuse: the old history fails ------------------------

OLD_CALL = ToolCall(id="call_0001", name="add", arguments='{"a": 2, "b": 3}')
"""A tool call as agentfsm recorded it before provider fields: no signature, no reasoning."""
OLD_HISTORY = [
    Message.user_message("add 2 and 3"),
    Message.from_tool_calls([OLD_CALL]),
    Message.tool_message("Observed output of cmd `add` executed:\n5", name="add", tool_call_id="call_0001"),
    Message.user_message(NEXT_STEP_PROMPT),  # where the step prompt went, right after the results
]
REFUSALS = {
    "anthropic": ("a final `assistant` message must start with a thinking block", OLD_HISTORY[:3]),
    "gemini": ("Function call is missing a thought_signature in functionCall parts", OLD_HISTORY[:3]),
    "deepseek": (
        "The reasoning_content in the thinking mode must be passed back to the API.",
        OLD_HISTORY[:3],
    ),
    "mistral": ("Unexpected role 'user' after role 'tool'", OLD_HISTORY),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
async def test_the_history_as_it_was_sent_before_is_refused_with_the_providers_400(
    providers: ProviderServer, name: str
) -> None:
    problem, history = REFUSALS[name]
    with pytest.raises(LLMError, match="400") as refused:
        await llm_for(providers, name).ask_tool(history, tools=[add.to_param()])
    assert problem in str(refused.value)
    (received,) = providers.received(name)
    assert received.status == 400
    assert problem in str(received.reply)


async def test_anthropic_refuses_the_thinking_rule_in_its_own_words(providers: ProviderServer) -> None:
    with pytest.raises(LLMError) as refused:
        await llm_for(providers, "anthropic").ask_tool(OLD_HISTORY[:3], tools=[add.to_param()])
    (received,) = providers.received("anthropic")
    error = received.reply
    assert (error["type"], error["error"]["type"]) == ("error", "invalid_request_error")
    assert error["error"]["message"] == (
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. "
        + ANTHROPIC_THINKING_ERROR
    )
    assert "BadRequestError" in str(refused.value)


async def test_a_thinking_block_with_a_signature_the_provider_never_issued_is_refused(
    providers: ProviderServer,
) -> None:
    forged = {"type": "thinking", "thinking": "made up", "signature": "AAAA"}
    turn = Message.from_tool_calls([OLD_CALL], provider_fields={"thinking_blocks": [forged]})
    history = [OLD_HISTORY[0], turn, OLD_HISTORY[2]]
    with pytest.raises(LLMError, match="Invalid `signature` in `thinking` block"):
        await llm_for(providers, "anthropic").ask_tool(history, tools=[add.to_param()])
    (received,) = providers.received("anthropic")
    assert received.body["messages"][1]["content"][0] == forged  # sent as kept, refused on its merits


async def test_mistral_refuses_a_request_that_ends_on_the_models_answer(providers: ProviderServer) -> None:
    history = [Message.user_message("hi"), Message.assistant_message("hello")]
    with pytest.raises(LLMError, match="Expected last role User or Tool"):
        await llm_for(providers, "mistral").ask_tool(history)
    providers.script("mistral", ["done", "still here"])
    agent = ToolCallAgent(llm=llm_for(providers, "mistral"), finish_on_answer=False, max_steps=2)
    result = await agent.run("hi")  # after its own answer the step prompt is a user message
    assert result.stop_reason is StopReason.MAX_STEPS
    assert [r.status for r in providers.received("mistral")] == [400, 200, 200]
