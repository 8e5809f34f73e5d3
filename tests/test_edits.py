"""Edits between steps: pending calls in ACTING, observations in OBSERVING; events; pairing in memory."""

from __future__ import annotations

import pytest
from conftest import assert_pairs_complete

from agentfsm import Role, ToolCall, ToolCallAgent
from agentfsm.errors import WrongPhaseError
from agentfsm.run.events import Edit, LLMCall, ToolCallCompleted, ToolCallStarted, Transition
from agentfsm.testing import ScriptedLLM, reply

TERMINATE = reply(tool_calls=[("terminate", {"status": "success"})])


def agent_with(toolbox, *script) -> ToolCallAgent:
    return ToolCallAgent(llm=ScriptedLLM(list(script)), tools=toolbox)


async def test_edited_call_arguments_run_and_reach_memory_and_the_model(toolbox):
    agent = agent_with(toolbox, reply("adding", [("add", {"a": 1, "b": 2})]), TERMINATE)
    seen = []
    async for t in agent.iter("add"):
        if (t.source, t.dest, t.step) == ("THINKING", "ACTING", 1):
            assert [c.arguments for c in t.tool_calls] == ['{"a": 1, "b": 2}']
            edit = agent.replace_pending_calls([ToolCall.create("call_1", "add", {"a": 20, "b": 22})])
            assert (edit.kind, edit.step) == ("pending_calls", 1)
        if t.source == "ACTING" and t.step == 1:
            seen = [o.content for o in t.observations]
    assert seen == ["Observed output of cmd `add` executed:\n42"]
    sent = agent.llm.requests[1].messages
    assistant = next(m for m in sent if m.role is Role.ASSISTANT)
    assert assistant.content == "adding"
    assert [c.arguments for c in assistant.tool_calls] == ['{"a": 20, "b": 22}']
    assert sent[2].content.endswith("42")
    assert_pairs_complete(agent.memory.messages)


async def test_replacing_calls_with_new_ids_keeps_pairing(toolbox):
    agent = agent_with(toolbox, reply(tool_calls=[("add", {"a": 1, "b": 2})]), TERMINATE)
    async for t in agent.iter("add"):
        if t.dest == "ACTING" and t.step == 1:
            agent.replace_pending_calls(
                [
                    ToolCall.create("x1", "add", {"a": 1, "b": 1}),
                    ToolCall.create("x2", "add", {"a": 2, "b": 2}),
                ]
            )
    tool_ids = [m.tool_call_id for m in agent.memory if m.role is Role.TOOL]
    assert tool_ids[:2] == ["x1", "x2"]
    assert_pairs_complete(agent.memory.messages)
    assert agent.last_result is not None and agent.last_result.usage.tool_calls == 3


async def test_edited_observation_is_what_the_model_sees(toolbox):
    agent = agent_with(toolbox, reply(tool_calls=[("add", {"a": 1, "b": 2})]), TERMINATE)
    original = []
    async for t in agent.iter("add"):
        if t.source == "ACTING" and t.step == 1:
            edit = agent.edit_observation("call_1", "the answer is 7")
            assert (edit.before, edit.after, edit.call_id) == (
                t.observations[0].content,
                "the answer is 7",
                "call_1",
            )
            original = list(t.observations)
    assert original[0].content.endswith("3")  # the transition keeps what the tool returned
    assert agent.llm.requests[1].messages[2].content == "the answer is 7"
    assert_pairs_complete(agent.memory.messages)


async def test_edits_in_the_wrong_phase_are_refused_with_the_phase_named(toolbox):
    agent = agent_with(toolbox, reply(tool_calls=[("add", {"a": 1, "b": 2})]), TERMINATE)
    with pytest.raises(WrongPhaseError, match=r"only in ACTING.*agent 'toolcall' is in IDLE"):
        agent.replace_pending_calls([ToolCall.create("c", "add", {})])
    async for t in agent.iter("add"):
        if t.dest == "THINKING":
            with pytest.raises(WrongPhaseError, match=r"only in OBSERVING.*is in THINKING"):
                agent.edit_observation(0, "x")
        if t.dest == "OBSERVING":
            with pytest.raises(WrongPhaseError, match=r"only in ACTING.*is in OBSERVING"):
                agent.replace_pending_calls([ToolCall.create("c", "add", {})])
            with pytest.raises(KeyError, match="no observation for call id 'nope'"):
                agent.edit_observation("nope", "x")
            with pytest.raises(IndexError, match="this step has 1"):
                agent.edit_observation(3, "x")
        if t.dest == "ACTING":
            with pytest.raises(ValueError, match="at least one call"):
                agent.replace_pending_calls([])


async def test_edits_are_events_in_order_with_llm_calls_and_transitions(toolbox):
    agent = agent_with(toolbox, reply(tool_calls=[("add", {"a": 1, "b": 2})]), TERMINATE)
    events = []
    agent.on_event(events.append)

    def edit(t: Transition) -> None:  # edits also work from a listener during run()
        if t.dest == "ACTING" and t.step == 1:
            agent.replace_pending_calls([ToolCall.create("call_1", "add", {"a": 5, "b": 5})])
        if t.dest == "OBSERVING" and t.step == 1:
            agent.edit_observation(0, "ten")

    agent.on_transition(edit)
    await agent.run("add")
    kinds = [type(e).__name__ if not isinstance(e, Transition) else f"{e.source}>{e.dest}" for e in events]
    step_1 = ["IDLE>THINKING", "LLMCallStarted", "LLMCall", "THINKING>ACTING", "Edit", "ToolCallStarted"]
    assert kinds[:10] == [*step_1, "ToolCallCompleted", "ACTING>OBSERVING", "Edit", "OBSERVING>THINKING"]
    started = next(e for e in events if isinstance(e, ToolCallStarted))
    completed = next(e for e in events if isinstance(e, ToolCallCompleted))
    assert started.call.arguments == completed.observation.call.arguments == '{"a": 5, "b": 5}'
    assert "10" in completed.observation.content  # the edited call ran
    calls = [e for e in events if isinstance(e, LLMCall)]
    assert len(calls) == 2 and calls[1].messages[2].content == "ten"
    assert [e.kind for e in events if isinstance(e, Edit)] == ["pending_calls", "observation"]
