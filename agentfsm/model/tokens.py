"""`TokenCounter`: a request's input tokens, each message tokenised once.

A model checks every request against its input window before sending it.
Tokenising the whole request each step costs O(history) per step and
O(history²) per run (about 11 µs a message with litellm's counter: 112 ms a
step at 10,000 messages). Messages are immutable (`Message` is frozen), so a
message's count never changes: the counter remembers it by the message's
identity and tokenises only the messages it has not seen, whatever happened
to the history in between (trimmed, edited, replaced, another run's). A step
then costs one C-level dictionary look-up per message (~50 ns) and the
tokenising of the new ones.

Why identity, not the previous request: memory keeps the run's first request
and trims the turns after it, edits replace messages in place, and runs that
share a model interleave their requests, so "the previous request plus what
was appended" rarely holds; a look-up by identity is right in every case.
A counted message is kept referenced while its count is, so its ``id`` cannot
be reused by another object. What is kept is bounded: two generations, the
older dropped once the younger outgrows twice the largest recent request (or
`min_capacity`), so a long run is never recounted and finished runs are
let go.

The counting itself is the model's: `message_tokens` (one message, as that
model's wire and tokenizer see it) and `request_tokens` (what a request adds
beyond its messages: the reply's primer, the tool declarations). `LLM` passes
litellm's `token_counter`; the sum stays within a few tokens of litellm's
count of the whole request (exact without images; an image of a tool result
rides in a user message of its own per tool message, not one per run of
them). A model without litellm can count with tiktoken, loading the encoding
files litellm bundles (``litellm/litellm_core_utils/tokenizers``, named by the
SHA-1 of their download URL, found with `importlib.util.find_spec` without
importing litellm); failing that, about 4 characters a token is the usual
estimate for English text and code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from ..errors import TokenLimitExceeded
from ..messages import Message

__all__ = ["MessageTokens", "RequestTokens", "TokenCounter", "check_window"]

MessageTokens = Callable[[Message], int]
"""Tokens one message adds to a request: its role and framing, content, name, tool calls, images."""

RequestTokens = Callable[[Sequence[dict[str, Any]], bool], int]
"""Tokens a request adds beyond its messages, given its tool declarations and whether it has a
system message (OpenAI-style counting discounts the tools' framing then)."""


class _Generation:
    """Counts by message identity, with the messages kept alive so no ``id`` is reused while its
    count is. Counts and messages are two dicts, not one of pairs: a dict of ints is not tracked
    by the garbage collector, where 10,000 pairs would be 10,000 more objects for every full
    collection to walk."""

    __slots__ = ("counts", "messages")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.messages: dict[int, Message] = {}

    def __len__(self) -> int:
        return len(self.counts)


class TokenCounter:
    """Counts a request's input tokens, tokenising each message once (see the module's docstring).

    Not safe to share between threads; an event loop's runs may share one (it never awaits).
    """

    __slots__ = ("_counts", "_kept", "_largest", "_min_capacity", "_old", "_request", "_tools")

    def __init__(
        self, message_tokens: MessageTokens, request_tokens: RequestTokens, *, min_capacity: int = 4096
    ) -> None:
        self._counts = message_tokens
        self._request = request_tokens
        self._min_capacity = min_capacity
        self._kept = _Generation()  # the young generation
        self._old = _Generation()
        self._largest = 0
        self._tools: tuple[tuple[object, ...], bool, int] | None = None  # the last tools' count

    def __len__(self) -> int:
        """Messages whose counts are remembered (both generations)."""
        return len(self._kept) + len(self._old.counts.keys() - self._kept.counts.keys())

    def count(
        self,
        messages: Sequence[Message],
        system_msgs: Sequence[Message] = (),
        tools: Sequence[dict[str, Any]] = (),
    ) -> int:
        """The request's input tokens: system messages, messages, and what the request adds."""
        total = self._messages(system_msgs) + self._messages(messages)
        return total + self._request_part(tools, bool(system_msgs))

    def _messages(self, messages: Sequence[Message]) -> int:
        if not messages:
            return 0
        counts = list(map(self._kept.counts.get, map(id, messages)))  # C-level: ~50 ns a message
        if None in counts:
            self._fill(messages, counts)
        total: int = sum(cast(list[int], counts))  # all filled now
        self._largest = max(self._largest, len(counts))
        return total

    def _fill(self, messages: Sequence[Message], counts: list[int | None]) -> None:
        """Count the messages not in the young generation (or take them from the old one)."""
        kept, old, index = self._kept, self._old, -1
        listed = messages if isinstance(messages, list | tuple) else list(messages)
        while True:
            try:
                index = counts.index(None, index + 1)
            except ValueError:
                return
            message = listed[index]
            key = id(message)
            count = old.counts.get(key)
            if count is None:
                count = self._counts(message)
            kept.counts[key], kept.messages[key] = count, message
            counts[index] = count
            if len(kept) > max(self._min_capacity, 2 * self._largest, 2 * len(counts)):
                self._old, self._kept, self._largest = kept, _Generation(), 0
                kept, old = self._kept, self._old

    def _request_part(self, tools: Sequence[dict[str, Any]], has_system: bool) -> int:
        """The tools' count, recounted only when the declarations are other objects (a tool set
        builds its list once per change and it is not mutated)."""
        key = tuple(tools)
        last = self._tools
        if (
            last is None
            or last[1] != has_system
            or len(last[0]) != len(key)
            or any(a is not b for a, b in zip(last[0], key, strict=True))
        ):
            last = self._tools = (key, has_system, self._request(tools, has_system))
        return last[2]


def check_window(model: str, count: int | None, limit: int, *, configured: bool) -> None:
    """Raise `TokenLimitExceeded` when a request of `count` input tokens is over `limit`: the
    adapters' one refusal, naming where the limit came from (`configured`: `max_input_tokens`,
    else the model's own window). A count of None (nothing could count it) is let through."""
    if count is not None and count > limit:
        source = "max_input_tokens" if configured else "the model's input window"
        raise TokenLimitExceeded(
            f"{model}: the request has {count} input tokens, over the limit of {limit} ({source}); "
            "it was not sent"
        )
