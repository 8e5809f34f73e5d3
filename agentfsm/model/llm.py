"""`LLM`: the `ChatModel` for real providers, through litellm.

Any litellm model name works, so ``openai/<name>`` with `api_base` reaches
any OpenAI-compatible server. What this adapter adds on top of litellm:

- litellm is imported on the first call, not with this module, and in a
  worker thread (it takes seconds, which would freeze the event loop), with
  its network fetch of the cost map switched off and its log output kept off
  stdout (``--json`` output and MCP stdio depend on it);
- the request is checked against the model's input window *before* it is
  sent, and a provider's context-window error also becomes
  `TokenLimitExceeded`, so the agent ends with ``token_limit`` rather than
  an error, and never retries it;
- retries belong to tenacity alone (see `llm_retry`): litellm's and the
  OpenAI SDK's own are switched off, so one call is never several hidden
  requests;
- images from tools travel as image parts on a user message, where the model
  accepts images, and are replaced by a visible note where it does not;
- what the provider returned beside content and tool calls (reasoning content,
  thinking blocks with their signatures, provider-specific fields) is kept on
  the reply as plain JSON (`provider_fields`), so the next request sends it
  back: Claude with thinking and DeepSeek's reasoner reject a history without it.
- with `stream` on, the reply is streamed (usage included) and each piece
  handed to the caller's `DeltaSink`; litellm's own `stream_chunk_builder`
  puts the chunks back together (in a worker thread: it is slow on long
  streams) into the response a request without streaming gets, read by the
  same code (a stream cut short or garbled is one of litellm's transient
  errors, and retried whole);
- each attempt is whole within `timeout`, as `OpenAICompatible`'s is, on a
  deadline of the adapter's own: litellm's timeout is per read, so a server
  that sends a chunk now and then would hold a call as long as it liked;
- what litellm knows of the model (its input window, vision, reasoning, whether
  it takes a temperature) is looked up once per adapter, with `api_base` and the
  provider, in a thread of its own and bounded in time: for some providers
  (Ollama) the lookup is an HTTP request to the server, which must neither
  block the event loop nor hang the run (past the bound the run goes on with
  what is known without it, and a warning says so). What the user declared
  (`max_input_tokens`, `vision`, `reasoning`, `takes_temperature`) is used instead,
  fact by fact (`agentfsm.model.facts.declared`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import os
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from ..errors import LLMError, ProviderTimeoutError
from ..log import event
from ..messages import Message, ProviderFields, ToolCall
from .base import DeltaSink, LLMResponse, ToolChoice, Usage, log_call
from .facts import ModelFacts, declared, look_up_facts, stand_in, unknown_facts
from .options import LLMOptions
from .reach import connect_once, probe_target
from .retry import RetryPolicy
from .tokens import TokenCounter, check_window
from .wire import IMAGE_OMITTED, to_wire

__all__ = ["IMAGE_OMITTED", "LLM", "load_litellm", "to_wire"]

_LOOKUP_TIMEOUT = 5.0
"""Seconds the first request waits for the model's facts (a lookup over HTTP for Ollama)."""

# The chat format's own keys of a reply's message and of a tool call: everything else litellm
# puts there is the provider's, kept as `provider_fields`.
_MESSAGE_KEYS = frozenset({"content", "role", "tool_calls", "function_call"})
_CALL_KEYS = frozenset({"id", "type", "function", "index"})

_LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")
_load_lock = threading.Lock()
_facts_lock = threading.Lock()
_litellm: Any = None


def load_litellm() -> Any:
    """Import litellm once (thread-safe), configured to stay offline at import and quiet on stdout."""
    global _litellm
    with _load_lock:
        if _litellm is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            loggers = [logging.getLogger(name) for name in _LITELLM_LOGGERS]
            for logger in loggers:  # its import logs debug lines through its stdout handler
                logger.addFilter(_below_warning_dropped)
            try:
                import litellm
            finally:
                for logger in loggers:
                    logger.removeFilter(_below_warning_dropped)
            litellm.suppress_debug_info = True  # else "Give Feedback / Get Help" banners on stdout
            _keep_litellm_off_stdout(loggers)
            _litellm = litellm
    return _litellm


async def _load_litellm_async() -> Any:
    """`load_litellm` without blocking the event loop: the first import takes seconds."""
    return _litellm if _litellm is not None else await asyncio.to_thread(load_litellm)


