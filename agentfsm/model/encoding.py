"""Tokens as OpenAI's tokenizer counts them, without litellm, for models that do not load it.

tiktoken (a dependency of litellm's, so installed wherever `LLM` works) with the
encoding files litellm bundles, so nothing is downloaded: the model's own
encoding where tiktoken knows the model, else ``cl100k_base``, litellm's
fallback. Messages are counted as OpenAI documents it (3 tokens of framing per
message, 1 more for a name, 3 to prime the reply); an image counts
`IMAGE_TOKENS`, and the tool declarations count as their JSON text.

The functions here count one message or one request's extras; `TokenCounter`
(`tokens.py`) sums them so that each message is counted once. `char_bound`
counts a text as four tokens a character, an upper bound that needs no
tokenizer (a token is at least one UTF-8 byte, a character at most four): a
request whose bound fits the window fits it, and is never tokenised.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..messages import Message
from .tokens import MessageTokens, RequestTokens
from .wire import to_wire

__all__ = [
    "IMAGE_TOKENS",
    "Encoding",
    "char_bound",
    "load_encoding",
    "message_tokens",
    "request_tokens",
    "tokenizer",
]

IMAGE_TOKENS = 765
"""What an image counts: a 1024x1024 image at high detail (the provider's context error catches the rest)."""

_PER_MESSAGE = 3
_PER_NAME = 1
_REPLY_PRIMING = 3
_FALLBACK_ENCODING = "cl100k_base"


class Encoding(Protocol):
    """The part of `tiktoken.Encoding` the counter uses."""

    def encode_ordinary(self, text: str) -> list[int]: ...


def load_encoding(model: str) -> Encoding:
    """The encoding for `model` (blocking: reading it takes 0.1-0.3 s; call it off the event loop).

    tiktoken reads its files from ``TIKTOKEN_CACHE_DIR``; unless that is set, it is pointed at the
    copies litellm ships (as litellm itself does when it loads), so no encoding is downloaded.
    """
    import tiktoken

    bundled = _bundled_encodings()
    if bundled is not None:
        os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(bundled))
    try:
        name = tiktoken.encoding_name_for_model(model.rsplit("/", 1)[-1])
    except KeyError:
        name = _FALLBACK_ENCODING
    encoding: Encoding = tiktoken.get_encoding(name)
    return encoding


def char_bound(text: str) -> int:
    """At least as many tokens as any tokenizer finds in `text`, without tokenising it."""
    return 4 * len(text)


def message_tokens(size: Callable[[str], int], *, vision: bool) -> MessageTokens:
    """What one message adds to a request (its framing, texts and images), texts measured by `size`."""

    def count(message: Message) -> int:
        total = 0
        for data in to_wire([message], vision=vision):
            total += _PER_MESSAGE + (_PER_NAME if data.get("name") else 0)
            for text, images in _texts(data):
                total += size(text) + images * IMAGE_TOKENS
        return total

    return count


def request_tokens(size: Callable[[str], int]) -> RequestTokens:
    """What a request adds beyond its messages: the reply's primer and the tool declarations."""

    def count(tools: Sequence[dict[str, Any]], has_system: bool) -> int:
        declared = size(json.dumps(list(tools), ensure_ascii=False, separators=(",", ":"))) if tools else 0
        return _REPLY_PRIMING + declared

    return count


def tokenizer(encoding: Encoding) -> Callable[[str], int]:
    """`encoding`'s count of a text."""
    return lambda text: len(encoding.encode_ordinary(text))


def _texts(message: dict[str, Any]) -> Iterator[tuple[str, int]]:
    """Each text of a wire message (role, content or its parts, tool calls), with images counted."""
    yield str(message.get("role") or ""), 0
    content = message.get("content")
    if isinstance(content, str):
        yield content, 0
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "image_url":
                yield "", 1
            elif isinstance(part, dict):
                yield str(part.get("text") or ""), 0
    if message.get("name"):
        yield str(message["name"]), 0
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        yield f"{function.get('name') or ''}{function.get('arguments') or ''}", 0


def _bundled_encodings() -> Path | None:
    """litellm's folder of tiktoken files, found without importing litellm."""
    try:
        spec = importlib.util.find_spec("litellm")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(folder) / "litellm_core_utils" / "tokenizers"
        if path.is_dir():
            return path
    return None
