"""A streamed chat completion put back together, chunk by chunk, as the request without streaming
would have got it.

Why the stream is assembled into the non-streamed *body* (the chat-completions JSON), rather than
straight into an `LLMResponse`: the adapter then reads both through the one function it already
has (`OpenAICompatible._reply`), so content, tool calls, provider fields, usage and price cannot
differ between a streamed and a non-streamed reply, and memory, traces, checkpoints and replay are
the same either way. Each piece also goes to the `DeltaSink` as it arrives.

What makes a stream complete: a finish reason, and then the ``[DONE]`` terminator or the usage
chunk. A stream that ends without them was cut (llmock's ``truncate`` ends one cleanly but early,
which a lax client takes for a whole answer); a chunk that is not JSON is the server's fault too.
Both raise `ProviderConnectionError`, which the retry policy retries like a lost connection.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import ProviderConnectionError
from .base import DeltaSink

__all__ = ["ChunkAssembler", "EventData"]

_OWN_DELTA_KEYS = frozenset({"role", "content", "tool_calls"})
_OWN_CALL_KEYS = frozenset({"id", "type", "function", "index"})


class EventData:
    """Server-sent events read line by line: `feed` gives an event's data once its blank line
    comes (``data:`` lines joined by newlines); comments and other fields are skipped."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, raw: bytes) -> str | None:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line.startswith("data:"):
            self._data.append(line[5:].removeprefix(" "))
        elif not line and self._data:
            data, self._data = "\n".join(self._data), []
            return data
        return None

    def end(self) -> str | None:
        """The data of a last event the stream did not close with a blank line, if any."""
        return self.feed(b"")


@dataclass(slots=True)
class _Call:
    """One tool call as its pieces arrive."""

    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ChunkAssembler:
    """Collects one attempt's chunks (`add`) into the completion a request without streaming gets
    (`completion`), handing each piece of text and of tool calls to `sink` on the way."""

    sink: DeltaSink | None
    attempt: int
    url: str
    content: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    message_extra: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    model: str | None = None
    usage: dict[str, Any] | None = None
    done: bool = False
    """The ``[DONE]`` terminator came."""

    def add_data(self, data: str) -> None:
        """One event's data: a chunk's JSON, or the terminator."""
        if data.strip() == "[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            chunk = None
        if not isinstance(chunk, dict):
            raise ProviderConnectionError(
                f"a chunk of the stream is not a JSON object: {data[:200]!r} ({self.url})", url=self.url
            )
        error = chunk.get("error")
        if error is not None:
            message = error.get("message") if isinstance(error, dict) else error
            raise ProviderConnectionError(
                f"the stream reported an error: {message} ({self.url})", url=self.url
            )
        self.add(chunk)

    def add(self, chunk: dict[str, Any]) -> None:
        """One chunk: its first choice's delta, its finish reason, the model and the usage."""
        if isinstance(chunk.get("model"), str) and chunk["model"]:
            self.model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, dict):
            return
        if isinstance(choice.get("finish_reason"), str):
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        text = delta.get("content")
        if isinstance(text, str) and text:
            self.content.append(text)
            if self.sink is not None:
                self.sink.text(text, self.attempt)
        for piece in delta.get("tool_calls") or ():
            if isinstance(piece, dict):
                self._add_call(piece)
        for key, value in delta.items():
            if key not in _OWN_DELTA_KEYS and value is not None:
                _merge(self.message_extra, key, value)

    def _add_call(self, piece: dict[str, Any]) -> None:
        index = piece.get("index")
        if not isinstance(index, int):
            index = len(self.calls)
        call = self.calls.setdefault(index, _Call())
        new_id = piece.get("id") if isinstance(piece.get("id"), str) and piece.get("id") else None
        found = piece.get("function")
        function: dict[str, Any] = found if isinstance(found, dict) else {}
        name = function.get("name") if isinstance(function.get("name"), str) else None
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False) if arguments is not None else ""
        if new_id is not None and call.id is None:
            call.id = new_id
        if name == call.name:
            name = None  # a server that repeats the name in every delta (litellm keeps it whole too)
        elif name:
            call.name = name  # a name comes whole: the last one sent counts, as litellm reads it
        if arguments:
            call.arguments.append(arguments)
        for key, value in piece.items():
            if key not in _OWN_CALL_KEYS and value is not None:
                _merge(call.extra, key, value)
        if self.sink is not None:
            self.sink.tool_call(index, new_id, name or None, arguments, self.attempt)

    def completion(self) -> dict[str, Any]:
        """The chat completion the chunks make; `ProviderConnectionError` if the stream was cut."""
        if self.finish_reason is None or not (self.done or self.usage is not None):
            said = "no finish reason" if self.finish_reason is None else "no end after its finish reason"
            raise ProviderConnectionError(
                f"the stream ended early ({said}; {len(self.content)} text pieces) ({self.url})",
                url=self.url,
            )
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.calls:
            message["tool_calls"] = [
                {
                    **call.extra,
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": "".join(call.arguments)},
                }
                for _, call in sorted(self.calls.items())
            ]
        message.update(self.message_extra)
        body: dict[str, Any] = {
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
        }
        if self.model is not None:
            body["model"] = self.model
        if self.usage is not None:
            body["usage"] = self.usage
        return body


def _merge(into: dict[str, Any], key: str, value: Any) -> None:
    """A provider's own field across chunks: text is streamed in pieces (``reasoning_content``),
    anything else is sent whole (the last one counts)."""
    before = into.get(key)
    into[key] = before + value if isinstance(before, str) and isinstance(value, str) else value
