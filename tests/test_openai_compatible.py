"""`OpenAICompatible`'s own promises, over real HTTP on 127.0.0.1.

The faults both adapters share are in test_llm_http.py, run once per adapter.
Here: what goes on the wire (the key, the model name, `extra`), what comes
back that litellm's shapes hide (provider fields, a context error said only in
words, a body that is not JSON), the sessions (one per event loop, closed when
the loop ends or by `aclose()`), the price as `LLM` computes it, and what a
fresh process imports.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from agentfsm import LLM, AgentState, Message, OpenAICompatible, StopReason, ToolCall, ToolCallAgent
from agentfsm.errors import ConfigError, LLMError, TokenLimitExceeded
from agentfsm.messages import Role
from agentfsm.model.catalog import ModelCard, card_for, is_reasoning_name
from agentfsm.model.credentials import check_credentials
from agentfsm.model.encoding import (
    IMAGE_TOKENS,
    char_bound,
    load_encoding,
    message_tokens,
    request_tokens,
    tokenizer,
)
from agentfsm.model.openai_compatible import DEFAULT_API_BASE, YIELD_EVERY_LINES, provider_fields
from agentfsm.model.tokens import TokenCounter

pytestmark = pytest.mark.http

ROOT = Path(__file__).resolve().parent.parent


def completion(message: dict[str, Any], model: str = "served-model") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
    }


@dataclass
class Server:
    """A loopback chat-completions server answering from a list; it records headers and bodies."""

    answers: list[Callable[[], web.Response]]
    base_url: str = ""
    headers: list[dict[str, str]] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    state = Server(answers=[])

    async def chat(request: web.Request) -> web.Response:
        state.headers.append(dict(request.headers))
        state.bodies.append(await request.json())
        if not state.answers:
            return web.json_response(completion({"role": "assistant", "content": "default"}))
        return state.answers.pop(0)()

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    state.base_url = f"http://127.0.0.1:{port}/v1"
    try:
        yield state
    finally:
        await runner.cleanup()


def answer(body: Any, status: int = 200) -> Callable[[], web.Response]:
    if isinstance(body, bytes):
        return lambda: web.Response(body=body, status=status, content_type="text/html")
    return lambda: web.json_response(body, status=status)


def native(base: str, model: str = "openai/served-model", **options: Any) -> OpenAICompatible:
    options.setdefault("backoff_base", 0.01)
    options.setdefault("backoff_max", 0.05)
    return OpenAICompatible(model, api_base=base, **options)


# -- the wire ------------------------------------------------------------------


async def test_the_key_goes_as_a_bearer_and_the_model_without_its_prefix(server: Server) -> None:
    extra = {"top_p": 0.5, "extra_body": {"seed": 7}, "extra_headers": {"X-Team": "blue"}}
    model = native(server.base_url, api_key="sk-test", extra=extra)
    await model.ask_tool([Message.user_message("hi")])
    assert server.headers[0]["Authorization"] == "Bearer sk-test"
    assert server.headers[0]["X-Team"] == "blue"  # `extra_headers` as headers, as the OpenAI SDK sends them
    body = server.bodies[0]
    assert body["model"] == "served-model"
    assert (body["top_p"], body["seed"]) == (0.5, 7)  # `extra` and its `extra_body` are in the body
    assert "extra_body" not in body and "extra_headers" not in body
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    await model.aclose()


async def test_no_key_no_header_and_openai_s_variable_only_for_openai_s_base(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    model = native(server.base_url)
    await model.ask_tool([Message.user_message("hi")])
    assert "Authorization" not in server.headers[0]  # a self-hosted server is not sent OpenAI's key
    await model.aclose()
    # OpenAI's own base (never contacted here) would be sent the variable's key.
    assert OpenAICompatible("openai/gpt-4o-mini")._headers["Authorization"] == "Bearer sk-from-env"
    assert OpenAICompatible("openai/gpt-4o-mini").url == f"{DEFAULT_API_BASE}/chat/completions"


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every name lookup and connection a test attempts, each refused (nothing reaches the internet)."""
    import socket

    attempts: list[object] = []

    def refused(target: object, *_: object, **__: object) -> Any:
        attempts.append(target)
        raise OSError(f"the test allows no network: {target!r}")

    def connect(sock: socket.socket, address: object) -> None:
        refused(address)

    monkeypatch.setattr(socket, "getaddrinfo", refused)
    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect)
    return attempts


