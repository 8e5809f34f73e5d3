"""`LLM`'s offline pieces: argument checks, the wire format, the retry policy."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from agentfsm import LLM, ChatModel, Message, OpenAICompatible, ToolCall
from agentfsm.errors import ConfigError, ConnectTimeout
from agentfsm.model.credentials import KEY_VARIABLES, check_credentials
from agentfsm.model.llm import IMAGE_OMITTED, load_litellm, to_wire
from agentfsm.model.reach import probe_target
from agentfsm.model.retry import (
    RetryPolicy,
    describe,
    is_context_window_error,
    is_credential_error,
    is_transient,
    retry_after,
    unreachable,
)

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
JPEG = "/9j/4AAQSkZJRgABAQAAAQABAAD"


def image(b64: str, mime: str = "image/png") -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{b64}"}}


# -- arguments -------------------------------------------------------------------


BAD_ARGUMENTS = [
    ({"model": ""}, "`model`"),
    ({"api_base": "127.0.0.1:8000/v1"}, "`api_base` must be a URL starting with http://"),
    ({"temperature": 3}, "`temperature` must be a number >= 0 and <= 2 (or None), got 3"),
    ({"temperature": "0.5"}, "`temperature`"),
    ({"max_tokens": 0}, "`max_tokens` must be an integer >= 1 (or None for no limit), got 0"),
    ({"max_input_tokens": 1.5}, "`max_input_tokens`"),
    (
        {"max_input_tokens": 0},
        "`max_input_tokens` must be an integer >= 1 (or None for the model's own window), got 0",
    ),
    ({"max_input_tokens": -4096}, "`max_input_tokens` must be an integer >= 1"),
    ({"vision": "yes"}, "`vision` must be True or False (or None), got 'yes'"),
    ({"reasoning": 1}, "`reasoning` must be True or False (or None), got 1"),
    ({"takes_temperature": "no"}, "`takes_temperature` must be True or False (or None), got 'no'"),
    ({"token_budget": True}, "`token_budget`"),
    ({"timeout": 0}, "`timeout` must be a number > 0, got 0"),
    ({"timeout": float("inf")}, "`timeout`"),
    ({"max_attempts": 0}, "`max_attempts` must be an integer >= 1, got 0"),
    ({"backoff_base": -1}, "`backoff_base`"),
    ({"extra": {"num_retries": 3}}, "`extra` may not set 'num_retries'; use `max_attempts`"),
    ({"extra": {"stream": True}}, "`extra` may not set 'stream'"),
]


@pytest.mark.parametrize("adapter", [LLM, OpenAICompatible], ids=["litellm", "native"])
@pytest.mark.parametrize(
    ("options", "named"),
    BAD_ARGUMENTS,
    ids=[f"{next(iter(options))}={next(iter(options.values()))!r}" for options, _ in BAD_ARGUMENTS],
)
def test_bad_arguments_name_the_value_and_the_fix(
    options: dict[str, Any], named: str, adapter: type[LLM] | type[OpenAICompatible]
) -> None:
    options = dict(options)
    model = options.pop("model", "openai/x")
    with pytest.raises(ConfigError) as info:
        adapter(model, **options)
    assert named in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("adapter", [LLM, OpenAICompatible], ids=["litellm", "native"])
def test_declared_facts_replace_the_map_s_each_on_its_own(
    adapter: type[LLM] | type[OpenAICompatible],
) -> None:
    unknown = adapter("openai/qwen2.5-vl", api_base="http://127.0.0.1:1/v1")
    assert (unknown.supports_vision, unknown.is_reasoning, unknown.input_limit) == (False, False, None)
    assert unknown.sends_temperature
    local = adapter(
        "openai/qwen2.5-vl",
        api_base="http://127.0.0.1:1/v1",
        vision=True,
        max_input_tokens=32_768,
        reasoning=True,
        takes_temperature=False,
    )
    assert (local.supports_vision, local.is_reasoning, local.input_limit) == (True, True, 32_768)
    assert not local.sends_temperature
    request = local._request([], [], "auto") if isinstance(local, LLM) else local._body([], [], "auto")
    assert request["max_completion_tokens"] == 4096 and "max_tokens" not in request
    assert "temperature" not in request
    mapped = adapter("openai/gpt-4o", vision=False, max_input_tokens=1000)  # the map: vision, 128,000
    assert (mapped.supports_vision, mapped.input_limit) == (False, 1000)
    o_series = adapter("openai/o3-mini", reasoning=False, takes_temperature=True, temperature=0.5)
    assert not o_series.is_reasoning and o_series.sends_temperature  # the user's word over the name's
    reasoner = adapter("openai/deepseek-r1", reasoning=True, temperature=0.6)
    assert reasoner.is_reasoning and reasoner.sends_temperature  # reasoning alone keeps the temperature


def test_a_trace_header_records_the_declared_facts() -> None:
    from agentfsm import ToolCallAgent

    llm = OpenAICompatible(
        "openai/qwen2.5-vl", api_base="http://127.0.0.1:1/v1", vision=True, reasoning=False
    )
    described = ToolCallAgent(llm=llm).trace_config()["llm"]
    assert (described["vision"], described["reasoning"], described["takes_temperature"]) == (
        True,
        False,
        None,
    )
    assert described["max_input_tokens"] is None


def test_llm_is_a_chat_model_and_hides_its_key() -> None:
    llm = LLM("openai/x", api_base="http://127.0.0.1:1/v1", api_key="sk-secret", token_budget=1000)
    assert isinstance(llm, ChatModel)
    assert llm.token_budget == 1000
    assert "sk-secret" not in repr(llm)


def test_reasoning_models_get_max_completion_tokens_and_no_temperature() -> None:
    for model in ("openai/o3-mini", "openai/o1", "openai/gpt-5-mini", "azure/o4-mini"):
        request = LLM(model, max_tokens=100)._request([], [], "auto")
        assert request["max_completion_tokens"] == 100, model
        assert "max_tokens" not in request and "temperature" not in request, model
    request = LLM("openai/llmock-x", max_tokens=100, temperature=0.2)._request([], [], "auto")
    assert (request["max_tokens"], request["temperature"]) == (100, 0.2)
    assert (request["num_retries"], request["max_retries"]) == (0, 0)
    assert "tools" not in request and "tool_choice" not in request  # no tools: no tool_choice


def test_input_limit_comes_from_the_argument_or_litellm() -> None:
    assert LLM("openai/llmock-x").input_limit is None  # unmapped: no check
    assert LLM("openai/llmock-x", max_input_tokens=500).input_limit == 500
    assert LLM("openai/gpt-4o-mini").input_limit == 128000


# -- the wire format ---------------------------------------------------------------


def test_system_messages_come_first() -> None:
    wire = to_wire([Message.user_message("hi")], [Message.system_message("be brief")], vision=False)
    assert wire == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]


def test_tool_images_follow_the_whole_run_of_tool_messages() -> None:
    calls = [ToolCall(id="c1", name="shot"), ToolCall(id="c2", name="snap")]
    messages = [
        Message.user_message("look"),
        Message.from_tool_calls(calls),
        Message.tool_message("one", name="shot", tool_call_id="c1", base64_image=PNG),
        Message.tool_message("two", name="snap", tool_call_id="c2", base64_image=JPEG),
        Message.user_message("next"),
    ]
    wire = to_wire(messages, vision=True)
    assert [m["role"] for m in wire] == ["user", "assistant", "tool", "tool", "user", "user"]
    assert [wire[2]["content"], wire[3]["content"]] == ["one", "two"]
    assert wire[4] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Image returned by tool shot:"},
            image(PNG),
            {"type": "text", "text": "Image returned by tool snap:"},
            image(JPEG, "image/jpeg"),
        ],
    }
    assert wire[5] == {"role": "user", "content": "next"}


def test_images_are_replaced_by_a_note_without_vision() -> None:
    messages = [
        Message.user_message("see", base64_image=PNG),
        Message.from_tool_calls([ToolCall(id="c1", name="shot")]),
        Message.tool_message("done", name="shot", tool_call_id="c1", base64_image=PNG),
    ]
    wire = to_wire(messages, vision=False)
    assert [m["content"] for m in wire] == [f"see\n{IMAGE_OMITTED}", None, f"done\n{IMAGE_OMITTED}"]


def test_user_and_assistant_images() -> None:
    url = f"data:image/webp;base64,{PNG}"
    messages = [
        Message.user_message("see", base64_image=PNG),
        Message.assistant_message("drawn", base64_image=url),
    ]
    wire = to_wire(messages, vision=True)
    assert wire[0] == {"role": "user", "content": [{"type": "text", "text": "see"}, image(PNG)]}
    # The chat API takes no image parts on assistant messages: the image follows as a user message.
    assert wire[1] == {"role": "assistant", "content": "drawn"}
    assert wire[2]["content"][1] == {"type": "image_url", "image_url": {"url": url}}


# -- the retry policy ----------------------------------------------------------------


class StatusError(Exception):
    def __init__(self, status: int, headers: dict[str, str] | None = None, code: str | None = None) -> None:
        super().__init__(f"status {status}")
        self.status_code = status
        self.litellm_response_headers = headers
        self.code = code


def test_backoff_is_exponential_and_capped() -> None:
    policy = RetryPolicy(max_attempts=6, backoff_base=1.0, backoff_max=5.0)
    for attempt, expected in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (5, 5.0)]:
        wait = policy.wait_for(attempt, StatusError(500))
        assert expected <= wait <= min(expected * 1.1, 5.0)


def test_retry_after_is_honoured_exactly_and_capped() -> None:
    policy = RetryPolicy(max_attempts=6, backoff_base=1.0, backoff_max=5.0)
    assert policy.wait_for(1, StatusError(429, {"retry-after-ms": "300", "retry-after": "1"})) == 0.3
    assert policy.wait_for(3, StatusError(503, {"retry-after": "2"})) == 2.0
    assert policy.wait_for(1, StatusError(429, {"retry-after": "120"})) == 5.0
    assert retry_after(StatusError(429, {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})) is None


def test_classification_without_litellm_classes() -> None:
    assert is_transient(StatusError(502)) and is_transient(StatusError(500))
    assert is_transient(ConnectionResetError()) and is_transient(TimeoutError())
    assert not is_transient(StatusError(400)) and not is_transient(ValueError("x"))
    overflow = StatusError(400, code="context_length_exceeded")
    assert is_context_window_error(overflow) and not is_transient(overflow)


def test_describe_names_the_status_only_when_a_server_answered() -> None:
    assert describe(StatusError(503, {})) == "StatusError: HTTP 503: status 503"
    assert describe(StatusError(500)) == "StatusError: status 500"


# -- failing fast ----------------------------------------------------------------------


def test_credential_errors_are_never_transient() -> None:
    assert is_credential_error(StatusError(401, {})) and not is_transient(StatusError(401, {}))
    assert is_credential_error(StatusError(403, {}))
    # what the OpenAI SDK raises with no key, which litellm reports as a 500
    no_key = StatusError(500)
    no_key.__cause__ = RuntimeError("Missing credentials. Please pass an `api_key`")
    assert is_credential_error(no_key) and not is_transient(no_key)
    assert not is_credential_error(StatusError(500)) and is_transient(StatusError(500))


def test_unreachable_reads_the_socket_error_and_hides_the_query() -> None:
    class ConnectError(Exception):
        def __init__(self, url: str) -> None:
            super().__init__("cannot connect")
            self.request = type("Request", (), {"url": url})()

    refused = ConnectError("https://user:pw@host.example:8443/v1beta/models/m:generateContent?key=SECRET")
    refused.__cause__ = ConnectionRefusedError(111, "Connection refused")
    assert unreachable(refused) == (
        "connection refused",
        "https://host.example:8443/v1beta/models/m:generateContent",
    )
    assert unreachable(socket.gaierror(-2, "Name or service not known")) == ("unknown host", None)
    assert unreachable(ConnectTimeout("slow")) == ("connect timed out", None)
    assert unreachable(ConnectionResetError()) is None  # a server that was reached, then hung up
    assert unreachable(StatusError(500)) is None


def test_a_never_answered_server_stops_after_two_attempts_and_retry_timeout_bounds_the_rest() -> None:
    policy = RetryPolicy(max_attempts=6, backoff_base=1.0, backoff_max=60.0, retry_timeout=10.0)
    refused = ConnectionRefusedError()
    assert policy.stop_reason(1, refused, 0.0, 1.0) is None
    assert "after 2 attempts; the server has never answered" in str(policy.stop_reason(2, refused, 1.0, 2.0))
    policy.answered = True
    assert policy.stop_reason(2, refused, 1.0, 2.0) is None  # it answered before: every attempt
    assert (
        policy.stop_reason(3, StatusError(500), 9.0, 2.0) == "after 3 attempts; `retry_timeout` (10 s) spent"
    )
    asked = policy.stop_reason(1, StatusError(429, {"retry-after": "30"}), 1.0, 30.0)
    assert asked == (
        "after 1 attempt; the provider asked to wait 30 s, more than the 9 s left of `retry_timeout` "
        "(10 s): raise `retry_timeout` to wait"
    )
    assert policy.stop_reason(6, StatusError(500), 0.0, 1.0) == "after 6 attempts"


def test_probe_target_skips_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "no_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    assert probe_target("http://127.0.0.1:8000/v1") == ("127.0.0.1", 8000)
    assert probe_target("https://api.example/v1") == ("api.example", 443)
    monkeypatch.setenv("https_proxy", "http://proxy.invalid:3128")
    assert probe_target("https://api.example/v1") is None  # the proxy carries it: nothing to probe


CREDENTIAL_CASES = [
    (
        "openai/gpt-4o-mini",
        {},
        "OPENAI_API_KEY is not set (model 'openai/gpt-4o-mini'): export it or pass --api-key",
    ),
    ("openai/qwen", {"api_base": "http://127.0.0.1:8000/v1"}, None),
    ("openai/gpt-4o-mini", {"api_key": "k"}, None),
    (
        "openai/gpt-4o-mini",
        {"api_base": "https://api.openai.com/v1"},
        "OPENAI_API_KEY is not set (model 'openai/gpt-4o-mini'): export it or pass --api-key",
    ),
    ("anthropic/claude-sonnet-4-5", {}, "ANTHROPIC_API_KEY is not set"),
    ("gemini/gemini-2.5-flash", {}, "GEMINI_API_KEY (or GOOGLE_API_KEY) is not set"),
    (
        "azure/dep",
        {"api_key": "k"},
        "AZURE_API_BASE is not set (model 'azure/dep'): export it or pass --api-base",
    ),
    ("azure/dep", {"api_key": "k", "api_base": "https://r.example"}, None),
    ("ollama_chat/llama3.1", {}, None),
    ("bedrock/anthropic.claude-3", {}, None),
    # the name's provider, before its key
    (
        "gpt-oss",
        {"api_base": "http://127.0.0.1:8000/v1"},
        "names no provider: for the OpenAI-compatible "
        "server at http://127.0.0.1:8000/v1 write it 'openai/gpt-oss'",
    ),
    ("gpt-oss", {"api_base": "http://localhost:8000/v1"}, "write it 'openai/gpt-oss'"),
    ("gpt-oss", {"api_base": "http://10.1.2.3:8000/v1"}, "write it 'openai/gpt-oss'"),
    ("gpt-oss", {}, "model 'gpt-oss' names no provider: for an OpenAI-compatible server write it"),
    ("gpt-4o-mini", {}, "OPENAI_API_KEY is not set (model 'gpt-4o-mini')"),  # OpenAI's, as litellm routes it
    ("gpt-4o-mini", {"api_base": "http://127.0.0.1:4000"}, None),  # a proxy on this machine
    ("nosuch/x", {}, "model 'nosuch/x': 'nosuch' is not a provider litellm knows;"),
    ("antropic/claude-sonnet-4-5", {}, "(did you mean 'anthropic'"),
    ("hosted_vllm/served", {"api_base": "http://127.0.0.1:8000/v1"}, None),  # a provider only litellm knows
]


@pytest.mark.parametrize(("model", "options", "named"), CREDENTIAL_CASES)
def test_credentials_are_checked_offline(
    model: str, options: dict[str, str], named: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "AZURE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name in ("AZURE_API_BASE", "AZURE_API_VERSION", "OLLAMA_API_BASE"):
        monkeypatch.delenv(name, raising=False)
    if named is None:
        check_credentials(model, **options)
        return
    with pytest.raises(ConfigError) as info:
        check_credentials(model, **options)
    assert named in str(info.value)


@pytest.mark.parametrize("provider", sorted(KEY_VARIABLES))
def test_the_key_table_says_what_litellm_says(provider: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The providers checked without litellm: with none of their variables set, litellm's
    `validate_environment` reports a missing key among the same variables; with one set, none."""
    variables = KEY_VARIABLES[provider]
    for name in variables:
        monkeypatch.delenv(name, raising=False)
    model = f"{provider}/some-model"
    missing = load_litellm().validate_environment(model=model)["missing_keys"]
    assert missing and set(missing) <= set(variables), missing
    with pytest.raises(ConfigError, match=f"^{variables[0]} "):
        check_credentials(model)
    monkeypatch.setenv(variables[-1], "k")
    assert load_litellm().validate_environment(model=model)["keys_in_environment"]
    check_credentials(model)


def test_errors_of_the_native_adapter_are_classified_by_what_they_carry() -> None:
    from agentfsm.errors import ProviderConnectionError, ProviderError, ProviderTimeoutError

    url = "http://127.0.0.1:1/v1/chat/completions"
    limited = ProviderError("slow down", url=url, status_code=429, response_headers={"retry-after": "2"})
    assert is_transient(limited) and retry_after(limited) == 2.0
    assert describe(limited) == "ProviderError: HTTP 429: slow down"
    assert is_transient(ProviderError("down", url=url, status_code=503, response_headers={}))
    assert not is_transient(ProviderError("bad", url=url, status_code=400, response_headers={}))
    overflow = ProviderError("too long", url=url, status_code=400, code="context_length_exceeded")
    assert is_context_window_error(overflow) and not is_transient(overflow)
    assert is_transient(ProviderConnectionError("refused", url=url))
    assert is_transient(ProviderTimeoutError("timeout", url=url))
    assert describe(ProviderConnectionError("refused", url=url)) == "ProviderConnectionError: refused"
