"""Faults a model or a tool can cause: repeated call ids, arguments nested too deep, results
that cannot be shown, and interpreter exits inside a tool. Each ends in a defined state with
memory whole."""

from __future__ import annotations

import asyncio
import sys

import pytest
from conftest import add, assert_pairs_complete

from agentfsm import AgentState, Role, StopReason, Terminate, ToolCall, ToolCallAgent, ToolCollection, tool
from agentfsm.agent.replay import Replayer
from agentfsm.errors import WrongValueError
from agentfsm.memory import Memory, MemorySnapshot
from agentfsm.messages import Message
from agentfsm.model.retry import RetryPolicy
from agentfsm.recording.checkpoint import read_checkpoint
from agentfsm.testing import ScriptedLLM, reply

TERMINATE = reply(tool_calls=[("terminate", {"status": "success"})])


def tool_results(agent: ToolCallAgent) -> list[str]:
    return [m.content or "" for m in agent.memory if m.role is Role.TOOL]


def assistant_ids(messages: list[Message]) -> list[list[str]]:
    return [[c.id for c in m.tool_calls] for m in messages if m.tool_calls]


# -- a reply whose calls repeat an id ---------------------------------------------------


def repeated_ids() -> ScriptedLLM:
    calls = [
        ToolCall.create("dup", "add", {"a": 1, "b": 1}),
        ToolCall.create("dup", "add", {"a": 2, "b": 2}),
        ToolCall.create("dup_2", "add", {"a": 3, "b": 3}),  # the model's own id, where a rename would go
        ToolCall.create("dup", "add", {"a": 4, "b": 4}),
    ]
    return ScriptedLLM([reply(tool_calls=calls), TERMINATE, reply("and again"), reply("done")])


async def test_repeated_call_ids_each_run_once_with_an_id_of_their_own(tmp_path, agentfsm_events):
    llm = repeated_ids()
    agent = ToolCallAgent(llm=llm, tools=ToolCollection(add, Terminate()))
    result = await agent.run("add them", trace=tmp_path / "run.jsonl", checkpoint=tmp_path / "run.ckpt")
    assert result.stop_reason is StopReason.TERMINATED, result
    assert result.usage.tool_calls == 5
    # every call ran, and each result answers its own call
    assert [r.rsplit("\n", 1)[-1] for r in tool_results(agent)[:4]] == ["2", "4", "6", "8"]
    ids = assistant_ids(agent.memory.messages)[0]
    assert ids == ["dup", "dup_3", "dup_2", "dup_4"]
    assert_pairs_complete(agent.memory.messages)
    renamed = agentfsm_events.named("tool_call_ids_renamed")
    assert len(renamed) == 1 and renamed[0]["renamed"] == {"1": "dup_3", "3": "dup_4"}
    assert "dup" in str(renamed[0]["message"])

    # the next run sends a history whose calls and results pair up
    agent.llm = llm
    await agent.run("again")
    assert_pairs_complete(list(llm.requests[-1].messages))

    # the trace replays as it ran, and the checkpoint holds the same memory
    replayer = Replayer(tmp_path / "run.jsonl")
    replayed = await replayer.run()
    assert replayed.ended_early is None and replayed.result is not None
    assert replayed.result.stop_reason is StopReason.TERMINATED
    assert assistant_ids(replayer.agent.memory.messages)[0] == ids
    snapshot = read_checkpoint(tmp_path / "run.ckpt")
    memory = Memory.from_snapshot(MemorySnapshot.model_validate(snapshot["memory"]))
    assert assistant_ids(memory.messages)[0] == ids


def test_memory_refuses_an_assistant_message_whose_calls_repeat_an_id():
    memory = Memory()
    memory.add_request(Message.user_message("task"))
    calls = [ToolCall.create("same", "add", {}), ToolCall.create("same", "add", {})]
    with pytest.raises(ValueError, match=r"'same'.*distinct id"):
        memory.add_message(Message.from_tool_calls(calls))
    assert len(memory) == 1


# -- arguments and results the engine cannot handle as they are -------------------------------


async def test_arguments_nested_too_deep_are_an_error_observation():
    deep = '{"a": ' + "[" * 5000 + "]" * 5000 + "}"
    agent = ToolCallAgent(
        llm=ScriptedLLM([reply(tool_calls=[("add", deep)]), TERMINATE]), tools=[add, Terminate()]
    )
    result = await agent.run("deep")
    assert result.stop_reason is StopReason.TERMINATED, result
    assert tool_results(agent)[0].startswith("Error: Error parsing arguments for add: nested too deeply")
    assert_pairs_complete(agent.memory.messages)