@pytest.mark.parametrize("base", [None, DEFAULT_API_BASE, "https://api.openai.com/v1/"])
async def test_openai_s_own_base_without_a_key_fails_before_anything_is_sent(
    base: str | None, monkeypatch: pytest.MonkeyPatch, no_network: list[object]
) -> None:
    """The line the command line prints for a missing key (`check_credentials`), raised before a
    name is looked up or a socket opened; a run on the model ends in error with it."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = OpenAICompatible("openai/gpt-4o-mini", api_base=base)
    line = "OPENAI_API_KEY is not set (model 'openai/gpt-4o-mini'): export it or pass --api-key"
    with pytest.raises(ConfigError) as info:
        await model.ask_tool([Message.user_message("hi")])
    assert str(info.value) == line
    with pytest.raises(ConfigError) as cli:
        check_credentials("openai/gpt-4o-mini", api_base=base)
    assert str(cli.value) == line
    result = await ToolCallAgent(llm=model).run("hi")
    assert (result.state, result.error) == (AgentState.ERROR, f"ConfigError: {line}")
    assert no_network == [] and not model._pools  # no lookup, no connection, not even a session


async def test_with_a_key_openai_s_own_base_is_reached_for(
    monkeypatch: pytest.MonkeyPatch, no_network: list[object]
) -> None:
    """What the guard above would see: the variable's key lets the call go to OpenAI's host."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    model = OpenAICompatible("openai/gpt-4o-mini", max_attempts=1)
    with pytest.raises(LLMError, match="connection error"):
        await model.ask_tool([Message.user_message("hi")])
    assert no_network and no_network[0] == "api.openai.com"
    await model.aclose()


# -- what comes back -----------------------------------------------------------


