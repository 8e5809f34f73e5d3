"""`TokenCounter`: each message tokenised once, and the sum close to litellm's count of the whole request."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from agentfsm import LLM, Message, ToolCall
from agentfsm.model.llm import load_litellm, to_wire
from agentfsm.model.tokens import TokenCounter

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers and say what the sum is.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "terminate",
            "description": "End the run when the task is done.",
            "parameters": {"type": "object", "properties": {"status": {"type": "string"}}},
        },
    },
]


def history(turns: int, *, image: bool = False) -> list[Message]:
    messages = [Message.user_message("Add the numbers from 1 to 40, one call at a time, then report.")]
    for i in range(turns):
        call = ToolCall.create(f"call_{i}", "add", {"a": i, "b": 1})
        messages.append(Message.from_tool_calls([call], f"Step {i}: adding {i} and 1." if i % 2 else None))
        shot = PNG if image and i % 3 == 0 else None
        messages.append(Message.tool_message(str(i + 1), name="add", tool_call_id=call.id, base64_image=shot))
    messages.append(Message.assistant_message("The sum is 820; every call returned what it should."))
    return messages


class Counting:
    """A per-message counter that says how often it ran, and on which messages."""

    def __init__(self) -> None:
        self.seen: list[Message] = []

    def message(self, message: Message) -> int:
        self.seen.append(message)
        return len(message.content or "") + 10 * len(message.tool_calls) + 3

    def request(self, tools: Sequence[dict[str, Any]], has_system: bool) -> int:
        return 3 + 100 * len(tools) - (4 if has_system and tools else 0)

    def whole(self, messages: Sequence[Message], system: Sequence[Message], tools: Sequence[Any]) -> int:
        return sum(map(self.message, (*system, *messages))) + self.request(tools, bool(system))


# -- close to litellm's whole-request count ---------------------------------------------------


@pytest.mark.parametrize("model", ["openai/bench-model", "openai/gpt-4o-mini", "openai/gpt-4o"])
@pytest.mark.parametrize("with_tools", [True, False], ids=["tools", "no tools"])
@pytest.mark.parametrize("with_system", [True, False], ids=["system", "no system"])
def test_the_sum_over_messages_is_within_a_few_tokens_a_message_of_litellms_whole_count(
    model: str, with_tools: bool, with_system: bool
) -> None:
    litellm = load_litellm()
    llm = LLM(model)
    messages = history(30, image=True)
    system = [Message.system_message("You are a careful adder. Use the tools.")] if with_system else []
    tools = TOOLS if with_tools else []
    wire = to_wire(messages, system, vision=llm.supports_vision)
    whole = litellm.token_counter(model=model, messages=wire, tools=tools or None)

    counted = llm.count_tokens(messages, system, tools)

    assert counted is not None
    assert abs(counted - whole) <= 3 * (len(system) + len(messages)) // 10  # a few tokens, at most
    without_images = [
        m if m.base64_image is None else Message.tool_message(m.content or "", name="add", tool_call_id="x")
        for m in messages
    ]
    plain = to_wire(without_images, system, vision=llm.supports_vision)
    assert llm.count_tokens(without_images, system, tools) == litellm.token_counter(
        model=model, messages=plain, tools=tools or None
    )  # exact without images (an image part's user message is counted per tool message)


def test_a_model_declared_to_see_images_counts_them_as_litellm_counts_the_image_parts() -> None:
    """Declared `vision` changes what is counted against the window: the image parts it sends,
    not the note a text model gets."""
    litellm = load_litellm()
    messages = history(3, image=True)
    declared, unknown = LLM("openai/qwen2.5-vl", vision=True), LLM("openai/qwen2.5-vl")
    with_images = litellm.token_counter(model="openai/qwen2.5-vl", messages=to_wire(messages, vision=True))
    with_notes = litellm.token_counter(model="openai/qwen2.5-vl", messages=to_wire(messages, vision=False))
    assert with_images > with_notes
    counted, noted = declared.count_tokens(messages), unknown.count_tokens(messages)
    assert counted is not None and noted is not None
    assert abs(counted - with_images) <= 3 and abs(noted - with_notes) <= 3
    assert counted > noted


def test_a_fresh_count_and_an_incremental_one_agree() -> None:
    messages = history(50)
    llm, fresh = LLM("openai/gpt-4o-mini"), LLM("openai/gpt-4o-mini")
    for end in range(5, len(messages), 7):  # a run's requests: each one longer
        assert llm.count_tokens(messages[:end], (), TOOLS) == fresh.count_tokens(messages[:end], (), TOOLS)
        fresh = LLM("openai/gpt-4o-mini")


# -- each message once -----------------------------------------------------------------------


def test_a_growing_history_tokenises_only_the_new_messages() -> None:
    counting = Counting()
    counter = TokenCounter(counting.message, counting.request)
    messages = history(20)
    system = [Message.system_message("be brief")]

    assert counter.count(messages[:11], system, TOOLS) == counting.whole(messages[:11], system, TOOLS)
    counting.seen.clear()
    for end in range(12, len(messages) + 1):
        expected = counting.whole(messages[:end], system, TOOLS)
        counting.seen.clear()
        assert counter.count(messages[:end], system, TOOLS) == expected
        assert counting.seen == [messages[end - 1]]  # the one message that is new


def test_a_trimmed_or_edited_history_counts_only_what_is_new() -> None:
    counting = Counting()
    counter = TokenCounter(counting.message, counting.request)
    messages = history(20)
    counter.count(messages)
    counting.seen.clear()

    trimmed = [messages[0], *messages[5:]]  # memory keeps the request and drops whole turns after it
    assert counter.count(trimmed) == sum(map(Counting().message, trimmed)) + 3
    assert counting.seen == []

    edited = list(trimmed)
    edited[7] = Message.tool_message("a much longer observation " * 20, name="add", tool_call_id="x")
    assert counter.count(edited) == sum(map(Counting().message, edited)) + 3
    assert counting.seen == [edited[7]]

    equal_but_new = [Message.user_message(m.content or "") if m.role == "user" else m for m in edited]
    counting.seen.clear()
    counter.count(equal_but_new)
    assert counting.seen == [equal_but_new[0]]  # a new object is counted, even when equal to one known


def test_tools_are_counted_again_only_when_the_declarations_change() -> None:
    calls: list[tuple[int, bool]] = []

    def request(tools: Sequence[dict[str, Any]], has_system: bool) -> int:
        calls.append((len(tools), has_system))
        return 3 + len(tools)

    counter = TokenCounter(lambda message: 1, request)
    messages = history(2)
    for _ in range(3):
        assert counter.count(messages, (), TOOLS) == len(messages) + 3 + 2
    assert calls == [(2, False)]
    counter.count(messages, [Message.system_message("s")], TOOLS)
    counter.count(messages, [Message.system_message("s")], [*TOOLS, dict(TOOLS[0])])
    assert calls == [(2, False), (2, True), (3, True)]


def test_what_the_counter_keeps_stays_bounded() -> None:
    counting = Counting()
    counter = TokenCounter(counting.message, counting.request, min_capacity=100)
    long_run = history(200)
    for end in range(300, len(long_run) + 1, 10):
        counter.count(long_run[:end])
    assert len(counter) <= 2 * len(long_run)
    for run in range(300):  # many short runs after it: the long one's messages are let go
        counter.count([Message.user_message(f"run {run}"), *history(3)[1:]])
    assert len(counter) <= 2 * 100 + 10
    counting.seen.clear()
    counter.count(long_run)
    assert len(counting.seen) == len(long_run)  # forgotten: counted again


def test_llm_tokenises_each_message_of_a_run_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through `LLM`: litellm's counter is called for the new messages only, one call each."""
    litellm = load_litellm()
    counted: list[int] = []
    real = litellm.token_counter

    def spy(**kwargs: Any) -> int:
        counted.append(len(kwargs.get("messages") or ()))
        return int(real(**kwargs))

    llm = LLM("openai/gpt-4o-mini", max_input_tokens=10**6)
    messages = history(100)
    llm.count_tokens(messages[:150], (), TOOLS)
    monkeypatch.setattr(litellm, "token_counter", spy)
    before = llm.count_tokens(messages[:150], (), TOOLS)
    assert counted == []  # nothing new: nothing tokenised
    after = llm.count_tokens(messages[:152], (), TOOLS)
    assert counted == [1, 1] and after is not None and before is not None and after > before
