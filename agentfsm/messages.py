"""Messages as the OpenAI-style chat API defines them, with the seed's factories.

A `Message` is what memory stores and what the LLM adapter sends. Tool calls
keep their arguments as the raw JSON string the model produced: parsing is the
tool executor's job, so a malformed argument string reaches it intact and
becomes an error observation rather than a crash here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .serde import Serializable, slot_builder

__all__ = ["Message", "ProviderFields", "Role", "ToolCall"]

ProviderFields = dict[str, Any]
"""What a provider returned beside the chat format's own keys, as plain JSON data, keyed as it
sent them (``reasoning_content``, ``thinking_blocks``, ``provider_specific_fields``, ...).

Providers need some of it back on the next request (Claude's thinking blocks with their
signatures, DeepSeek's reasoning content, Gemini's thought signatures), so a message keeps
all of it and `to_openai` sends it back as keys of the message (or of the tool call). It is
left out of hashing (a dict has no hash; messages are hashed by the trace), not of equality.
Read-only by convention, like the message holding it."""


class Role(StrEnum):
    """Who a message is from, as the chat-completions wire names it."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall(Serializable):
    """One function call requested by the model."""

    id: str
    """The provider's call id; the tool message answering it carries the same id."""
    name: str
    arguments: str = "{}"
    """Arguments exactly as the model sent them (a JSON object, or garbage)."""
    provider_fields: ProviderFields | None = field(default=None, hash=False)
    """The provider's own keys on this call (Gemini's thought signature), sent back with it."""

    def to_openai(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }
        if self.provider_fields:
            data.update(self.provider_fields)
        return data

    @classmethod
    def create(cls, id: str, name: str, arguments: dict[str, Any] | str | None = None) -> ToolCall:
        """Build a call from a dict (serialised to JSON) or a raw argument string."""
        if arguments is None:
            raw = "{}"
        elif isinstance(arguments, str):
            raw = arguments
        else:
            raw = json.dumps(arguments, ensure_ascii=False)
        return cls(id=id, name=name, arguments=raw)


@dataclass(frozen=True, slots=True, kw_only=True)
class Message(Serializable):
    """One chat message. Use the factories; they set the role and the pairing fields."""

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    name: str | None = None
    """For `tool` messages, the tool's name."""
    tool_call_id: str | None = None
    """For `tool` messages, the id of the call this message answers."""
    base64_image: str | None = None
    """An image attached to the message (a tool's screenshot, say)."""
    provider_fields: ProviderFields | None = field(default=None, hash=False)
    """On an assistant message: what the provider returned beside content and tool calls
    (reasoning, thinking blocks, signatures), sent back as keys of the message."""

    def __post_init__(self) -> None:
        if type(self.role) is not Role:
            object.__setattr__(self, "role", Role(self.role))
        if type(self.tool_calls) is not tuple:
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))

    @classmethod
    def user_message(cls, content: str, base64_image: str | None = None) -> Message:
        return _build(cls, Role.USER, content, (), None, None, base64_image, None)

    @classmethod
    def system_message(cls, content: str) -> Message:
        return _build(cls, Role.SYSTEM, content, (), None, None, None, None)

    @classmethod
    def assistant_message(
        cls,
        content: str | None = None,
        base64_image: str | None = None,
        *,
        provider_fields: ProviderFields | None = None,
    ) -> Message:
        return _build(cls, Role.ASSISTANT, content, (), None, None, base64_image, provider_fields or None)

    @classmethod
    def tool_message(
        cls, content: str, *, name: str, tool_call_id: str, base64_image: str | None = None
    ) -> Message:
        return _build(cls, Role.TOOL, content, (), name, tool_call_id, base64_image, None)

    @classmethod
    def from_tool_calls(
        cls,
        tool_calls: list[ToolCall] | tuple[ToolCall, ...],
        content: str | None = None,
        *,
        provider_fields: ProviderFields | None = None,
    ) -> Message:
        """An assistant message that requests `tool_calls` (the seed's `from_tool_calls`)."""
        return _build(
            cls, Role.ASSISTANT, content, tuple(tool_calls), None, None, None, provider_fields or None
        )

    def to_openai(self) -> dict[str, Any]:
        """The wire form (without images; the LLM adapter decides how images travel)."""
        data: dict[str, Any] = {"role": self.role.value, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        if self.name is not None and self.role is Role.TOOL:
            data["name"] = self.name
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.provider_fields:
            data.update(self.provider_fields)
        return data


# Kept for speed: setting a message's slots directly, not through the frozen __init__, saves ~8% of a run.
_new_message = slot_builder(Message)


def _build(
    cls: type[Message],
    role: Role,
    content: str | None,
    tool_calls: tuple[ToolCall, ...],
    name: str | None,
    tool_call_id: str | None,
    base64_image: str | None,
    provider_fields: ProviderFields | None,
) -> Message:
    """What `cls(role=..., ...)` builds, for the factories, which pass the fields already
    normalised (messages are made on every step; see `slot_builder`)."""
    if cls is not Message:  # a subclass may have fields and checks of its own
        return cls(
            role=role,
            content=content,
            tool_calls=tool_calls,
            name=name,
            tool_call_id=tool_call_id,
            base64_image=base64_image,
            provider_fields=provider_fields,
        )
    return _new_message(role, content, tool_calls, name, tool_call_id, base64_image, provider_fields)
