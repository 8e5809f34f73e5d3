"""The run loop as SPEC defines it: states after a run, steps, memory across runs, errors."""

from __future__ import annotations

import asyncio
import gc
from typing import Any, ClassVar

import pytest
from conftest import assert_pairs_complete

from agentfsm import AgentState, Message, Role, StopReason, Terminate, Tool, ToolCallAgent, ToolResult
from agentfsm.agent.replay import replay
from agentfsm.errors import AgentBusyError, ScriptExhaustedError, TokenLimitExceeded
from agentfsm.model.base import Usage
from agentfsm.testing import FunctionLLM, ModelRequest, ScriptedLLM, reply

TERMINATE = reply(tool_calls=[("terminate", {"status": "success"})])


def agent_with(script, toolbox=None, **kwargs) -> ToolCallAgent:
    return ToolCallAgent(llm=ScriptedLLM(script), tools=toolbox, **kwargs)


async def test_terminate_ends_finished_and_stays_there(toolbox):
    agent = agent_with([reply(tool_calls=[("add", {"a": 2, "b": 3})]), TERMINATE], toolbox)
    result = await agent.run("add 2 and 3")
    assert result.state is AgentState.FINISHED
    assert result.stop_reason is StopReason.TERMINATED
    assert result.steps == 2
    assert result.error is None
    assert result.ok
    # Nothing restores IDLE behind the caller's back (the seed's state_context did).
    assert agent.state is AgentState.FINISHED
    assert agent.phase is None
    assert agent.fsm_state == "FINISHED"
    assert result.usage.llm_calls == 2 and result.usage.tool_calls == 2
    assert result.usage.input_tokens == 20 and result.usage.output_tokens == 10
    tool_msgs = [m for m in agent.memory if m.role is Role.TOOL]
    assert tool_msgs[0].content == "Observed output of cmd `add` executed:\n5"
    assert tool_msgs[0].tool_call_id == "call_1"


async def test_final_answer_ends_the_run_with_its_text():
    agent = agent_with([reply("The answer is 42.")])
    result = await agent.run("question")
    assert (result.state, result.stop_reason, result.output) == (
        AgentState.FINISHED,
        StopReason.FINAL_ANSWER,
        "The answer is 42.",
    )
    assert agent.memory.messages[-1] == Message.assistant_message("The answer is 42.")


async def test_finish_on_answer_off_keeps_going_until_terminate():
    agent = agent_with([reply("thinking aloud"), TERMINATE], finish_on_answer=False)
    result = await agent.run("task")
    assert result.stop_reason is StopReason.TERMINATED
    assert result.steps == 2
    assert result.output == "thinking aloud"  # the last thing the model said


async def test_max_steps_ends_finished_with_max_steps(toolbox):
    agent = agent_with(
        [reply(tool_calls=[("add", {"a": i, "b": 1})]) for i in range(3)], toolbox, max_steps=3
    )
    result = await agent.run("loop")
    assert (result.state, result.stop_reason, result.steps) == (AgentState.FINISHED, StopReason.MAX_STEPS, 3)
    assert result.output == "Terminated: Reached max steps (3)"


async def test_step_counter_restarts_and_memory_carries_over(toolbox):
    script = [reply(tool_calls=[("add", {"a": i, "b": 1})]) for i in range(2)]
    script += [reply(tool_calls=[("add", {"a": i, "b": 2})]) for i in range(2)]
    agent = agent_with(script, toolbox, max_steps=2)
    first = await agent.run("first")
    second = await agent.run("second")  # implicit reset FINISHED -> IDLE, logged
    assert first.stop_reason is second.stop_reason is StopReason.MAX_STEPS
    assert first.steps == second.steps == 2  # the second run gets its full max_steps
    assert first.run_id != second.run_id
    contents = [m.content for m in agent.memory if m.role is Role.USER]
    assert contents == ["first", "second"]
    # the model saw the first run's conversation during the second run
    llm = agent.llm
    assert isinstance(llm, ScriptedLLM)
    assert [m.content for m in llm.requests[-1].messages if m.role is Role.USER][:2] == ["first", "second"]


