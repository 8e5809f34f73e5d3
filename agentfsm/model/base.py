"""The contract between the engine and a chat model.

`LLM` (litellm) and the test models in `agentfsm.testing` implement
`ChatModel`; the engine depends only on this protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from ..messages import Message, ToolCall
from ..run.result import Usage
from ..serde import Serializable

__all__ = ["ChatModel", "LLMResponse", "ToolChoice"]

ToolChoice = Literal["auto", "required", "none"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMResponse(Serializable):
    """One reply from the model: text, tool calls, or both."""

    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    """This call's usage (`llm_calls` is 1 for a real call)."""
    model: str | None = None
    finish_reason: str | None = None


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