async def test_provider_fields_come_back_on_the_next_request(server: Server) -> None:
    """DeepSeek's reasoner (and vLLM's reasoning parsers) put `reasoning_content` on the message;
    the thinking-mode API refuses a history whose tool-call turn lacks it."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "terminate", "arguments": '{"status": "success"}'},
        "extra_content": {"signature": "sig-1"},
    }
    message = {
        "role": "assistant",
        "content": "",
        "reasoning_content": "",
        "refusal": None,
        "tool_calls": [call],
    }
    assert provider_fields(message) == {"reasoning_content": ""}  # empty is kept: it must come back too
    server.answers.append(answer(completion({**message, "reasoning_content": "stop now"})))
    agent = ToolCallAgent(llm=native(server.base_url), max_steps=2)
    result = await agent.run("stop")
    assert result.stop_reason is StopReason.TERMINATED
    (turn,) = [m for m in agent.memory if m.role is Role.ASSISTANT]
    assert turn.provider_fields == {"reasoning_content": "stop now"}
    assert turn.tool_calls[0].provider_fields == {"extra_content": {"signature": "sig-1"}}
    sent = turn.to_openai()
    assert sent["reasoning_content"] == "stop now"
    assert sent["tool_calls"][0]["extra_content"] == {"signature": "sig-1"}


async def test_a_context_error_said_only_in_words_ends_with_token_limit(server: Server) -> None:
    error = {"error": {"message": "This model's maximum context length is 4096 tokens", "code": None}}
    server.answers.append(answer(error, status=400))
    with pytest.raises(TokenLimitExceeded, match="context window"):
        await native(server.base_url).ask_tool([Message.user_message("long")])
    assert len(server.bodies) == 1  # never retried


async def test_a_body_that_is_not_a_completion_is_retried(server: Server) -> None:
    server.answers += [answer(b"<html>Bad Gateway</html>"), answer({"id": "x"})]
    model = native(server.base_url, max_attempts=3)
    reply = await model.ask_tool([Message.user_message("hi")])
    assert reply.content == "default"
    assert len(server.bodies) == 3


async def test_empty_choices_fail_at_once(server: Server) -> None:
    server.answers.append(answer({"id": "x", "choices": []}))
    with pytest.raises(LLMError, match="no choices"):
        await native(server.base_url).ask_tool([Message.user_message("hi")])
    assert len(server.bodies) == 1


async def test_an_agent_runs_to_terminate(server: Server) -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "terminate", "arguments": '{"status": "success"}'},
    }
    server.answers.append(answer(completion({"role": "assistant", "content": None, "tool_calls": [call]})))
    result = await ToolCallAgent(llm=native(server.base_url)).run("stop")
    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TERMINATED)
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.cost_usd) == (11, 3, None)


async def test_a_buffered_stream_gives_the_loop_a_turn_every_few_lines(server: Server) -> None:
    """A stream the server sent in one piece is read from the buffer with no wait at all: the other
    tasks of the loop (a ticker here) still get a turn every `YIELD_EVERY_LINES` lines, not once per
    read of the socket (about a thousand deltas a read before)."""
    deltas = 5000

    def chunk(choices: list[Any], **more: Any) -> bytes:
        body = {"id": "c", "object": "chat.completion.chunk", "model": "served-model", "choices": choices}
        return b"data: " + json.dumps({**body, **more}).encode() + b"\n\n"

    piece = chunk([{"index": 0, "delta": {"content": "a"}, "finish_reason": None}])
    stream = (
        piece * deltas + chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]) + b"data: [DONE]\n\n"
    )
    server.answers.append(lambda: web.Response(body=stream, content_type="text/event-stream"))
    ticks, seen, runs = 0, 0, [0]

    class Counting:
        def text(self, piece: str, attempt: int) -> None:
            nonlocal seen
            seen += 1
            runs[-1] += 1

        def tool_call(
            self, index: int, call_id: str | None, name: str | None, arguments: str, attempt: int
        ) -> None:
            raise AssertionError("no tool calls in this stream")

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1
            runs.append(0)  # the deltas read before the ticker's next turn

    ticking = asyncio.create_task(ticker())
    try:
        reply = await native(server.base_url, stream=True).ask_tool(
            [Message.user_message("go")], sink=Counting()
        )
    finally:
        ticking.cancel()
    assert reply.content == "a" * deltas and seen == deltas
    assert max(runs) <= YIELD_EVERY_LINES, f"{max(runs)} deltas in a row without a turn for the loop"
    assert ticks >= deltas // YIELD_EVERY_LINES


# -- the price -----------------------------------------------------------------


async def test_a_priced_call_costs_what_litellm_says(llmock) -> None:
    base = llmock.base_url("openai")
    costs = []
    for adapter in (LLM, OpenAICompatible):
        llmock.reply("hello")
        reply = await adapter("openai/gpt-4o-mini", api_base=base, api_key="k").ask_tool(
            [Message.user_message("what does it cost")]
        )
        costs.append(reply.usage.cost_usd)
    assert costs[0] is not None and costs[0] > 0
    assert costs[1] == pytest.approx(costs[0])


# -- sessions ------------------------------------------------------------------


async def test_aclose_closes_the_loop_s_session_and_a_new_call_makes_another(server: Server) -> None:
    model = native(server.base_url)
    await model.ask_tool([Message.user_message("one")])
    first = await model._session()
    await model.aclose()
    assert first.closed
    await model.ask_tool([Message.user_message("two")])
    assert not (await model._session()).closed
    assert len(server.bodies) == 2
    await model.aclose()


def _run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_one_model_serves_runs_on_several_event_loops_and_leaves_nothing_open(llmock) -> None:
    """Each `asyncio.run` is a new loop: the model makes a session on each, and each is closed
    when its loop ends, so nothing warns of an unclosed session or connector (-X dev shows
    every ResourceWarning; -W error makes each one fail)."""
    code = f"""
        import asyncio, gc, sys
        from agentfsm import Message, OpenAICompatible, ToolCallAgent

        model = OpenAICompatible("openai/llmock-test-model", api_base={llmock.base_url("openai")!r})
        for task in ("one", "two", "three"):
            result = asyncio.run(ToolCallAgent(llm=model).run(task))
            print(result.state.value, file=sys.stderr)
        print("POOLS", len(model._pools), file=sys.stderr)
        del model
        gc.collect()
        print("LITELLM", "litellm" in sys.modules)
    """
    proc = _run_python(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("FINISHED") == 3, proc.stderr
    assert "Unclosed" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr
    assert "POOLS 1" in proc.stderr  # sessions of loops that ended are dropped, not kept
    assert proc.stdout.strip() == "LITELLM False"  # a run through the native model never loads litellm
    assert len(llmock.requests) == 3


def test_importing_agentfsm_imports_neither_aiohttp_nor_litellm() -> None:
    code = """
        import sys
        import agentfsm
        from agentfsm import OpenAICompatible
        model = OpenAICompatible("openai/gpt-4o-mini", api_base="http://127.0.0.1:9/v1", api_key="k")
        print(repr(model), "aiohttp" in sys.modules, "litellm" in sys.modules)
    """
    proc = _run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        "OpenAICompatible(model='openai/gpt-4o-mini', api_base='http://127.0.0.1:9/v1') False False"
    )


def test_the_request_check_knows_the_window_of_a_mapped_model() -> None:
    assert OpenAICompatible("openai/gpt-4o-mini").input_limit == 128000
    assert OpenAICompatible("openai/llmock-test-model").input_limit is None
    assert OpenAICompatible("openai/llmock-test-model", max_input_tokens=500).input_limit == 500
    assert OpenAICompatible("openai/gpt-4o").supports_vision
    assert not OpenAICompatible("openai/llmock-test-model").supports_vision


async def test_many_concurrent_requests_share_one_session(server: Server) -> None:
    model = native(server.base_url)
    replies = await asyncio.gather(*(model.ask_tool([Message.user_message(f"n{i}")]) for i in range(300)))
    assert [r.content for r in replies] == ["default"] * 300
    assert sorted(b["messages"][0]["content"] for b in server.bodies) == sorted(f"n{i}" for i in range(300))
    assert len(model._pools) == 1
    await model.aclose()


# -- offline: the map and the count ----------------------------------------------


def test_the_price_is_litellm_s_arithmetic() -> None:
    card = ModelCard(input_cost=1e-6, output_cost=4e-6, cached_input_cost=5e-7)
    assert card.cost(1000, 100) == pytest.approx(1000 * 1e-6 + 100 * 4e-6)
    assert card.cost(1000, 100, cached_tokens=400) == pytest.approx(600 * 1e-6 + 400 * 5e-7 + 100 * 4e-6)
    assert ModelCard(input_cost=1e-6).cost(10, 10) is None  # half a price is no price
    assert card_for("openai/llmock-test-model") is None
    assert card_for("anthropic/claude-sonnet-4-5", "claude-sonnet-4-5") is None  # another provider's entry


def test_reasoning_is_known_by_name_or_by_the_map() -> None:
    assert is_reasoning_name("openai/o3-mini") and is_reasoning_name("gpt-5-mini")
    assert not is_reasoning_name("openai/gpt-4o")
    body = OpenAICompatible("openai/o4-mini", max_tokens=100)._body([], [], "auto")
    assert body == {"model": "o4-mini", "messages": [], "max_completion_tokens": 100}
    body = OpenAICompatible("openai/local", max_tokens=100, temperature=0.3)._body([], [], "auto")
    assert (body["max_tokens"], body["temperature"]) == (100, 0.3)
    assert "tools" not in body and "tool_choice" not in body


def test_the_cheap_bound_is_never_below_the_count() -> None:
    size = tokenizer(load_encoding("openai/gpt-4o-mini"))
    counted = TokenCounter(message_tokens(size, vision=True), request_tokens(size))
    bound = TokenCounter(message_tokens(char_bound, vision=True), request_tokens(char_bound))
    system = [Message.system_message("be brief")]
    messages = [
        Message.user_message("look ünïcødé 漢字", base64_image="iVBORw0KGgo="),
        Message.from_tool_calls([ToolCall(id="c", name="f", arguments="{}")]),
        Message.tool_message("x" * 500, name="f", tool_call_id="c"),
    ]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    count = counted.count(messages, system, tools)
    assert IMAGE_TOKENS < count <= bound.count(messages, system, tools)
    assert counted.count([Message.user_message("please read this " * 100)]) > 300


async def test_a_request_over_the_model_s_known_window_is_never_sent(server: Server) -> None:
    model = native(server.base_url, "openai/gpt-4o-mini")  # 128,000 input tokens, by the map
    with pytest.raises(TokenLimitExceeded, match=r"over the limit of 128000 \(the model's input window\)"):
        await model.ask_tool([Message.user_message("word " * 140_000)])
    assert server.bodies == []
    await model.ask_tool([Message.user_message("word " * 1_000)])
    assert len(server.bodies) == 1
    await model.aclose()


async def test_litellm_s_map_is_read_off_the_event_loop(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading the bundled map takes tens of milliseconds: never on the loop that runs the agents."""
    import threading

    from agentfsm.model import catalog

    readers: list[threading.Thread] = []
    read = catalog._read_map

    def recorded() -> dict[str, Any]:
        readers.append(threading.current_thread())
        return read()

    monkeypatch.setattr(catalog, "_read_map", recorded)
    catalog._model_map.cache_clear()
    try:
        model = native(server.base_url, "openai/gpt-4o-mini")
        await model.ask_tool([Message.user_message("hi")])
        await model.aclose()
    finally:
        catalog._model_map.cache_clear()
    assert readers and threading.main_thread() not in readers
    assert model.input_limit == 128_000  # and what it read is the map
