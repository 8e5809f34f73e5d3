"""A model call keeps to `retry_timeout` whatever the server does with its stream, on both adapters.

Over real HTTP to the suite's own misbehaving server (`stream_fault_server`): a stream that
trickles a chunk at a time (each well within the read timeout), one that stalls mid-way, and a
server that never sends its first byte. Each run ends within `retry_timeout` and a small margin,
in ERROR with one line that says the time ran out. litellm's timeout is per read, so on its path
the trickle once kept a run going as long as the server liked; and on both paths a retry started
just before the deadline ran a whole `timeout` past it.

Also here: a server that repeats a call's name in every delta gives that name once, on both.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from stream_fault_server import MODEL, StreamFaultServer

from agentfsm import (
    LLM,
    AgentState,
    Message,
    OpenAICompatible,
    StopReason,
    Terminate,
    ToolCallAgent,
    ToolCallDelta,
    ToolCollection,
    tool,
)
from agentfsm.run.events import ToolCallCompleted

ADAPTERS: dict[str, type[LLM] | type[OpenAICompatible]] = {"litellm": LLM, "native": OpenAICompatible}
TIMEOUT = 2.0
RETRY_TIMEOUT = 2.5
MARGIN = 1.0
"""What a run may take beyond `retry_timeout`: the agent's own steps and a loaded machine."""

_warmed: set[str] = set()


@pytest.fixture(params=sorted(ADAPTERS))
def adapter(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def server() -> AsyncIterator[StreamFaultServer]:
    faults = StreamFaultServer(interval=0.2, trickle_s=30.0)
    await faults.start()
    try:
        yield faults
    finally:
        await faults.stop()


def make_llm(server: StreamFaultServer, adapter: str, way: str, **options: Any) -> LLM | OpenAICompatible:
    options.setdefault("timeout", TIMEOUT)
    options.setdefault("retry_timeout", RETRY_TIMEOUT)
    options.setdefault("backoff_base", 0.01)
    options.setdefault("backoff_max", 0.05)
    options.setdefault("max_attempts", 50)
    return ADAPTERS[adapter](MODEL, api_base=server.url(way), api_key="test", stream=True, **options)


async def warm(server: StreamFaultServer, adapter: str) -> None:
    """One complete call first: litellm's import and first call take seconds, not the stream's."""
    if adapter not in _warmed:
        await make_llm(server, adapter, "repeat").ask_tool([Message.user_message("warm up")])
        _warmed.add(adapter)


@pytest.mark.http
@pytest.mark.parametrize("way", ["trickle", "stall", "silent"])
async def test_a_run_ends_within_retry_timeout_whatever_the_stream_does(
    adapter: str, way: str, server: StreamFaultServer
) -> None:
    await warm(server, adapter)
    agent = ToolCallAgent(llm=make_llm(server, adapter, way))

    started = time.monotonic()
    result = await agent.run("say something")
    took = time.monotonic() - started

    assert took < RETRY_TIMEOUT + MARGIN, f"{adapter}/{way}: the run took {took:.1f} s"
    assert (result.state, result.stop_reason) == (AgentState.ERROR, StopReason.ERROR)
    assert result.error is not None and "\n" not in result.error
    assert result.error.startswith("LLMError: openai/fault-model: ProviderTimeoutError: timeout: ")
    assert result.error.endswith("; `retry_timeout` (2.5 s) spent)")
    assert server.requests[way] >= 1


@pytest.mark.http
async def test_a_trickling_stream_is_one_request_cut_at_timeout(
    adapter: str, server: StreamFaultServer
) -> None:
    """With `retry_timeout` out of the way, each attempt is whole within `timeout` on litellm's
    path too (as on the native one): a trickle is cut and retried, not read for 30 s."""
    await warm(server, adapter)
    llm = make_llm(server, adapter, "trickle", timeout=1.0, retry_timeout=None, max_attempts=2)

    started = time.monotonic()
    with pytest.raises(Exception) as caught:
        await llm.ask_tool([Message.user_message("say something")])
    took = time.monotonic() - started

    assert took < 2 * 1.0 + MARGIN, f"{adapter}: two attempts took {took:.1f} s"
    assert str(caught.value).startswith(
        "openai/fault-model: ProviderTimeoutError: timeout: the stream did not"
    )
    assert f" within 1 s from {server.url('trickle')}" in str(caught.value)
    assert str(caught.value).endswith(" (after 2 attempts)")
    assert server.requests["trickle"] == 2


@tool
def echo(text: str) -> str:
    """Say `text` back."""
    return text


@pytest.mark.http
async def test_a_name_repeated_in_every_delta_is_the_name(adapter: str, server: StreamFaultServer) -> None:
    reply = await make_llm(server, adapter, "repeat").ask_tool([Message.user_message("echo hi")])
    (call,) = reply.tool_calls
    assert (call.id, call.name, call.arguments) == ("call_echo", "echo", '{"text": "hi"}')

    agent = ToolCallAgent(
        llm=make_llm(server, adapter, "repeat"), tools=ToolCollection(echo, Terminate()), max_steps=1
    )
    events = [event async for event in agent.run_stream("echo hi")]

    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert [d.name for d in deltas] == ["echo", None, None, None]  # the name once, as it first came
    assert "".join(d.arguments for d in deltas) == '{"text": "hi"}'
    (done,) = [e for e in events if isinstance(e, ToolCallCompleted)]
    assert (done.observation.call.name, done.observation.is_error) == ("echo", False)
    assert "hi" in done.observation.content and "Unknown tool" not in done.observation.content
