"""The contract between the engine and a chat model.

`LLM` (litellm) and the test models in `agentfsm.testing` implement
`ChatModel`; the engine depends only on this protocol. A model that can
stream (its `stream` is True) also takes a `DeltaSink` (`StreamingChatModel`):
the reply it returns is the same either way, the sink only sees it arrive.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, cast, runtime_checkable

from ..log import event
from ..messages import Message, ProviderFields, ToolCall
from ..serde import Serializable

__all__ = [
    "ChatModel",
    "DeltaSink",
    "LLMResponse",
    "StreamingChatModel",
    "ToolChoice",
    "Usage",
    "log_call",
    "streams",
]

ToolChoice = Literal["auto", "required", "none"]
"""Whether the model may call tools (``auto``), must call one (``required``), or may not (``none``)."""


@dataclass(slots=True, kw_only=True)
class Usage(Serializable):
    """Tokens, calls and cost, summed over a run (or reported by one LLM call)."""

    input_tokens: int = 0
    output_tokens: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    cost_usd: float | None = None
    """Dollars, or None when any call's model has no known price."""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def copy(self) -> Usage:
        return Usage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            llm_calls=self.llm_calls,
            tool_calls=self.tool_calls,
            cost_usd=self.cost_usd,
        )

    def add(self, other: Usage) -> None:
        """Add `other` in place. The cost stays known only while every call's cost is known."""
        if other.llm_calls:
            if self.llm_calls == 0:
                self.cost_usd = other.cost_usd
            elif self.cost_usd is not None and other.cost_usd is not None:
                self.cost_usd += other.cost_usd
            else:
                self.cost_usd = None
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.llm_calls += other.llm_calls
        self.tool_calls += other.tool_calls


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMResponse(Serializable):
    """One reply from the model: text, tool calls, or both."""

    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    """This call's usage (`llm_calls` is 1 for a real call)."""
    model: str | None = None
    finish_reason: str | None = None
    provider_fields: ProviderFields | None = None
    """What the provider returned on the message beside content and tool calls (reasoning,
    thinking blocks with signatures, ...): the agent keeps it on the assistant message it
    records, which sends it back (see `Message.provider_fields`)."""


@runtime_checkable
class ChatModel(Protocol):
    """Anything that answers a chat request with an `LLMResponse`.

    A trace records the model's class and those of its attributes named after a traced
    option of `LLMOptions` (`model`, `timeout`, ...): see `describe_model`.
    """

    @property
    def token_budget(self) -> int | None:
        """Tokens a single run may spend (input + output), or None for no budget."""
        ...

    async def ask_tool(
        self,
        messages: Sequence[Message],
        *,
        system_msgs: Sequence[Message] = (),
        tools: Sequence[dict[str, Any]] = (),
        tool_choice: ToolChoice = "auto",
    ) -> LLMResponse:
        """Ask for the next reply. Raises `TokenLimitExceeded` when the request does not fit."""
        ...


class DeltaSink(Protocol):
    """Where a streaming model puts each piece of a reply as it arrives.

    `attempt` counts the tries of one call (1, then 2 after a retry): the pieces of an attempt
    that failed mid-stream were not the reply, and the next attempt's pieces start it again.
    Called on the event loop, between chunks: a sink must return at once.
    """

    def text(self, piece: str, attempt: int) -> None:
        """A piece of the reply's text."""
        ...

    def tool_call(
        self, index: int, call_id: str | None, name: str | None, arguments: str, attempt: int
    ) -> None:
        """A piece of the tool call at `index`: its id and name when they first come, then
        fragments of its arguments' JSON (`arguments`, possibly empty)."""
        ...


@runtime_checkable
class StreamingChatModel(ChatModel, Protocol):
    """A `ChatModel` that streams when its `stream` is True, putting the pieces into `sink`."""

    @property
    def stream(self) -> bool:
        """Whether requests stream (`ask_tool` then takes a `sink`)."""
        ...

    async def ask_tool(
        self,
        messages: Sequence[Message],
        *,
        system_msgs: Sequence[Message] = (),
        tools: Sequence[dict[str, Any]] = (),
        tool_choice: ToolChoice = "auto",
        sink: DeltaSink | None = None,
    ) -> LLMResponse:
        """As `ChatModel.ask_tool`; while streaming, each piece goes to `sink` as it arrives."""
        ...


def streams(model: ChatModel) -> StreamingChatModel | None:
    """`model` if it streams its replies (its `stream` is True), else None."""
    return cast(StreamingChatModel, model) if getattr(model, "stream", False) is True else None


def log_call(reply: LLMResponse, *, model: str, attempts: int, started: float) -> None:
    """The ``llm_call`` debug event every adapter logs for an answered request (`started`: its
    ``time.perf_counter()`` at the start)."""
    event(
        "llm_call",
        level=logging.DEBUG,
        model=model,
        attempts=attempts,
        input_tokens=reply.usage.input_tokens,
        output_tokens=reply.usage.output_tokens,
        cost_usd=reply.usage.cost_usd,
        duration_ms=round((time.perf_counter() - started) * 1000, 1),
    )
