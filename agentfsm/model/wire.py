"""The OpenAI wire format for agentfsm messages, with images where the API accepts them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..messages import Message, Role

__all__ = ["IMAGE_OMITTED", "to_wire"]

IMAGE_OMITTED = "[image omitted: model does not accept images]"
"""What a model that takes no images is sent in an image's place, so it knows one was there."""


def to_wire(
    messages: Sequence[Message], system_msgs: Sequence[Message] = (), *, vision: bool
) -> list[dict[str, Any]]:
    """The OpenAI-format message list: system messages first, images placed where the API accepts them.

    A user message's image becomes an image part of that message. Images of
    tool (and assistant) messages cannot ride on those messages, so they are
    gathered into ONE user message placed after the run of tool messages,
    which keeps every assistant ``tool_calls`` message directly followed by
    its results. Without `vision` each image is replaced by `IMAGE_OMITTED`.
    """
    wire: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    for message in (*system_msgs, *messages):
        if message.role is not Role.TOOL and pending:
            wire.append({"role": "user", "content": pending})
            pending = []
        data = message.to_openai()
        image = message.base64_image
        if image and not vision:
            data["content"] = f"{message.content}\n{IMAGE_OMITTED}" if message.content else IMAGE_OMITTED
        elif image and message.role is Role.USER:
            text = [_text_part(message.content)] if message.content else []
            data["content"] = [*text, _image_part(image)]
        elif image:
            source = f"tool {message.name}" if message.role is Role.TOOL else f"the {message.role.value}"
            pending += [_text_part(f"Image returned by {source}:"), _image_part(image)]
        wire.append(data)
    if pending:
        wire.append({"role": "user", "content": pending})
    return wire


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _image_part(base64_image: str) -> dict[str, Any]:
    url = (
        base64_image
        if base64_image.startswith("data:")
        else f"data:{_mime(base64_image)};base64,{base64_image}"
    )
    return {"type": "image_url", "image_url": {"url": url}}


def _mime(base64_image: str) -> str:
    """The image type, from the first bytes of the base64 text (PNG when unsure)."""
    for prefix, mime in (("/9j/", "image/jpeg"), ("R0lGOD", "image/gif"), ("UklGR", "image/webp")):
        if base64_image.startswith(prefix):
            return mime
    return "image/png"
