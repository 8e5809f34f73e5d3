"""Memory trims whole blocks, never orphans a tool message, and keeps the run's first request."""

from __future__ import annotations

import pytest
from conftest import assert_pairs_complete
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfsm import Memory, Message, Role, ToolCall
from agentfsm.memory import MemorySnapshot, apply_change


def call_turn(prefix: str, n: int) -> list[Message]:
    calls = [ToolCall(id=f"{prefix}-{i}", name="t") for i in range(n)]
    return [Message.from_tool_calls(calls)] + [
        Message.tool_message(f"r{i}", name="t", tool_call_id=c.id) for i, c in enumerate(calls)
    ]


# A history: runs, each a request followed by turns (text replies, user follow-ups, tool turns).
turn = st.one_of(
    st.tuples(st.just("text"), st.integers(0, 0)),
    st.tuples(st.just("user"), st.integers(0, 0)),
    st.tuples(st.just("tools"), st.integers(1, 4)),
)
history = st.lists(
    st.tuples(st.text(min_size=1, max_size=5), st.lists(turn, max_size=12)), min_size=1, max_size=6
)


@settings(max_examples=300, deadline=None)
@given(history=history, max_messages=st.integers(2, 15))
def test_trimming_never_breaks_pairs_or_drops_the_request(history, max_messages):
    memory = Memory(max_messages=max_messages)
    counter = 0
    for request, turns in history:
        req = Message.user_message(f"request {request}")
        memory.add_request(req)
        for kind, n in turns:
            counter += 1
            if kind == "text":
                memory.add_message(Message.assistant_message(f"a{counter}"))
            elif kind == "user":
                memory.add_message(Message.user_message(f"u{counter}"))
            else:
                for message in call_turn(str(counter), n):
                    memory.add_message(message)
                    messages = memory.messages
                    assert_pairs_complete_prefix(messages)
            messages = memory.messages
            assert_pairs_complete(messages)
            assert req in messages, "the run's request was trimmed"
            # over the limit only when the newest block alone can't fit beside the request
            if len(messages) > max_messages:
                assert messages[0] == req
        assert memory.messages[0].role is not Role.TOOL


# Operations on a watched memory: each, then its reported changes replayed on a copy.
operation = st.one_of(
    st.tuples(st.just("request"), st.integers(0, 0)),
    st.tuples(st.just("text"), st.integers(0, 0)),
    st.tuples(st.just("tools"), st.integers(1, 3)),
    st.tuples(st.just("replace"), st.integers(1, 2)),
    st.tuples(st.just("clear"), st.integers(0, 0)),
)


@settings(max_examples=300, deadline=None)
@given(operations=st.lists(operation, max_size=40), max_messages=st.integers(2, 9))
def test_watched_changes_replayed_in_order_give_the_memory(operations, max_messages):
    memory = Memory(max_messages=max_messages)
    memory.add_message(Message.assistant_message("before the watch"))
    copy, pinned = memory.messages, None
    watch = memory.watch()
    for counter, (kind, n) in enumerate(operations):
        if kind == "request":
            memory.add_request(Message.user_message(f"request {counter}"))
        elif kind == "text":
            memory.add_message(Message.assistant_message(f"a{counter}"))
        elif kind == "tools":
            for message in call_turn(str(counter), n):
                memory.add_message(message)
        elif kind == "clear":
            memory.clear()
        else:  # an assistant call whose pending calls are replaced, then answered
            memory.add_message(Message.from_tool_calls([ToolCall(id=f"{counter}-x", name="t")]))
            memory.replace_open_calls([ToolCall(id=f"{counter}-{i}", name="t") for i in range(n)])
            memory.close_open_calls("answered")
        for change in watch.take():
            pinned = apply_change(copy, pinned, change.kind, change.message, at=change.at, count=change.count)
        snapshot = memory.snapshot()
        assert (copy, pinned) == (snapshot.messages, snapshot.pinned_index)
    watch.close()
    memory.add_message(Message.assistant_message("after the watch"))
    assert watch.take() == []


def test_a_watch_reports_what_changed_and_nothing_else():
    memory = Memory(max_messages=4)
    watch = memory.watch()
    request = Message.user_message("task")
    memory.add_request(request)
    turn = call_turn("a", 1)
    memory.add_messages(turn)
    memory.add_messages(call_turn("b", 1))  # five messages: the block of `a` goes, after the pin
    assert [(c.kind, c.at, c.count) for c in watch.take()] == [
        ("request", 0, 0),
        ("add", 0, 0),
        ("add", 0, 0),
        ("add", 0, 0),
        ("add", 0, 0),
        ("drop", 1, 2),
    ]
    assert watch.take() == []
    other = memory.watch()
    memory.clear()
    assert [c.kind for c in watch.take()] == [c.kind for c in other.take()] == ["clear"]