def _below_warning_dropped(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.WARNING


def _keep_litellm_off_stdout(loggers: list[logging.Logger]) -> None:
    """Detach litellm's own log handlers that can write to stdout.

    litellm attaches a handler to its loggers that sends records *below
    WARNING* to stdout, so an application that turns on DEBUG logging would
    find litellm's debug lines in its stdout. Without that handler the
    records propagate to the root logger like any library's, and go where
    the application sends its logs (with no configuration at all, warnings
    still reach stderr through logging's last-resort handler). While litellm
    imports, before the handler can be removed, its records below WARNING are
    dropped.
    """
    for logger in loggers:
        for handler in list(logger.handlers):
            routes_to_stdout = type(handler).__name__ == "LevelRoutingStreamHandler"
            if routes_to_stdout or getattr(handler, "stream", None) is sys.stdout:
                logger.removeHandler(handler)


# -- the adapter ---------------------------------------------------------------


class LLM(LLMOptions):
    """A chat model reached through litellm; implements `ChatModel`.

    Built from its options (`LLMOptions`, where each is documented and checked):
    ``LLM("openai/gpt-4o-mini", timeout=30, max_attempts=4, token_budget=50_000)``.
    `max_input_tokens` overrides the input window litellm knows for the model
    (for ``openai/<name>`` on your own server litellm knows none, so nothing
    is checked before sending unless you set it); `vision`, `reasoning` and
    `takes_temperature` override its other facts the same way. `token_budget` caps the
    tokens one agent run may spend; the agent compares it with the run's
    usage. The adapter is immutable: `dataclasses.replace(llm, timeout=5)`
    gives another.
    """

    # A connection, not a value: two adapters with the same options are two adapters.
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __repr__(self) -> str:  # never shows the API key
        base = f", api_base={self.api_base!r}" if self.api_base else ""
        return f"LLM(model={self.model!r}{base})"

    @cached_property
    def _retry(self) -> RetryPolicy:
        return RetryPolicy(self.max_attempts, self.backoff_base, self.backoff_max, self.retry_timeout)

    # -- what litellm knows about the model ---------------------------------

    def _facts_future(self) -> concurrent.futures.Future[ModelFacts]:
        """The one lookup of this adapter's model facts, started on first use in a daemon thread
        (a lookup stuck on a server must not keep the process from exiting)."""
        with _facts_lock:
            future: concurrent.futures.Future[ModelFacts] | None = self.__dict__.get("_facts")
            if future is None:
                future = self.__dict__["_facts"] = concurrent.futures.Future()
                threading.Thread(target=self._look_up, args=(future,), daemon=True).start()
        return future

    def _look_up(self, future: concurrent.futures.Future[ModelFacts]) -> None:
        try:
            facts = look_up_facts(load_litellm(), self)
        except Exception:  # never leave a waiter hanging
            facts = unknown_facts(self.model)
        with _facts_lock:
            if not future.done():  # else the run stopped waiting and went on without
                future.set_result(facts)

    async def _facts_ready(self) -> None:
        """Wait (off the loop) for the facts, at most `_LOOKUP_TIMEOUT`; past it, go on without."""
        future = self._facts_future()
        if future.done():
            return
        bound = min(self.timeout, _LOOKUP_TIMEOUT)
        try:
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), bound)
        except TimeoutError:
            with _facts_lock:
                if not future.done():
                    future.set_result(unknown_facts(self.model))
            stand_in(load_litellm(), self)
            event(
                "model_info_timeout",
                level=logging.WARNING,
                model=self.model,
                api_base=self.api_base,
                waited_s=bound,
                note="going on without the model's input window and vision; set max_input_tokens and vision",
            )

    async def _reach_first(self) -> None:
        """Before the first request (and litellm's import), open one connection to `api_base`:
        a server nobody runs is then known in milliseconds, not after seconds of import
        (see `agentfsm.model.reach`). Once anything answered, this is skipped."""
        if self.api_base is None or self._retry.answered:
            return
        target = probe_target(self.api_base)
        if target is None:
            return
        host, port = target
        await self._retry.run(
            lambda: connect_once(host, port, min(self.timeout, _LOOKUP_TIMEOUT)),
            model=self.model,
            url=self.api_base,
        )

    @property
    def _facts(self) -> ModelFacts:
        """What litellm said of the model, with what the options declare laid over it."""
        return declared(self._facts_future().result(), self)

    @property
    def supports_vision(self) -> bool:
        """Whether images are sent as images: `vision`, else litellm's map (False when it doesn't know)."""
        return self._facts.vision

    @property
    def is_reasoning(self) -> bool:
        """Reasoning models take `max_completion_tokens`: `reasoning`, else litellm's map, else the name."""
        return self._facts.reasoning

    @property
    def sends_temperature(self) -> bool:
        """Whether `temperature` is sent: as `takes_temperature` says, else unless litellm says the
        model takes only the default (OpenAI's o-series and gpt-5), or, for a model litellm doesn't
        know, its name says so."""
        return self.temperature is not None and self._facts.temperature

    @property
    def input_limit(self) -> int | None:
        """The input window checked before sending: `max_input_tokens`, else litellm's, else none
        (a declared window needs no lookup, so it is read without waiting for one)."""
        if self.max_input_tokens is not None:
            return self.max_input_tokens
        return self._facts.input_window

    @cached_property
    def _tokens(self) -> TokenCounter:
        """This model's counter: litellm's `token_counter`, each message counted once (see `TokenCounter`)."""
        litellm, model, vision = load_litellm(), self.model, self.supports_vision
        primer: int = litellm.token_counter(model=model, messages=[])  # the reply's primer, in every count

        def message_tokens(message: Message) -> int:
            count: int = litellm.token_counter(model=model, messages=to_wire([message], vision=vision))
            return count - primer

        def request_tokens(tools: Sequence[dict[str, Any]], has_system: bool) -> int:
            probe = [{"role": "system", "content": ""}] if has_system else []
            with_tools = litellm.token_counter(model=model, messages=probe, tools=list(tools) or None)
            return int(with_tools - litellm.token_counter(model=model, messages=probe) + primer)

        return TokenCounter(message_tokens, request_tokens)

    def count_tokens(
        self,
        messages: Sequence[Message],
        system_msgs: Sequence[Message] = (),
        tools: Sequence[dict[str, Any]] = (),
    ) -> int | None:
        """Input tokens of a request by litellm's counter, or None if it cannot count them.

        Each message is tokenised once per model, not on every request (`TokenCounter`).
        """
        try:
            return self._tokens.count(messages, system_msgs, tools)
        except Exception:
            return None

    # -- asking -------------------------------------------------------------

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

        Raises `TokenLimitExceeded` when the request is over the input window
        (nothing is sent) or the provider reports a context-window error, and
        `LLMError` when the call fails for good. With `stream` on, each piece
        of the reply goes to `sink` as it arrives.
        """
        await self._reach_first()
        litellm = await _load_litellm_async()
        await self._facts_ready()
        started = time.perf_counter()
        wire = to_wire(messages, system_msgs, vision=self.supports_vision)
        tool_list = [dict(t) for t in tools]
        self._check_fits(messages, system_msgs, tools)
        request = self._request(wire, tool_list, tool_choice)
        attempt = 0

        async def call() -> Any:
            nonlocal attempt
            attempt += 1
            return await self._attempt(litellm, request, sink, attempt)

        response, attempts = await self._retry.run(call, model=self.model, url=self.api_base)
        reply = self._reply(response)
        log_call(reply, model=self.model, attempts=attempts, started=started)
        return reply

    async def _attempt(
        self, litellm: Any, request: dict[str, Any], sink: DeltaSink | None, attempt: int
    ) -> Any:
        """One request, whole within `timeout` as `OpenAICompatible`'s is: litellm's own timeout is
        per read, so a server that sends a chunk (or a byte) now and then would hold it forever."""
        where = self.api_base or "the provider"
        scope = asyncio.timeout(self.timeout)
        try:
            async with scope:
                if self.stream:
                    return await _streamed(litellm, request, sink, attempt)
                return await litellm.acompletion(**request)
        except TimeoutError as exc:
            if not scope.expired():
                raise
            what = "the stream did not end" if self.stream else "no complete reply"
            raise ProviderTimeoutError(
                f"timeout: {what} within {self.timeout:g} s from {where}", url=where
            ) from exc

    async def ask(self, messages: Sequence[Message], *, system_msgs: Sequence[Message] = ()) -> str:
        """Ask for a plain text answer (no tools); empty string if the model said nothing."""
        reply = await self.ask_tool(messages, system_msgs=system_msgs)
        return reply.content or ""

    def _check_fits(
        self, messages: Sequence[Message], system_msgs: Sequence[Message], tools: Sequence[dict[str, Any]]
    ) -> None:
        limit = self.input_limit
        if limit is None:
            return
        count = self.count_tokens(messages, system_msgs, tools)
        check_window(self.model, count, limit, configured=self.max_input_tokens is not None)

    def _request(
        self, wire: list[dict[str, Any]], tools: list[dict[str, Any]], tool_choice: ToolChoice
    ) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": wire,
            "api_base": self.api_base,
            "api_key": self.api_key or _no_key_placeholder(self.model, self.api_base),
            "timeout": self.timeout,
            # tenacity owns retries: litellm's (num_retries) and the OpenAI SDK's (max_retries) are off
            "num_retries": 0,
            "max_retries": 0,
        }
        if tools:
            request["tools"] = tools
            request["tool_choice"] = tool_choice
        if self.max_tokens is not None:
            request["max_completion_tokens" if self.is_reasoning else "max_tokens"] = self.max_tokens
        if self.sends_temperature:
            request["temperature"] = self.temperature
        if self.api_version is not None:
            request["api_version"] = self.api_version
        if self.stream:
            request["stream"] = True
            request["stream_options"] = {"include_usage": True}  # the usage comes in the last chunk
        request.update(self.extra or {})
        return request

    def _reply(self, response: Any) -> LLMResponse:
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise LLMError(f"{self.model}: the provider's reply has no choices: {response!r:.300}")
        choice = choices[0]
        message = choice.message
        calls = tuple(_tool_call(call) for call in (getattr(message, "tool_calls", None) or ()))
        usage = getattr(response, "usage", None)
        cost = _response_cost(response)
        return LLMResponse(
            content=getattr(message, "content", None) or None,
            tool_calls=calls,
            usage=Usage(
                input_tokens=getattr(usage, "prompt_tokens", None) or 0,
                output_tokens=getattr(usage, "completion_tokens", None) or 0,
                llm_calls=1,
                cost_usd=cost,
            ),
            model=getattr(response, "model", None) or self.model,
            finish_reason=getattr(choice, "finish_reason", None),
            provider_fields=_provider_fields(message, _MESSAGE_KEYS),
        )


async def _streamed(litellm: Any, request: dict[str, Any], sink: DeltaSink | None, attempt: int) -> Any:
    """One streamed attempt: each chunk's pieces to `sink`, then the chunks put back together
    (litellm's `stream_chunk_builder`) into the response a request without streaming gets. The
    stream is closed however the attempt ends, so a cancelled run leaves no connection open."""
    chunks = []
    names: dict[int, str] = {}  # each call's name as told to the sink: some servers repeat it in every delta
    stream = await litellm.acompletion(**request)
    try:
        async for chunk in stream:
            chunks.append(chunk)
            choices = getattr(chunk, "choices", None)
            delta = getattr(choices[0], "delta", None) if choices else None
            if sink is None or delta is None:
                continue
            text = getattr(delta, "content", None)
            if text:
                sink.text(text, attempt)
            for piece in getattr(delta, "tool_calls", None) or ():
                function = getattr(piece, "function", None)
                index = getattr(piece, "index", 0) or 0
                name = getattr(function, "name", None) or None
                if name is not None and names.get(index) == name:
                    name = None  # said already
                elif name is not None:
                    names[index] = name
                sink.tool_call(
                    index,
                    getattr(piece, "id", None) or None,
                    name,
                    getattr(function, "arguments", None) or "",
                    attempt,
                )
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()
    # Off the event loop: litellm's builder costs ~0.1 ms a chunk (9 s for 100,000), which
    # would freeze every other run on the loop meanwhile.
    return await asyncio.to_thread(litellm.stream_chunk_builder, chunks, messages=request["messages"])


def _provider_fields(item: Any, own: frozenset[str]) -> ProviderFields | None:
    """The keys of litellm's `item` (a message or a tool call) that are not among `own`, as plain
    JSON data, or None when there are none. Empty values are kept: DeepSeek's reasoner wants an
    empty `reasoning_content` back as much as a full one."""
    dump = getattr(item, "model_dump", None)
    if not callable(dump):
        return None
    try:
        data = dump(mode="json", exclude_none=True)
    except Exception:  # a provider's object pydantic cannot dump: the reply still counts without it
        return None
    if not isinstance(data, dict):
        return None
    fields = {key: value for key, value in data.items() if key not in own}
    return fields or None


def _no_key_placeholder(model: str, api_base: str | None) -> str | None:
    """The key sent to an OpenAI-compatible server of one's own when none is configured.

    A local vLLM or llama.cpp server usually wants no key, but the OpenAI SDK
    under litellm refuses to send a request without one; a server that does
    want one answers 401, which is never retried and says to set the key.
    Only for ``openai/`` models with `api_base` and no ``OPENAI_API_KEY``: the
    provider's own servers always want the real key.
    """
    if api_base is None or not model.startswith("openai/") or os.environ.get("OPENAI_API_KEY"):
        return None
    return "none"


def _response_cost(response: Any) -> float | None:
    """The cost litellm already computed for the reply (its `completion_cost`, run while it logs
    the call): None when it priced nothing (an unpriced model's cost is unknown, not zero)."""
    hidden = getattr(response, "_hidden_params", None)
    cost = hidden.get("response_cost") if isinstance(hidden, dict) else None
    if isinstance(cost, bool) or not isinstance(cost, int | float) or not math.isfinite(cost):
        return None
    return float(cost)


def _tool_call(call: Any) -> ToolCall:
    """A tool call with its arguments exactly as sent: malformed JSON is the agent's to report."""
    function = call.function
    arguments = function.arguments
    if arguments is None:
        arguments = ""
    elif not isinstance(arguments, str):  # a provider that sent an object rather than JSON text
        import json

        arguments = json.dumps(arguments, ensure_ascii=False)
    return ToolCall(
        id=call.id or f"call_{uuid.uuid4().hex[:24]}",
        name=function.name or "",
        arguments=arguments,
        provider_fields=_provider_fields(call, _CALL_KEYS),
    )
