"""`LLM`'s settings really apply, seen on the wire: temperature, api_version, extra, and the
model lookups made with `api_base` and off the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import EventCapture
from provider_stub import ProviderStub

from agentfsm import LLM, Message
from agentfsm.errors import LLMError

pytestmark = pytest.mark.http

HI = [Message.user_message("hi")]


@pytest.fixture
def stub() -> Iterator[ProviderStub]:
    server = ProviderStub()
    try:
        yield server
    finally:
        server.close()


# -- temperature -------------------------------------------------------------------


@pytest.mark.parametrize(
    "model",
    ["anthropic/claude-sonnet-4-5", "gemini/gemini-2.5-flash", "openai/gpt-5.1", "openai/gpt-4o-mini"],
)
def test_temperature_is_sent_to_models_that_take_it_reasoning_or_not(model: str) -> None:
    """litellm marks Claude, Gemini 2.5 and gpt-5.1 as reasoning models; they take a temperature."""
    assert LLM(model, temperature=0.3)._request([], [], "auto")["temperature"] == 0.3


@pytest.mark.parametrize(
    "model", ["openai/o1", "openai/o3-mini", "openai/gpt-5", "azure/o4-mini", "openai/o3-proxy"]
)
def test_temperature_is_not_sent_to_models_that_take_only_the_default(model: str) -> None:
    """litellm's rules for OpenAI's o-series and gpt-5; for a name it does not know, the name."""
    assert "temperature" not in LLM(model, temperature=0.3)._request([], [], "auto")


async def test_temperature_on_the_wire_of_openai_models(llmock) -> None:
    for model in ("openai/gpt-5-mini", "openai/gpt-4o-mini"):
        llmock.reply("ok")
        llm = LLM(model, api_base=llmock.base_url("openai"), api_key="test", temperature=0.3)
        await llm.ask_tool(HI)
    sent = [record.body for record in llmock.requests]
    assert "temperature" not in sent[0]
    assert sent[1]["temperature"] == 0.3


async def test_temperature_on_the_wire_of_claude_and_gemini(stub: ProviderStub) -> None:
    await LLM("anthropic/claude-sonnet-4-5", api_base=stub.base_url, api_key="k", temperature=0.3).ask_tool(
        HI
    )
    gemini = LLM("gemini/gemini-2.5-flash", api_base=f"{stub.base_url}/v1beta", api_key="k", temperature=0.3)
    await gemini.ask_tool(HI)
    anthropic, google = stub.requests
    assert anthropic.path == "/v1/messages" and anthropic.body["temperature"] == 0.3
    assert google.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert google.body["generationConfig"]["temperature"] == 0.3


# -- api_version and extra ----------------------------------------------------------


async def test_api_version_and_extra_reach_the_server(stub: ProviderStub) -> None:
    llm = LLM(
        "azure/my-deployment",
        api_base=stub.base_url,
        api_key="k",
        api_version="2024-10-21",
        extra={"extra_headers": {"X-Team": "blue"}},
    )
    reply = await llm.ask_tool(HI)
    assert reply.content == "ok"
    (seen,) = stub.requests
    assert seen.path == "/openai/deployments/my-deployment/chat/completions"
    assert seen.query["api-version"] == ["2024-10-21"]
    assert seen.headers["x-team"] == "blue"


# -- model lookups -----------------------------------------------------------------


@contextlib.contextmanager
def ollama_default_port() -> Iterator[list[bytes]]:
    """Listen where litellm would look without `api_base` (127.0.0.1:11434), recording what arrives.
    Skips when the port is taken."""
    received: list[bytes] = []
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", 11434))
    except OSError:
        sock.close()
        pytest.skip("127.0.0.1:11434 is in use")
    sock.listen()
    sock.settimeout(0.1)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(1)
                with contextlib.suppress(OSError):
                    received.append(conn.recv(4096))

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield received
    finally:
        stop.set()
        thread.join(5)
        sock.close()


async def _max_gap_while(coro: Any) -> tuple[Any, float]:
    """Run `coro` next to a ticker; return its result and the longest the loop went without a tick."""
    gaps: list[float] = []

    async def ticker() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticking = asyncio.create_task(ticker())
    try:
        result = await coro
    finally:
        ticking.cancel()
    return result, max(gaps, default=0.0)


async def test_ollama_lookups_use_api_base_off_the_event_loop(stub: ProviderStub) -> None:
    stub.show_delay = 1.0  # a lookup that takes a while: the loop must keep ticking through it
    with ollama_default_port() as at_default:
        llm = LLM("ollama_chat/stub-model", api_base=stub.base_url, temperature=0.3)
        await llm.ask_tool(HI)  # litellm's import and first call out of the way
        fresh = LLM("ollama_chat/other-model", api_base=stub.base_url, temperature=0.3)
        reply, gap = await _max_gap_while(fresh.ask_tool(HI))
    assert reply.content == "ok"
    assert at_default == []  # nothing asked localhost:11434
    assert stub.paths().count("/api/show") == 2  # one lookup per adapter, at the server given
    assert stub.paths().count("/api/chat") == 2
    assert fresh.input_limit == 8192  # what the server's /api/show said
    assert gap < 0.5  # the lookup alone would have stalled it 1 s


async def test_a_lookup_that_hangs_does_not_hang_the_run(
    stub: ProviderStub, agentfsm_events: EventCapture
) -> None:
    stub.show_delay = 30
    with ollama_default_port() as at_default:
        llm = LLM("ollama_chat/slow-model", api_base=stub.base_url, timeout=0.5)
        started = time.monotonic()
        reply = await llm.ask_tool(HI)
    assert reply.content == "ok"
    assert at_default == []  # nor did litellm's own lookups while ours was late
    assert time.monotonic() - started < 5
    (warning,) = agentfsm_events.named("model_info_timeout")
    assert warning["model"] == "ollama_chat/slow-model" and warning["waited_s"] == 0.5
    assert llm.input_limit is None  # went on without what the lookup would have said


# -- missing keys --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "path"),
    [("anthropic/claude-sonnet-4-5", ""), ("gemini/gemini-2.5-flash", "/v1beta")],
)
async def test_a_missing_key_is_one_attempt_and_nothing_is_sent(
    stub: ProviderStub, monkeypatch: pytest.MonkeyPatch, agentfsm_events: EventCapture, model: str, path: str
) -> None:
    """litellm raises before sending (Anthropic: AuthenticationError; Gemini: an APIConnectionError
    saying the key is missing, which would otherwise be retried as a connection error)."""
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    llm = LLM(model, api_base=stub.base_url + path, max_attempts=6)
    with pytest.raises(LLMError) as info:
        await llm.ask_tool(HI)
    assert str(info.value).endswith("(after 1 attempt; credentials are never retried)")
    assert "check the API key" in str(info.value)
    assert [seen.path for seen in stub.requests if not seen.path.endswith("/api/show")] == []
    assert agentfsm_events.named("llm_retry") == []