def assert_pairs_complete_prefix(messages: list[Message]) -> None:
    """While a tool turn is being recorded, results may be pending, but never orphaned."""
    open_ids: set[str] = set()
    for message in messages:
        if message.role is Role.TOOL:
            assert message.tool_call_id in open_ids
            open_ids.discard(message.tool_call_id)
        elif message.role is Role.ASSISTANT:
            open_ids = {c.id for c in message.tool_calls}


def test_trim_drops_oldest_blocks_whole():
    memory = Memory(max_messages=5)
    memory.add_request(Message.user_message("task"))
    for message in call_turn("a", 2) + call_turn("b", 1):
        memory.add_message(message)
    # task + [a, ra0, ra1] + [b, rb0] = 6 > 5: block a goes as a whole
    assert [m.tool_call_id or (m.tool_calls[0].id if m.tool_calls else m.content) for m in memory] == [
        "task",
        "b-0",
        "b-0",
    ]


def test_pairing_is_enforced_on_add():
    memory = Memory()
    with pytest.raises(ValueError, match="answers no pending call"):
        memory.add_message(Message.tool_message("x", name="t", tool_call_id="nope"))
    memory.add_message(Message.from_tool_calls([ToolCall(id="c1", name="t")]))
    with pytest.raises(ValueError, match="have no result"):
        memory.add_message(Message.user_message("interrupt"))
    added = memory.close_open_calls("Error: interrupted")
    assert [m.tool_call_id for m in added] == ["c1"]
    assert_pairs_complete(memory.messages)


def test_snapshot_round_trip_keeps_the_pin():
    memory = Memory(max_messages=4)
    memory.add_request(Message.user_message("old"))
    memory.add_message(Message.assistant_message("x"))
    memory.add_request(Message.user_message("new"))
    snapshot = MemorySnapshot.model_validate_json(memory.snapshot().model_dump_json())
    restored = Memory.from_snapshot(snapshot)
    assert restored.messages == memory.messages
    for i in range(5):
        restored.add_message(Message.assistant_message(str(i)))
    assert restored.messages[0].content == "new"


def test_invalid_limits_are_refused():
    with pytest.raises(ValueError, match="at least 2"):
        Memory(max_messages=1)
    with pytest.raises(ValueError, match="must be a user message"):
        Memory().add_request(Message.assistant_message("x"))


def test_view_reads_memory_without_copying():
    memory = Memory(max_messages=50)
    memory.add_message(Message.assistant_message("before"))
    memory.add_request(Message.user_message("task"))
    for i in range(5):
        memory.add_message(Message.assistant_message(str(i)))
    extra = Message.user_message("next step")
    view = memory.view(extra)
    expected = [*memory.messages, extra]
    assert len(view) == len(expected) == 8
    assert list(view) == expected
    assert [view[i] for i in range(-8, 8)] == expected + expected
    assert view[2:5] == expected[2:5] and view[::-3] == expected[::-3]
    with pytest.raises(IndexError, match="out of range for 8"):
        view[8]
    assert memory.view()[-1].content == "4"


def test_run_data_round_trips_through_pydantic():
    from agentfsm import RunResult, StopReason, Usage
    from agentfsm.agent.turn import AgentRunState, Turn
    from agentfsm.run.result import AgentState
    from agentfsm.run.state import Observation

    call = ToolCall(id="c1", name="t", arguments='{"x": 1}')
    state = AgentRunState(run_id="r", state="OBSERVING", step=2, turn=Turn(pending_calls=[call]))
    state.turn.observations.append(Observation(call=call, content="ok"))
    assert AgentRunState.model_validate_json(state.model_dump_json()) == state
    result = RunResult(
        run_id="r", state=AgentState.FINISHED, stop_reason=StopReason.TERMINATED, steps=2, usage=Usage()
    )
    assert result.model_dump(mode="json")["stop_reason"] == "terminated"
    assert Message.model_validate({"role": "user", "content": "hi"}).role is Role.USER


def test_message_factories_build_what_the_constructor_builds():
    import dataclasses

    call = ToolCall(id="c1", name="t")
    pairs = [
        (Message.user_message("u", "img"), Message(role=Role.USER, content="u", base64_image="img")),
        (Message.system_message("s"), Message(role="system", content="s")),
        (Message.assistant_message("a"), Message(role=Role.ASSISTANT, content="a")),
        (Message.from_tool_calls([call], "c"), Message(role=Role.ASSISTANT, content="c", tool_calls=[call])),
        (
            Message.tool_message("r", name="t", tool_call_id="c1"),
            Message(role=Role.TOOL, content="r", name="t", tool_call_id="c1"),
        ),
    ]
    for built, expected in pairs:
        assert built == expected and hash(built) == hash(expected) and type(built.tool_calls) is tuple
        with pytest.raises(dataclasses.FrozenInstanceError):
            built.content = "changed"  # type: ignore[misc]

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Tagged(Message):
        tag: str = "t"

    tagged = Tagged.user_message("u")
    assert type(tagged) is Tagged and tagged.tag == "t" and tagged.content == "u"