async def test_every_run_has_its_own_run_state_and_a_result_keeps_its_usage(toolbox):
    script = [reply(tool_calls=[("add", {"a": 1, "b": 2})]), reply("three"), reply("again")]
    agent = agent_with(script, toolbox)
    fresh = agent.run_state
    assert (fresh.state, fresh.step, fresh.run_id) == ("IDLE", 0, "")
    first = await agent.run("one")
    assert agent.run_state is fresh  # a new agent's first run uses the state built with it
    assert (first.usage.llm_calls, first.usage.tool_calls) == (2, 1)
    second = await agent.run("two")
    assert agent.run_state is not fresh and agent.run_state.run_id == second.run_id != first.run_id
    assert (second.usage.llm_calls, second.usage.tool_calls) == (1, 0)
    assert (first.usage.llm_calls, first.usage.tool_calls) == (2, 1)  # untouched by the second run
    assert first.output == "three" and second.output == "again"


async def test_reset_clear_memory(toolbox):
    agent = agent_with([reply("a"), reply("b")])
    await agent.run("one")
    agent.reset()
    assert agent.state is AgentState.IDLE
    assert len(agent.memory) == 2
    agent.reset(clear_memory=True)
    assert len(agent.memory) == 0
    result = await agent.run("two")
    assert result.output == "b"
    assert [m.content for m in agent.memory] == ["two", "b"]


async def test_run_while_running_is_refused_without_corrupting_the_run(toolbox):
    agent = agent_with([reply(tool_calls=[("slow_echo", {"text": "x", "delay": 0.2})]), TERMINATE], toolbox)
    task = asyncio.create_task(agent.run("slow"))
    await asyncio.sleep(0.05)
    assert agent.state is AgentState.RUNNING
    with pytest.raises(AgentBusyError, match="already running"):
        await agent.run("again")
    with pytest.raises(AgentBusyError):
        agent.reset()
    result = await task
    assert result.stop_reason is StopReason.TERMINATED
    assert [m.content for m in agent.memory if m.role is Role.USER] == ["slow"]


async def test_exception_in_a_phase_ends_in_error_with_the_cause():
    agent = agent_with([reply("first"), reply("second")], finish_on_answer=False, max_steps=5)
    result = await agent.run("task")
    assert result.state is AgentState.ERROR
    assert result.stop_reason is StopReason.ERROR
    assert result.error is not None and result.error.startswith(
        "ScriptExhaustedError: ScriptedLLM has 2 replies"
    )
    assert agent.state is AgentState.ERROR


