"""Messages as the OpenAI-style chat API defines them, with the seed's factories.

A `Message` is what memory stores and what the LLM adapter sends. Tool calls
keep their arguments as the raw JSON string the model produced: parsing is the
tool executor's job, so a malformed argument string reaches it intact and
becomes an error observation rather than a crash here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .serde import Serializable, slot_builder

__all__ = ["Message", "Role", "ToolCall"]


class Role(StrEnum):
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

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }

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

    def __post_init__(self) -> None:
        if type(self.role) is not Role:
            object.__setattr__(self, "role", Role(self.role))
        if type(self.tool_calls) is not tuple:
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))

    @classmethod
    def user_message(cls, content: str, base64_image: str | None = None) -> Message:
        return _build(cls, Role.USER, content, (), None, None, base64_image)

    @classmethod
    def system_message(cls, content: str) -> Message:
        return _build(cls, Role.SYSTEM, content, (), None, None, None)

    @classmethod
    def assistant_message(cls, content: str | None = None, base64_image: str | None = None) -> Message:
        return _build(cls, Role.ASSISTANT, content, (), None, None, base64_image)

    @classmethod
    def tool_message(
        cls, content: str, *, name: str, tool_call_id: str, base64_image: str | None = None
    ) -> Message:
        return _build(cls, Role.TOOL, content, (), name, tool_call_id, base64_image)

    @classmethod
    def from_tool_calls(
        cls, tool_calls: list[ToolCall] | tuple[ToolCall, ...], content: str | None = None
    ) -> Message:
        """An assistant message that requests `tool_calls` (the seed's `from_tool_calls`)."""
        return _build(cls, Role.ASSISTANT, content, tuple(tool_calls), None, None, None)

    def to_openai(self) -> dict[str, Any]:
        """The wire form (without images; the LLM adapter decides how images travel)."""
        data: dict[str, Any] = {"role": self.role.value, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        if self.name is not None and self.role is Role.TOOL:
            data["name"] = self.name
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
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
        )
    return _new_message(role, content, tool_calls, name, tool_call_id, base64_image)