async def test_an_approval_with_arguments_nested_too_deep_is_refused_with_the_fix():
    agent = ToolCallAgent(
        llm=ScriptedLLM([reply(tool_calls=[("add", {"a": 1, "b": 1})]), TERMINATE]),
        tools=[add, Terminate()],
        require_approval=["add"],
    )
    result = await agent.run("add")
    assert result.paused
    deep = '{"a": ' + "[" * 5000 + "]" * 5000 + "}"
    with pytest.raises(WrongValueError, match="nested too deeply to parse; pass a flatter object"):
        agent.approve(arguments=deep)
    agent.approve()
    assert (await agent.resume()).stop_reason is StopReason.TERMINATED


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


@tool
def opaque() -> object:
    """Returns something that cannot be shown as text."""
    return Unprintable()


async def test_a_result_whose_str_raises_is_an_error_observation():
    agent = ToolCallAgent(
        llm=ScriptedLLM([reply(tool_calls=[("opaque", {})]), TERMINATE]), tools=[opaque, Terminate()]
    )
    result = await agent.run("show it")
    assert result.stop_reason is StopReason.TERMINATED, result
    assert tool_results(agent)[0] == (
        "Error: ⚠️ Tool 'opaque' encountered a problem: its result cannot be shown as text "
        "(RuntimeError: no text for you)"
    )


# -- KeyboardInterrupt and SystemExit inside a tool ----------------------------------------------


@tool
def interrupt(kind: str) -> str:
    """Raises an interpreter exit."""
    if kind == "keyboard":
        raise KeyboardInterrupt
    sys.exit(3)


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize(
    ("kind", "raised", "error"),
    [
        ("keyboard", KeyboardInterrupt, "KeyboardInterrupt: the run was interrupted"),
        ("exit", SystemExit, "SystemExit: the run was interrupted (exit code 3)"),
    ],
)
def test_an_interpreter_exit_in_a_tool_ends_the_run_and_propagates(kind, raised, error, parallel):
    calls = [("add", {"a": 1, "b": 1}), ("interrupt", {"kind": kind}), ("add", {"a": 2, "b": 2})]
    agent = ToolCallAgent(
        llm=ScriptedLLM([reply(tool_calls=calls), reply("done")]),
        tools=[add, interrupt, Terminate()],
        parallel_tool_calls=parallel,
    )
    with pytest.raises(raised):
        asyncio.run(agent.run("go"))
    assert agent.state is AgentState.ERROR
    assert agent.last_result is not None
    assert agent.last_result.stop_reason is StopReason.CANCELLED
    assert agent.last_result.error == error
    assert_pairs_complete(agent.memory.messages)
    results = tool_results(agent)
    assert results[0] == "Observed output of cmd `add` executed:\n2"  # a result it had is kept
    assert results[1].startswith("Error: the run ended before")
    # the agent is usable again, and the history it sends is valid
    assert asyncio.run(agent.run("next")).stop_reason is StopReason.FINAL_ANSWER


# -- Retry-After beyond backoff_max ---------------------------------------------------------------


class RateLimited(Exception):
    status_code = 503

    def __init__(self, seconds: str) -> None:
        super().__init__("slow down")
        self.litellm_response_headers = {"retry-after": seconds}


async def test_a_retry_after_longer_than_backoff_max_is_cut_with_a_warning(agentfsm_events):
    policy = RetryPolicy(max_attempts=2, backoff_base=0.0, backoff_max=0.01)
    attempts = 0

    async def call() -> str:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise RateLimited("120")
        return "ok"

    assert await policy.run(call, model="m") == ("ok", 2)
    (retry,) = agentfsm_events.named("llm_retry")
    assert retry["wait_s"] == 0.01 and retry["retry_after_s"] == 120.0
    assert retry["retry_after_cut"] == (
        "the provider asked to wait 120 s; waited `backoff_max` (0.01 s), 119.99 s less; "
        "raise `backoff_max` to honour it"
    )


async def test_a_retry_after_within_backoff_max_is_honoured_without_a_note(agentfsm_events):
    policy = RetryPolicy(max_attempts=2, backoff_base=5.0, backoff_max=60.0)
    attempts = 0

    async def call() -> str:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise RateLimited("0.01")
        return "ok"

    assert await policy.run(call, model="m") == ("ok", 2)
    (retry,) = agentfsm_events.named("llm_retry")
    assert retry["wait_s"] == 0.01 and retry["retry_after_s"] == 0.01
    assert "retry_after_cut" not in retry
