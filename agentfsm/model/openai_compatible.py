"""`OpenAICompatible`: the `ChatModel` for the OpenAI chat-completions wire, on aiohttp.

The wire that OpenAI and most self-hosted servers speak (vLLM, llama.cpp,
Ollama's ``/v1``, LM Studio) needs no translation, so this adapter posts it
directly rather than through litellm: litellm costs ~5 ms of CPU per request
and ~3 s to import, where aiohttp stays at 0.1-0.4 ms per request up to 1,000
concurrent ones (httpx and the openai SDK degrade to 4-19 ms). It is built
from the same options as `LLM` (`LLMOptions`) and keeps the same promises:

- retries belong to the same `RetryPolicy` (429, 5xx, timeouts, connection
  errors, a reply that cannot be read; with backoff and Retry-After), the
  same attempt counts, the same messages, with the URL in them;
- the request is checked against the input window before it is sent (the
  same window and prices as `LLM`, from litellm's bundled map, read without
  importing litellm: see `agentfsm.model.catalog`), and a provider's
  context-window error becomes `TokenLimitExceeded`, never retried;
- tool-call arguments travel exactly as the model sent them; images go as
  image parts where the model accepts them (`to_wire`);
- what the model is (its input window, vision, reasoning, whether it takes a
  temperature) is the map's, with what the options declare laid over it, fact
  by fact (`agentfsm.model.facts`), as `LLM` lays them over litellm's answers;
- OpenAI's own servers are not asked without a key: with no `api_key` and no
  ``OPENAI_API_KEY``, a call fails before anything is sent, with the line the
  command line prints (`agentfsm.model.credentials`);
- with `stream` on, the reply comes as server-sent events, handed piece by
  piece to the caller's `DeltaSink` and put back together into the body a
  request without streaming gets (`agentfsm.model.stream`), so both read alike.

One aiohttp session per model per event loop, made on first use there, with a
connection pool sized for `POOL_SIZE` concurrent requests: a session belongs to
the loop it was made on, and a model may serve runs on several loops (each
`asyncio.run`, each test). A session is closed by `aclose()` on its loop, or
when its loop shuts down (`asyncio.run` and `asyncio.Runner` close the loop's
async generators, and one of them holds the session), or soon after the model
is garbage-collected.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
import weakref
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..errors import (
    LLMError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeoutError,
)
from ..messages import Message, ToolCall
from .base import DeltaSink, LLMResponse, ToolChoice, Usage, log_call
from .catalog import ModelCard, card_for
from .credentials import OPENAI_API_BASE, check_openai_key, is_openai_base
from .encoding import char_bound, load_encoding, message_tokens, request_tokens, tokenizer
from .facts import ModelFacts, card_facts, declared
from .options import LLMOptions
from .retry import RetryPolicy
from .stream import ChunkAssembler, EventData
from .tokens import TokenCounter, check_window
from .wire import to_wire

if TYPE_CHECKING:
    import aiohttp

__all__ = ["DEFAULT_API_BASE", "POOL_SIZE", "YIELD_EVERY_LINES", "OpenAICompatible", "provider_fields"]

DEFAULT_API_BASE = OPENAI_API_BASE
"""Where requests go without `api_base`: OpenAI's own API."""
POOL_SIZE = 1000
"""Connections one session keeps open at most (requests beyond wait for one)."""
YIELD_EVERY_LINES = 64
"""A stream's lines read between two turns given to the event loop's other tasks: lines already
received come without a wait, and a fast server's 100,000 deltas held the loop for 165 ms."""

# The keys of a chat-completions message that the adapter reads or that OpenAI defines;
# every other key is the provider's own (`reasoning_content`, ...).
_STANDARD_MESSAGE_KEYS = frozenset(
    {"role", "content", "tool_calls", "function_call", "refusal", "annotations", "audio", "name"}
)
_STANDARD_CALL_KEYS = frozenset({"id", "type", "function", "index"})
_CONTEXT_TEXTS = (
    "context length",
    "context window",
    "maximum context",
    "context_length_exceeded",
    "prompt is too long",
    "too many tokens",
    "input is too long",
)
"""What providers' 400 messages say when the prompt does not fit (when they send no code)."""


@dataclass(slots=True)
class _Pool:
    """A session and the async generator that closes it when its loop shuts down."""

    session: aiohttp.ClientSession
    keeper: AsyncGenerator[None, None]


