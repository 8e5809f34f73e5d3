"""Counting a request's input tokens without litellm, for the check before sending.

tiktoken (a dependency of litellm's, so installed wherever `LLM` works) with the
encoding files litellm bundles, so nothing is downloaded: the model's own
encoding where tiktoken knows the model, else ``cl100k_base``, litellm's
fallback. Messages are counted as OpenAI documents it (3 tokens of framing per
message, 1 more for a name, 3 to prime the reply); an image counts
`IMAGE_TOKENS`, and the tool declarations count as their JSON text.

Most requests are far below their window, so `upper_bound` comes first: a
token is at least one UTF-8 byte and a character at most four, so a request
whose characters, times four, fit the window fits it, and is not tokenised.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

__all__ = ["IMAGE_TOKENS", "Encoding", "count_tokens", "load_encoding", "upper_bound"]

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


def upper_bound(wire: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> int:
    """At least as many tokens as `count_tokens` finds, without tokenising (four per character)."""
    return _count(wire, tools, lambda text: 4 * len(text))


def count_tokens(encoding: Encoding, wire: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> int:
    """The request's input tokens under `encoding`."""
    return _count(wire, tools, lambda text: len(encoding.encode_ordinary(text)))


def _count(
    wire: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], size: Callable[[str], int]
) -> int:
    total = _REPLY_PRIMING
    for message in wire:
        total += _PER_MESSAGE + (_PER_NAME if message.get("name") else 0)
        for text, images in _texts(message):
            total += size(text) + images * IMAGE_TOKENS
    if tools:
        total += size(json.dumps(list(tools), ensure_ascii=False, separators=(",", ":")))
    return total


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