async def test_model_error_mid_tool_turn_leaves_pairs_complete(toolbox):
    def fn(request: ModelRequest):
        if len(request.messages) > 3:
            raise ConnectionError("provider went away")
        return reply(tool_calls=[("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2})])

    agent = ToolCallAgent(llm=FunctionLLM(fn), tools=toolbox)
    result = await agent.run("task")
    assert result.error == "ConnectionError: provider went away"
    assert_pairs_complete(agent.memory.messages)


async def test_cancellation_ends_in_error_cancelled_and_reraises(toolbox):
    agent = agent_with(
        [reply(tool_calls=[("slow_echo", {"text": "x", "delay": 10}), ("add", {"a": 1, "b": 1})])], toolbox
    )
    seen = []
    agent.on_transition(seen.append)
    task = asyncio.create_task(agent.run("slow"))
    await asyncio.sleep(0.05)
    assert agent.phase == "ACTING"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert agent.state is AgentState.ERROR
    assert seen[-1].trigger == "cancel" and seen[-1].stop_reason is StopReason.CANCELLED
    assert agent.last_result is not None
    assert agent.last_result.stop_reason is StopReason.CANCELLED
    assert agent.last_result.state is AgentState.ERROR
    # the interrupted calls are answered, so the conversation stays valid for the next run
    assert_pairs_complete(agent.memory.messages)
    # and the agent is usable again
    agent.llm = ScriptedLLM([reply("done")])
    assert (await agent.run("next")).stop_reason is StopReason.FINAL_ANSWER


async def test_token_limit_from_the_model_finishes_gracefully():
    agent = agent_with([TokenLimitExceeded("request of 9000 tokens exceeds the window of 8192")])
    result = await agent.run("big")
    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TOKEN_LIMIT)
    assert "9000 tokens" in (result.output or "")


async def test_token_budget_is_per_run(toolbox):
    script = [
        reply(tool_calls=[("add", {"a": 1, "b": i})], input_tokens=60, output_tokens=10) for i in range(4)
    ]
    llm = ScriptedLLM(script, token_budget=100)
    agent = ToolCallAgent(llm=llm, tools=toolbox)
    first = await agent.run("spend")
    assert first.stop_reason is StopReason.TOKEN_LIMIT
    assert first.usage.total_tokens == 140  # two calls; the third is refused before sending
    assert len(llm.requests) == 2
    second = await agent.run("again")  # a new run has a fresh budget
    assert second.usage.llm_calls == 2


async def test_iter_yields_every_transition_in_order(toolbox):
    agent = agent_with([reply(tool_calls=[("add", {"a": 1, "b": 1})]), reply("2")], toolbox)
    path = [(t.source, t.dest, t.trigger, t.step) async for t in agent.iter("task")]
    assert path == [
        ("IDLE", "THINKING", "start", 1),
        ("THINKING", "ACTING", "think_done", 1),
        ("ACTING", "OBSERVING", "act_done", 1),
        ("OBSERVING", "THINKING", "observe_done", 2),
        ("THINKING", "FINISHED", "think_done", 2),
    ]
    assert agent.last_result is not None and agent.last_result.output == "2"


async def test_transitions_carry_guards_and_phase_products(toolbox):
    agent = agent_with([reply(tool_calls=[("add", {"a": 1, "b": 1})]), TERMINATE], toolbox)
    events = []
    unsubscribe = agent.on_transition(events.append)
    await agent.run("task")
    think = events[1]
    assert [(g.name, g.held) for g in think.guards] == [("token_limit", False), ("has_tool_calls", True)]
    assert think.reply is not None and think.tool_calls[0].name == "add"
    act = events[2]
    assert act.observations[0].content.endswith("\n2")
    last = events[-1]
    assert [(g.name, g.held) for g in last.guards] == [("terminated", True)]
    assert last.stop_reason is StopReason.TERMINATED
    unsubscribe()
    agent.llm = ScriptedLLM([reply("x")])
    await agent.run("again")
    assert len(events) == 7


async def test_a_listener_subscribed_first_hears_each_event_before_the_others() -> None:
    agent = ToolCallAgent(llm=ScriptedLLM([reply("done")]))
    heard: list[str] = []
    agent.on_event(lambda event: heard.append(f"late {type(event).__name__}"))
    agent.on_event(lambda event: heard.append(f"first {type(event).__name__}"), first=True)
    await agent.run("go")
    assert heard[:2] == ["first Transition", "late Transition"]
    assert [h.split()[0] for h in heard] == ["first", "late"] * (len(heard) // 2)


async def test_listeners_added_or_removed_while_delivering_take_effect_from_the_next_event():
    agent = agent_with([reply("done")])
    first, second, late = [], [], []
    unsubscribe_late = []

    def subscribe_late(transition):
        first.append(transition.trigger)
        if not unsubscribe_late:  # subscribed during the first delivery: hears the next event on
            unsubscribe_late.append(agent.on_transition(lambda t: late.append(t.trigger)))

    unsubscribe_first = agent.on_transition(subscribe_late)
    agent.on_transition(lambda t: second.append(t.trigger))
    await agent.run("task")
    assert first == second == ["start", "think_done"]
    assert late == ["think_done"]

    unsubscribe_first()
    unsubscribe_late[0]()
    with pytest.raises(ValueError):
        unsubscribe_first()  # as `list.remove`: a second unsubscribe is an error, not silence
    agent.llm = ScriptedLLM([reply("again")])
    await agent.run("again")
    assert first == ["start", "think_done"] and late == ["think_done"]
    assert second == ["start", "think_done", "reset", "start", "think_done"]


async def test_each_run_can_be_stepped_while_state_is_inspected(toolbox):
    agent = agent_with([reply(tool_calls=[("add", {"a": 1, "b": 1})]), TERMINATE], toolbox)
    states = []
    async for transition in agent.iter("task"):
        states.append((agent.state, agent.phase, agent.current_step))
        if transition.dest == "ACTING":
            # pending calls are readable before they run
            assert [c.name for c in agent.run_state.turn.pending_calls] == [
                c.name for c in transition.tool_calls
            ]
    assert states[0] == (AgentState.RUNNING, "THINKING", 1)
    assert states[-1] == (AgentState.FINISHED, None, 2)


async def test_terminate_tool_schema_and_reply():
    params = Terminate().to_param()["function"]
    assert params["name"] == "terminate"
    assert params["parameters"]["required"] == ["status"]
    assert params["parameters"]["properties"]["status"]["enum"] == ["success", "failure"]
    assert (await Terminate()(status="success")).output == (
        "The interaction has been completed with status: success"
    )


async def test_system_prompt_is_sent_but_never_in_memory():
    llm = ScriptedLLM([reply("ok")])
    agent = ToolCallAgent(llm=llm, system_prompt="SYS", next_step_prompt="NEXT")
    await agent.run("task")
    request = llm.requests[0]
    assert [m.content for m in request.system_msgs] == ["SYS"]
    assert request.messages[-1] == Message.user_message("NEXT")  # for this think only
    assert all(m.role is not Role.SYSTEM for m in agent.memory)
    assert "NEXT" not in [m.content for m in agent.memory]


async def test_scripted_llm_exhaustion_message_names_the_fix():
    llm = ScriptedLLM([])
    with pytest.raises(ScriptExhaustedError, match="add replies"):
        await llm.ask_tool([])


async def test_abandoning_iter_mid_run_ends_cancelled(toolbox):
    agent = agent_with([reply(tool_calls=[("add", {"a": 1, "b": 1})]), TERMINATE], toolbox)
    steps = agent.iter("task")
    async for transition in steps:
        if transition.dest == "ACTING":
            break
    await steps.aclose()  # type: ignore[attr-defined]
    assert agent.state is AgentState.ERROR
    assert agent.last_result is not None and agent.last_result.stop_reason is StopReason.CANCELLED
    assert_pairs_complete(agent.memory.messages)


async def test_base_agent_runs_any_three_phases():
    """The engine is not tied to LLMs: a BaseAgent subclass supplies think/act/observe."""
    from agentfsm import BaseAgent, ReActAgent

    class Countdown(BaseAgent):
        async def think(self) -> None:
            self.run_state.turn.pending_calls = []

        async def act(self) -> None:  # never reached: think asks for no calls
            raise AssertionError

        async def observe(self) -> None:
            pass

    agent = Countdown(max_steps=3)
    result = await agent.run("count")
    assert (result.stop_reason, result.steps) == (StopReason.MAX_STEPS, 3)
    with pytest.raises(TypeError, match="abstract"):
        ReActAgent()  # type: ignore[abstract]


class _Summarizer(Tool):
    """Asks a model of its own, as `extract_content` does, and reports what that cost."""

    name = "summarize"
    description = "Summarize a text with a model."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}

    async def execute(self, **kwargs: Any) -> ToolResult:
        spent = Usage(input_tokens=30, output_tokens=5, llm_calls=1, cost_usd=0.5)
        return ToolResult(output="short", usage=spent)


async def test_what_a_tool_spends_on_a_model_counts_in_the_run_its_budget_its_replay_and_checkpoint(tmp_path):
    summarize = reply(tool_calls=[("summarize", {})], input_tokens=10, output_tokens=1, cost_usd=0.25)
    done = reply(tool_calls=[("terminate", {"status": "success"})], input_tokens=10, output_tokens=1)
    agent = ToolCallAgent(llm=ScriptedLLM([summarize, done]), tools=[_Summarizer(), Terminate()])
    trace = tmp_path / "run.jsonl"
    result = await agent.run("summarize", trace=trace)
    assert result.stop_reason is StopReason.TERMINATED
    usage = result.usage
    assert (usage.input_tokens, usage.output_tokens, usage.llm_calls, usage.tool_calls) == (50, 7, 3, 2)
    assert usage.cost_usd is None  # the second reply has no price: the total is unknown
    replayed = await replay(trace)
    assert replayed.result is not None and replayed.result.usage == usage

    # the token budget sees the tool's tokens: 11 + 35 spent, the next request is refused
    budgeted = ToolCallAgent(llm=ScriptedLLM([summarize, done], token_budget=40), tools=[_Summarizer()])
    stopped = await budgeted.run("summarize")
    assert (stopped.stop_reason, stopped.usage.total_tokens) == (StopReason.TOKEN_LIMIT, 46)

    # a run paused after the tool ran, resumed from its checkpoint by another agent, counts it once
    def approving(*script: Any) -> ToolCallAgent:
        return ToolCallAgent(
            llm=ScriptedLLM(list(script)), tools=[_Summarizer(), Terminate()], require_approval=["summarize"]
        )

    path = tmp_path / "run.json"
    first = approving(summarize, summarize)
    await first.run("summarize twice", checkpoint=path)
    first.approve()
    paused = await first.resume()  # the first call ran; the second waits
    assert paused.paused and paused.usage.total_tokens == 11 + 35 + 11
    del first, paused
    gc.collect()  # its process ends: the paused run's lease goes with it
    second = approving(done)
    again = await second.resume(path)
    assert again.paused
    second.approve()
    finished = await second.resume()
    assert finished.stop_reason is StopReason.TERMINATED
    assert (finished.usage.total_tokens, finished.usage.llm_calls) == (3 * 11 + 2 * 35, 5)
