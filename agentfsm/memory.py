"""Conversation memory: a sliding window that never splits a tool-call turn.

Upstream OpenManus slices the list by count (`messages[-100:]`), which can cut
an assistant message away from the `tool` messages that answer it; providers
then reject the request. Here a *block* is the unit of trimming: an assistant
message with its tool results, or any other single message. The run's first
request is pinned and survives trimming, so the model never loses the task.

Trimming pops from the left end of deques, so adding a message is O(1)
amortized however long the history is.

`Memory.watch()` reports each change as it is made (a `MemoryChange`:
appended, pinned, dropped by trimming, last message replaced, cleared), so
a checkpointer writes what changed since its last write in O(changes),
never by comparing two copies of the history.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import chain, islice
from typing import Literal, TypeVar, assert_never, overload

from .errors import ConfigError, IndexOutOfRangeError, WrongValueError
from .messages import Message, Role, ToolCall
from .serde import Serializable

__all__ = [
    "ChangeKind",
    "Memory",
    "MemoryChange",
    "MemorySnapshot",
    "MemoryWatch",
    "MessagesView",
    "apply_change",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class MemorySnapshot(Serializable):
    """Memory as plain data, for checkpoints and traces."""

    max_messages: int
    messages: list[Message]
    pinned_index: int | None = None


ChangeKind = Literal["add", "request", "drop", "replace_last", "clear"]


@dataclass(frozen=True, slots=True)
class MemoryChange:
    """One change to a memory's messages, as `Memory.watch` reports it, in the order made.

    Applied in order to the messages (and pin) before them, the changes give
    the messages after them; that is all a checkpoint journal records.
    """

    kind: ChangeKind
    """``add``: `message` appended. ``request``: `message` appended and pinned (a run's
    request; the previous pin is released, its message stays). ``drop``: `count` messages
    removed from position `at` (trimming, whole blocks). ``replace_last``: the last message
    is now `message` (its pending calls were replaced). ``clear``: every message removed."""
    message: Message | None = None
    at: int = 0
    count: int = 0


class MemoryWatch:
    """The changes made to one `Memory` since the last `take()`.

    O(1) per change, and nothing at all while nobody watches. A watch keeps
    every change until it is taken: `close()` it when done.
    """

    __slots__ = ("_changes", "memory")

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self._changes: list[MemoryChange] = []

    def take(self) -> list[MemoryChange]:
        """The changes since the last `take()` (or since the watch began), oldest first."""
        changes, self._changes = self._changes, []
        return changes

    def close(self) -> None:
        self.memory.unwatch(self)

    def note(self, change: MemoryChange) -> None:
        """Keep `change` for the next `take()`: what the watched memory calls at each change."""
        changes = self._changes
        last = changes[-1] if changes else None
        if change.kind == "drop" and last is not None and last.kind == "drop" and last.at == change.at:
            changes[-1] = MemoryChange("drop", at=change.at, count=last.count + change.count)
        else:
            changes.append(change)


_M = TypeVar("_M")


def apply_change(
    messages: list[_M],
    pinned_index: int | None,
    kind: ChangeKind,
    message: _M | None = None,
    *,
    at: int = 0,
    count: int = 0,
) -> int | None:
    """Apply one `MemoryChange` to `messages` in place; return the pinned request's index after it.

    `messages` are a memory's messages, or their JSON dumps (a checkpoint's
    reader replays its journal on those), with the pin at `pinned_index`.
    """
    if kind == "drop":
        del messages[at : at + count]
        return pinned_index - count if pinned_index is not None and at < pinned_index else pinned_index
    if kind == "clear":
        messages.clear()
        return None
    if message is None:
        raise WrongValueError(f"a {kind!r} change carries the message it adds or puts last; got None")
    if kind == "replace_last":
        messages[-1] = message
        return pinned_index
    messages.append(message)
    if kind == "request":
        return len(messages) - 1
    if kind == "add":
        return pinned_index
    assert_never(kind)


class Memory:
    """The agent's message history, bounded by `max_messages`.

    Invariants (checked on every add, so they hold at every transition):
    a `tool` message always follows the assistant message that called it, and
    trimming drops whole blocks, so no tool message is ever orphaned.
    """

    _watches: tuple[MemoryWatch, ...] = ()
    """Who is told of each change (`watch`); empty, and free, unless someone asks."""

    def __init__(self, max_messages: int = 100) -> None:
        if max_messages < 2:
            raise ConfigError(
                f"`max_messages` must be at least 2 (the request and a reply), got {max_messages!r}"
            )
        self.max_messages = max_messages
        self._head: deque[Message] = deque()  # older than the pinned request
        self._pinned: Message | None = None
        self._tail: deque[Message] = deque()  # the pinned request's run, newest last
        self._open_calls: dict[str, str] = {}  # call id -> tool name, awaiting a result

    # -- reading ------------------------------------------------------------

    @property
    def messages(self) -> list[Message]:
        """All messages, oldest first (a new list; memory itself is not exposed)."""
        pinned = (self._pinned,) if self._pinned is not None else ()
        return list(chain(self._head, pinned, self._tail))

    def __iter__(self) -> Iterator[Message]:
        pinned = (self._pinned,) if self._pinned is not None else ()
        return chain(self._head, pinned, self._tail)

    def view(self, *extra: Message) -> MessagesView:
        """The messages plus `extra`, without copying: O(1) however long the history.

        The view is live: read it before memory changes again (the engine
        hands one to the model for the duration of one request).
        """
        head, tail = self._head, self._tail
        if self._pinned is None:
            return MessagesView((head, (), tail, extra), len(head) + len(tail) + len(extra))
        return MessagesView((head, (self._pinned,), tail, extra), len(head) + len(tail) + len(extra) + 1)

    def __len__(self) -> int:
        return len(self._head) + len(self._tail) + (self._pinned is not None)

    def last(self) -> Message | None:
        if self._tail:
            return self._tail[-1]
        if self._pinned is not None:
            return self._pinned
        return self._head[-1] if self._head else None

    @property
    def open_calls(self) -> dict[str, str]:
        """Tool calls of the last assistant message that have no result yet (id -> name)."""
        return dict(self._open_calls)

    # -- writing ------------------------------------------------------------

    def add_request(self, message: Message) -> None:
        """Add the request that starts a run and pin it: trimming never drops it."""
        if message.role is not Role.USER:
            raise WrongValueError(f"a run's request must be a user message, got role {message.role.value!r}")
        if self._pinned is not None:
            self._head.append(self._pinned)
        self._head.extend(self._tail)
        self._tail.clear()
        self._pinned = None
        self._check_add(message)
        self._pinned = message
        if self._watches:
            self._changed(MemoryChange("request", message))
        if len(self._head) >= self.max_messages:  # the head, the request and an empty tail
            self._trim()

    def add_message(self, message: Message) -> None:
        self._check_add(message)
        role = message.role
        if role is Role.TOOL:
            assert message.tool_call_id is not None
            del self._open_calls[message.tool_call_id]
        elif role is Role.ASSISTANT and message.tool_calls:
            calls = {call.id: call.name for call in message.tool_calls}
            if len(calls) != len(message.tool_calls):
                # One result could answer only one of them: the pairs could never be whole.
                ids = [call.id for call in message.tool_calls]
                repeated = sorted({i for i in ids if ids.count(i) > 1})
                raise WrongValueError(
                    f"the assistant message's calls repeat the ids {repeated!r} (all ids: {ids!r}); "
                    "give each call a distinct id before adding it"
                )
            self._open_calls = calls
        self._tail.append(message)
        if self._watches:
            self._changed(MemoryChange("add", message))
        if len(self) > self.max_messages:
            self._trim()

    def add_messages(self, messages: list[Message]) -> None:
        for message in messages:
            self.add_message(message)

    def replace_open_calls(self, calls: Sequence[ToolCall]) -> Message:
        """Swap the calls of the last assistant message while none of them has a result yet.

        Rewriting that message (rather than adding another) keeps the pairing
        rule: every call in memory is one that will be answered, and every
        answer follows the call it answers. Its text is kept. Returns the new message.
        """
        last = self._tail[-1] if self._tail else None
        if (
            last is None
            or last.role is not Role.ASSISTANT
            or not last.tool_calls
            or set(self._open_calls) != {call.id for call in last.tool_calls}
        ):
            raise WrongValueError(
                "only the calls of the last assistant message can be replaced, before any has a result"
            )
        ids = [call.id for call in calls]
        if not calls or not all(ids) or len(set(ids)) != len(ids):
            raise WrongValueError(
                f"replacement calls need at least one call and unique, non-empty ids; got {ids!r}"
            )
        message = replace(last, tool_calls=tuple(calls))
        self._tail[-1] = message
        if self._watches:
            self._changed(MemoryChange("replace_last", message))
        self._open_calls = {call.id: call.name for call in calls}
        return message

    def close_open_calls(self, reason: str) -> list[Message]:
        """Answer every pending tool call with `reason`, so the history stays valid.

        Used when a run ends (error, cancellation) between asking for tools and
        recording their results. Returns the messages added.
        """
        added = [
            Message.tool_message(reason, name=name, tool_call_id=call_id)
            for call_id, name in self._open_calls.items()
        ]
        self.add_messages(added)
        return added

    def clear(self) -> None:
        self._head.clear()
        self._tail.clear()
        self._pinned = None
        self._open_calls = {}
        if self._watches:
            self._changed(MemoryChange("clear"))

    # -- watching -------------------------------------------------------------

    def watch(self) -> MemoryWatch:
        """Start recording every change to this memory (see `MemoryWatch`)."""
        watch = MemoryWatch(self)
        self._watches = (*self._watches, watch)
        return watch

    def unwatch(self, watch: MemoryWatch) -> None:
        """Stop recording into `watch` (what `MemoryWatch.close` does)."""
        self._watches = tuple(w for w in self._watches if w is not watch)

    def _changed(self, change: MemoryChange) -> None:
        for watch in self._watches:
            watch.note(change)

    # -- snapshots ------------------------------------------------------------

    def snapshot(self) -> MemorySnapshot:
        pinned_index = len(self._head) if self._pinned is not None else None
        return MemorySnapshot(
            max_messages=self.max_messages, messages=self.messages, pinned_index=pinned_index
        )

    @classmethod
    def from_snapshot(cls, snapshot: MemorySnapshot) -> Memory:
        memory = cls(snapshot.max_messages)
        for index, message in enumerate(snapshot.messages):
            if index == snapshot.pinned_index:
                memory.add_request(message)
            else:
                memory.add_message(message)
        return memory

    # -- internals ------------------------------------------------------------

    def _check_add(self, message: Message) -> None:
        if message.role is Role.TOOL:
            if message.tool_call_id not in self._open_calls:
                raise WrongValueError(
                    f"tool message for call id {message.tool_call_id!r} answers no pending call "
                    f"(pending: {sorted(self._open_calls)!r}); add the assistant message that "
                    "requested it first"
                )
        elif self._open_calls:
            raise WrongValueError(
                f"cannot add a {message.role.value!r} message while tool calls "
                f"{sorted(self._open_calls)!r} have no result; add their tool messages first "
                "(or `close_open_calls`)"
            )

    def _trim(self) -> None:
        while len(self) > self.max_messages:
            source = self._head if self._head else self._tail
            size = _block_size(source)
            if source is self._tail and size >= len(self._tail):
                return  # the newest block is never dropped, even if it alone is too long
            for _ in range(size):
                source.popleft()
            if self._watches:  # from the front, or (the head empty) just after the pinned request
                at = 1 if source is self._tail and self._pinned is not None else 0
                self._changed(MemoryChange("drop", at=at, count=size))


def _block_size(messages: deque[Message]) -> int:
    """How many messages from the left form one block: an assistant call and its results."""
    first = messages[0]
    size = 1
    if (first.role is Role.ASSISTANT and first.tool_calls) or first.role is Role.TOOL:
        while size < len(messages) and messages[size].role is Role.TOOL:
            size += 1
    return size


class MessagesView(Sequence[Message]):
    """A read-only sequence over parts of memory, without copying them."""

    __slots__ = ("_len", "_parts")

    def __init__(self, parts: tuple[Sequence[Message], ...], length: int | None = None) -> None:
        self._parts = parts
        self._len = sum(len(part) for part in parts) if length is None else length

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Message]:
        return chain.from_iterable(self._parts)

    def __reversed__(self) -> Iterator[Message]:
        return chain.from_iterable(map(reversed, self._parts[::-1]))

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._len)
            if step < 0:
                return list(self)[index]
            return list(islice(self, start, stop, step))
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexOutOfRangeError(f"message index {index} out of range for {self._len} messages")
        for part in self._parts:  # deque indexing is O(1) near either end, where the engine reads
            if index < len(part):
                return part[index]
            index -= len(part)
        raise AssertionError("unreachable")