class OpenAICompatible(LLMOptions):
    """A chat model on an OpenAI-compatible server, reached over aiohttp; implements `ChatModel`.

    Built from its options like `LLM`, and interchangeable with it:
    ``OpenAICompatible("openai/gpt-4o-mini", api_base="http://127.0.0.1:8000/v1", api_key=...)``.
    The ``openai/`` prefix is dropped on the wire. `api_base` defaults to OpenAI's; the key
    is sent as ``Authorization: Bearer``, from `api_key` or, for OpenAI's own base,
    ``OPENAI_API_KEY`` (another server is sent no header when there is none; OpenAI's is sent
    nothing: the call fails first, naming the variable, as `check_credentials` does).
    The model's facts that the map does not know (a vision model on your own server) are
    declared as options: ``vision=True``, ``max_input_tokens=32768``, `reasoning`,
    `takes_temperature`. `extra` is read as the OpenAI SDK
    (and so litellm) reads it: ``extra_headers`` are sent as headers, ``extra_body`` is merged
    into the request body, and every other key is a field of the body; so one `extra` means the
    same to both adapters.
    """

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __repr__(self) -> str:  # never shows the API key
        base = f", api_base={self.api_base!r}" if self.api_base else ""
        return f"OpenAICompatible(model={self.model!r}{base})"

    # -- what is known about the model ------------------------------------------

    @cached_property
    def wire_model(self) -> str:
        """The model name the server is sent: without the ``openai/`` prefix."""
        return self.model.removeprefix("openai/")

    @cached_property
    def url(self) -> str:
        """Where requests go: ``{api_base}/chat/completions``."""
        return f"{(self.api_base or DEFAULT_API_BASE).rstrip('/')}/chat/completions"

    @cached_property
    def card(self) -> ModelCard | None:
        """The model's entry in litellm's bundled map, if it has one."""
        return card_for(self.model, self.wire_model)

    @cached_property
    def _facts(self) -> ModelFacts:
        """What the map says of the model, with what the options declare laid over it."""
        return declared(card_facts(self.model, self.card), self)

    @cached_property
    def supports_vision(self) -> bool:
        """Whether images are sent as images: `vision`, else the map's word (False when it doesn't know)."""
        return self._facts.vision

    @cached_property
    def is_reasoning(self) -> bool:
        """Reasoning models take `max_completion_tokens`: `reasoning`, else the map, else the name."""
        return self._facts.reasoning

    @cached_property
    def sends_temperature(self) -> bool:
        """Whether `temperature` is sent: as `takes_temperature` says, else unless the model is a
        reasoning model by the map or its name (those take only the default)."""
        return self.temperature is not None and self._facts.temperature

    @cached_property
    def input_limit(self) -> int | None:
        """The input window checked before sending: `max_input_tokens`, else the map's, else none."""
        return self._facts.input_window

    @cached_property
    def _retry(self) -> RetryPolicy:
        return RetryPolicy(self.max_attempts, self.backoff_base, self.backoff_max, self.retry_timeout)

    @cached_property
    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = self.api_key
        if key is None and is_openai_base(self.api_base):
            key = os.environ.get("OPENAI_API_KEY") or None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        headers.update((self.extra or {}).get("extra_headers") or {})
        return headers

    @cached_property
    def _pools(self) -> weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Pool]:
        return weakref.WeakKeyDictionary()

    @cached_property
    def _bound(self) -> TokenCounter:
        """Four tokens a character: a request under the window by this bound is never tokenised."""
        return TokenCounter(
            message_tokens(char_bound, vision=self.supports_vision), request_tokens(char_bound)
        )

    @cached_property
    def _tokens(self) -> list[TokenCounter]:
        return []  # the tokenizer's counter, made on first need, off the event loop (loading takes 0.1-0.3 s)

    # -- asking -------------------------------------------------------------------

    async def ask_tool(
        self,
        messages: Sequence[Message],
        *,
        system_msgs: Sequence[Message] = (),
        tools: Sequence[dict[str, Any]] = (),
        tool_choice: ToolChoice = "auto",
        sink: DeltaSink | None = None,
    ) -> LLMResponse:
        """Ask for the next reply (text, tool calls, or both).

        Raises `ConfigError` when OpenAI's own servers would be asked without a
        key, `TokenLimitExceeded` when the request is over the input window
        (nothing is sent either way) or the provider reports a context-window
        error, and `LLMError` when the call fails for good. With `stream` on, the reply is
        streamed and put back together (`ChunkAssembler`), each piece going to
        `sink` as it arrives; a stream cut or garbled mid-way is retried whole.
        """
        check_openai_key(self.model, api_key=self.api_key, api_base=self.api_base)
        started = time.perf_counter()
        if "card" not in self.__dict__:  # litellm's map is read once (~40 ms), off the event loop
            await asyncio.to_thread(getattr, self, "card")
        wire = to_wire(messages, system_msgs, vision=self.supports_vision)
        tool_list = [dict(t) for t in tools]
        await self._check_fits(messages, system_msgs, tools)  # the caller's dicts: counted while unchanged
        body = self._body(wire, tool_list, tool_choice)
        if self.stream:
            body["stream"] = True
            body.setdefault("stream_options", {"include_usage": True})  # the usage comes last
        payload = json.dumps(body, ensure_ascii=False).encode()
        session = await self._session()
        attempt = 0

        async def call() -> dict[str, Any]:
            nonlocal attempt
            attempt += 1
            if self.stream:
                return await self._post_streamed(session, payload, ChunkAssembler(sink, attempt, self.url))
            return await self._post(session, payload)

        data, attempts = await self._retry.run(call, model=self.model, url=self.url)
        reply = self._reply(data)
        log_call(reply, model=self.model, attempts=attempts, started=started)
        return reply

    async def ask(self, messages: Sequence[Message], *, system_msgs: Sequence[Message] = ()) -> str:
        """Ask for a plain text answer (no tools); empty string if the model said nothing."""
        reply = await self.ask_tool(messages, system_msgs=system_msgs)
        return reply.content or ""

    async def aclose(self) -> None:
        """Close this event loop's session (the next request makes a new one)."""
        pool = self._pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.keeper.aclose()  # closes the session, and the loop need not close it again

    # -- the request ------------------------------------------------------------

    async def _check_fits(
        self, messages: Sequence[Message], system_msgs: Sequence[Message], tools: Sequence[dict[str, Any]]
    ) -> None:
        """Refuse a request over the input window before sending it; each message is counted once
        (`TokenCounter`). Until a request's character bound first exceeds the window, the bound
        alone is counted and the tokenizer is not even loaded; from then on (the history has grown
        near the window, and stays there) the tokenizer's count alone."""
        limit = self.input_limit
        if limit is None:
            return
        if not self._tokens and self._bound.count(messages, system_msgs, tools) <= limit:
            return
        if not self._tokens:
            try:
                encoding = await asyncio.to_thread(load_encoding, self.model)
            except Exception:  # no tokenizer: nothing is checked, as `LLM` does when it cannot count
                return
            size = tokenizer(encoding)
            self._tokens.append(
                TokenCounter(message_tokens(size, vision=self.supports_vision), request_tokens(size))
            )
        count = self._tokens[0].count(messages, system_msgs, tools)
        check_window(self.model, count, limit, configured=self.max_input_tokens is not None)

    def _body(
        self, wire: list[dict[str, Any]], tools: list[dict[str, Any]], tool_choice: ToolChoice
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.wire_model, "messages": wire}
        if tools:
            body["tools"] = tools
            body["tool_choice"] = tool_choice
        if self.max_tokens is not None:
            body["max_completion_tokens" if self.is_reasoning else "max_tokens"] = self.max_tokens
        if self.sends_temperature:
            body["temperature"] = self.temperature
        extra = {k: v for k, v in (self.extra or {}).items() if k != "extra_headers"}
        body.update(extra.pop("extra_body", None) or {})
        body.update(extra)
        return body

    async def _session(self) -> aiohttp.ClientSession:
        """This loop's session, made on first use (no await before it is stored: no race)."""
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is not None and not pool.session.closed:
            return pool.session
        import aiohttp

        for old in [other for other in self._pools if other.is_closed()]:
            del self._pools[old]  # its loop shut down, which closed its session
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=POOL_SIZE, limit_per_host=0),
            headers=self._headers,
        )
        keeper = _close_at_shutdown(session)
        self._pools[loop] = _Pool(session, keeper)
        await anext(keeper)  # started: the loop now closes it (and the session) when it shuts down
        return session

    async def _post(self, session: aiohttp.ClientSession, payload: bytes) -> dict[str, Any]:
        """One attempt: the reply's JSON, or a `ProviderError` saying what went wrong."""
        import aiohttp

        try:
            async with session.post(
                self.url, data=payload, timeout=aiohttp.ClientTimeout(total=self.timeout)
            ) as response:
                raw = await response.read()
                status, headers = response.status, response.headers
        except TimeoutError as exc:
            raise ProviderTimeoutError(
                f"timeout: no complete reply within {self.timeout:g} s from {self.url}", url=self.url
            ) from exc
        except aiohttp.ClientError as exc:  # refused, reset, cut short
            raise ProviderConnectionError(
                f"connection error: {exc or type(exc).__name__} ({self.url})", url=self.url
            ) from exc
        if status >= 400:
            raise _status_error(status, headers, raw, self.url)
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if not isinstance(data, dict) or "choices" not in data:
            # A proxy's HTML page, a cut body: the server's fault, worth another try.
            raise ProviderConnectionError(
                f"the reply is not a chat completion (HTTP {status}): {raw[:200]!r} ({self.url})",
                url=self.url,
            )
        return data

    async def _post_streamed(
        self, session: aiohttp.ClientSession, payload: bytes, chunks: ChunkAssembler
    ) -> dict[str, Any]:
        """One streamed attempt: the chunks put back together into the body `_post` would return."""
        import aiohttp

        events = EventData()
        try:
            async with session.post(
                self.url, data=payload, timeout=aiohttp.ClientTimeout(total=self.timeout)
            ) as response:
                if response.status >= 400:
                    raise _status_error(response.status, response.headers, await response.read(), self.url)
                lines = 0
                async for line in response.content:
                    data = events.feed(line)
                    if data is not None:
                        chunks.add_data(data)
                    lines += 1
                    if lines % YIELD_EVERY_LINES == 0:
                        # A buffered stream's lines come without a wait: give the loop's other tasks a turn.
                        await asyncio.sleep(0)
                last = events.end()
                if last is not None:
                    chunks.add_data(last)
        except TimeoutError as exc:
            raise ProviderTimeoutError(
                f"timeout: the stream did not end within {self.timeout:g} s from {self.url}", url=self.url
            ) from exc
        except aiohttp.ClientError as exc:  # refused, reset, cut short
            raise ProviderConnectionError(
                f"connection error: {exc or type(exc).__name__} ({self.url})", url=self.url
            ) from exc
        return chunks.completion()

    def _reply(self, data: dict[str, Any]) -> LLMResponse:
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise LLMError(f"{self.model}: the provider's reply has no choices: {data!r:.300}")
        choice = choices[0]
        message = _message_of(data)
        calls = tuple(_tool_call(call) for call in message.get("tool_calls") or () if isinstance(call, dict))
        found = data.get("usage")
        usage: dict[str, Any] = found if isinstance(found, dict) else {}
        prompt = _count(usage.get("prompt_tokens"))
        completion = _count(usage.get("completion_tokens"))
        details = usage.get("prompt_tokens_details")
        cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
        model = data.get("model") if isinstance(data.get("model"), str) and data.get("model") else None
        card = card_for(model) if model is not None else None
        card = card or self.card
        content = message.get("content")
        return LLMResponse(
            content=content if isinstance(content, str) and content else None,
            tool_calls=calls,
            usage=Usage(
                input_tokens=prompt,
                output_tokens=completion,
                llm_calls=1,
                cost_usd=card.cost(prompt, completion, cached) if card is not None else None,
            ),
            model=model or self.wire_model,
            finish_reason=choice.get("finish_reason"),
            provider_fields=provider_fields(message) or None,
        )


