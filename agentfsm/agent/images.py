"""Which images a request carries: the latest ones (`max_images`), older ones named by a marker.

Every screenshot a browser action returns stays in memory, and by default every one is sent
again with each later request. A run that browses twenty pages then sends twenty images a
request: about a thousand tokens each, most of them of pages the agent has left. With
`max_images` the request keeps the latest few and says, where each older one was, that it
was left out; memory, traces and checkpoints keep every image (a replay sends what the
recorded run sent, because the same option is recorded with it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..messages import Message

__all__ = ["IMAGE_LEFT_OUT", "latest_images"]

IMAGE_LEFT_OUT = "[image left out: a request carries only the latest {keep}]"


def latest_images(messages: Sequence[Message], keep: int) -> Sequence[Message]:
    """`messages` with the image of each message but the latest `keep` that have one replaced
    by `IMAGE_LEFT_OUT`; `messages` itself when it has no more than `keep` images."""
    having = [index for index, message in enumerate(messages) if message.base64_image]
    if len(having) <= keep:
        return messages
    marker = IMAGE_LEFT_OUT.format(keep=keep)
    left_out = set(having[: len(having) - keep])
    return [
        _left_out(message, marker) if index in left_out else message for index, message in enumerate(messages)
    ]


def _left_out(message: Message, marker: str) -> Message:
    content = f"{message.content}\n{marker}" if message.content else marker
    return replace(message, base64_image=None, content=content)
