"""Test models for fast unit tests and for users' own tests of their agents.

`ScriptedLLM` answers with a fixed list of replies, in order; `FunctionLLM`
calls your function to decide each reply. Both record every request, so a
test can assert on what the model was shown. They implement the same
`ChatModel` protocol as `LLM`, so an agent cannot tell them apart::

    llm = ScriptedLLM([reply(tool_calls=[("terminate", {"status": "success"})])])
    result = await ToolCallAgent(llm=llm).run("finish at once")
    assert result.stop_reason == "terminated"
    assert llm.requests[0].messages[-2].content == "finish at once"
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .errors import ScriptExhaustedError
from .messages import Message, ToolCall
from .model.base import DeltaSink, LLMResponse, ToolChoice, Usage

__all__ = ["FunctionLLM", "ModelRequest", "ScriptedLLM", "reply"]

CallSpec = tuple[str, dict[str, Any] | str]


def reply(
    content: str | None = None,
    tool_calls: Iterable[CallSpec | ToolCall] | None = None,
    *,
    input_tokens: int = 10,
    output_tokens: int = 5,
    cost_usd: float | None = None,
) -> LLMResponse:
    """A scripted reply. Tool calls are ``(name, arguments)`` pairs; arguments may be a
    dict or a raw JSON string (to script a malformed call). Call ids are filled in
    deterministically by the model (``call_1``, ``call_2``, ...)."""
    calls = tuple(
        c if isinstance(c, ToolCall) else ToolCall.create("", c[0], c[1]) for c in (tool_calls or ())
    )
    usage = Usage(input_tokens=input_tokens, output_tokens=output_tokens, llm_calls=1, cost_usd=cost_usd)
    return LLMResponse(content=content, tool_calls=calls, usage=usage, model="scripted")


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """What the agent sent on one call."""

    messages: Sequence[Message]
    """A copy when the model records requests; else the engine's live view (read it in the call)."""
    system_msgs: Sequence[Message]
    tools: Sequence[dict[str, Any]]
    tool_choice: ToolChoice

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]


@dataclass
class _Recorder:
    token_budget: int | None = None
    record: bool = True
    """Keep a copy of every request in `requests` (off for benchmarks: copying is O(history))."""
    requests: list[ModelRequest] = field(default_factory=list)
    stream: bool = False
    """Stream each reply into the caller's sink, as a streaming model does: its text in word-sized
    pieces, each call's id and name, then its arguments in pieces of 12 characters."""
    _ids: int = 0

    def _record(
        self,
        messages: Sequence[Message],
        system_msgs: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        tool_choice: ToolChoice,
    ) -> ModelRequest:
        if not self.record:  # the live view, not a copy
            return ModelRequest(messages, system_msgs, tools, tool_choice)
        request = ModelRequest(tuple(messages), tuple(system_msgs), tuple(tools), tool_choice)
        self.requests.append(request)
        return request

    def _streamed(self, response: LLMResponse, sink: DeltaSink | None) -> LLMResponse:
        if self.stream and sink is not None:
            for piece in re.findall(r"\s*\S+\s*", response.content or "") or [response.content or ""]:
                if piece:
                    sink.text(piece, 1)
            for index, call in enumerate(response.tool_calls):
                sink.tool_call(index, call.id, call.name, "", 1)
                for at in range(0, len(call.arguments), 12):
                    sink.tool_call(index, None, None, call.arguments[at : at + 12], 1)
        return response

    def _with_ids(self, response: LLMResponse) -> LLMResponse:
        for call in response.tool_calls:
            if not call.id:
                break
        else:
            return response
        calls = []
        for call in response.tool_calls:
            if not call.id:
                self._ids += 1
                call = replace(call, id=f"call_{self._ids}")
            calls.append(call)
        return replace(response, tool_calls=tuple(calls))


class ScriptedLLM(_Recorder):
    """Replies from a script, in order. Running out raises `ScriptExhaustedError`.

    A script item may also be an exception instance (raised on that call, e.g.
    `TokenLimitExceeded(...)`), to test error handling.
    """

    __test__ = False

    def __init__(
        self,
        replies: Iterable[LLMResponse | BaseException],
        *,
        token_budget: int | None = None,
        record: bool = True,
        stream: bool = False,
    ) -> None:
        super().__init__(token_budget=token_budget, record=record, stream=stream)
        self.script = list(replies)
        self._next = 0

    @property
    def remaining(self) -> int:
        return len(self.script) - self._next

    async def ask_tool(
        self,
        messages: Sequence[Message],
        *,
        system_msgs: Sequence[Message] = (),
        tools: Sequence[dict[str, Any]] = (),
        tool_choice: ToolChoice = "auto",
        sink: DeltaSink | None = None,
    ) -> LLMResponse:
        self._record(messages, system_msgs, tools, tool_choice)
        if self._next >= len(self.script):
            raise ScriptExhaustedError(
                f"ScriptedLLM has {len(self.script)} replies and was asked for reply {self._next + 1}; "
                "add replies to the script (or end the run with a terminate call)"
            )
        item = self.script[self._next]
        self._next += 1
        if isinstance(item, BaseException):
            raise item
        return self._streamed(self._with_ids(item), sink)


ReplyFunction = Callable[[ModelRequest], LLMResponse | Awaitable[LLMResponse]]


class FunctionLLM(_Recorder):
    """Each reply is computed by `fn(request)` (sync or async), from what the agent sent."""

    __test__ = False

    def __init__(
        self, fn: ReplyFunction, *, token_budget: int | None = None, record: bool = True, stream: bool = False
    ) -> None:
        super().__init__(token_budget=token_budget, record=record, stream=stream)
        self.fn = fn
        self._is_async = inspect.iscoroutinefunction(fn)

    async def ask_tool(
        self,
        messages: Sequence[Message],
        *,
        system_msgs: Sequence[Message] = (),
        tools: Sequence[dict[str, Any]] = (),
        tool_choice: ToolChoice = "auto",
        sink: DeltaSink | None = None,
    ) -> LLMResponse:
        result = self.fn(self._record(messages, system_msgs, tools, tool_choice))
        if self._is_async or not isinstance(result, LLMResponse):
            result = await result  # type: ignore[misc]
        return self._streamed(self._with_ids(result), sink)