def provider_fields(message: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of a reply's message that are the provider's own (``reasoning_content``, ...), as sent.

    Providers that send them (DeepSeek's reasoner, for one) want them back on the next request.
    """
    return {k: v for k, v in message.items() if k not in _STANDARD_MESSAGE_KEYS and v is not None}


def _call_fields(call: Mapping[str, Any]) -> dict[str, Any] | None:
    """A tool call's keys beyond the chat format's own (a signature riding on the call, say)."""
    return {k: v for k, v in call.items() if k not in _STANDARD_CALL_KEYS and v is not None} or None


def _message_of(data: Mapping[str, Any]) -> dict[str, Any]:
    choices = data.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    return message if isinstance(message, dict) else {}


def _tool_call(call: Mapping[str, Any]) -> ToolCall:
    """A tool call with its arguments exactly as sent: malformed JSON is the agent's to report."""
    found = call.get("function")
    function: dict[str, Any] = found if isinstance(found, dict) else {}
    arguments = function.get("arguments")
    if arguments is None:
        arguments = ""
    elif not isinstance(arguments, str):  # a provider that sent an object rather than JSON text
        arguments = json.dumps(arguments, ensure_ascii=False)
    call_id = call.get("id")
    return ToolCall(
        id=call_id if isinstance(call_id, str) and call_id else f"call_{uuid.uuid4().hex[:24]}",
        name=str(function.get("name") or ""),
        arguments=arguments,
        provider_fields=_call_fields(call),
    )


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _status_error(status: int, headers: Mapping[str, str], raw: bytes, url: str) -> ProviderError:
    """The error a server answered with: its message and code from the body (OpenAI's shape or flat)."""
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    error = body.get("error", body) if isinstance(body, dict) else None
    message = code = None
    if isinstance(error, dict):
        message = error.get("message") if isinstance(error.get("message"), str) else None
        code = error.get("code") if isinstance(error.get("code"), str) else None
    elif isinstance(error, str):
        message = error
    if message is None:
        message = raw[:200].decode("utf-8", "replace").strip() or "no message"
    if status == 400 and code is None and any(text in message.lower() for text in _CONTEXT_TEXTS):
        code = "context_length_exceeded"
    return ProviderError(
        f"{message} ({url})", url=url, status_code=status, code=code, response_headers=headers
    )


async def _close_at_shutdown(session: aiohttp.ClientSession) -> AsyncGenerator[None, None]:
    """Suspended at its `yield` until its loop shuts down or the pool drops it; then closes `session`."""
    try:
        yield
    finally:
        await session.close()
