"""Stepping with breakpoints: pause on entering a state or after an edge; inspect and go on."""

from __future__ import annotations

import pytest

from agentfsm import AgentState, StopReason, ToolCallAgent
from agentfsm.agent.stepping import Breakpoint, Stepper
from agentfsm.testing import ScriptedLLM, reply

TERMINATE = reply(tool_calls=[("terminate", {"status": "success"})])


def agent_for(toolbox) -> ToolCallAgent:
    script = [reply(tool_calls=[("add", {"a": i, "b": 1})]) for i in range(3)] + [TERMINATE]
    return ToolCallAgent(llm=ScriptedLLM(script), tools=toolbox)


async def test_step_next_and_resume(toolbox):
    agent = agent_for(toolbox)
    stepper = Stepper(agent, "task")
    assert agent.state is AgentState.IDLE  # pauses before the first transition
    first = await stepper.step()
    assert first is not None and (first.source, first.dest) == ("IDLE", "THINKING")
    assert agent.phase == "THINKING" and agent.run_state.turn.reply is None  # entered, phase not run yet
    after_next = await stepper.next()
    assert after_next is not None and after_next.dest == "THINKING" and after_next.step == 2
    assert [t.dest for t in stepper.history] == ["THINKING", "ACTING", "OBSERVING", "THINKING"]
    assert await stepper.resume() is None  # no breakpoints: runs to the end
    assert stepper.finished and stepper.result is not None
    assert stepper.result.stop_reason is StopReason.TERMINATED
    assert await stepper.step() is None


async def test_breakpoints_on_a_state_and_on_an_edge(toolbox):
    agent = agent_for(toolbox)
    stepper = Stepper(agent, "task", breakpoints=[Breakpoint(state="ACTING")])
    hit = await stepper.resume()
    assert hit is not None and hit.dest == "ACTING" and hit.step == 1
    assert [c.name for c in agent.run_state.turn.pending_calls] == ["add"]  # readable before they run
    assert agent.run_state.turn.observations == []
    stepper.clear_breakpoint(Breakpoint(state="ACTING"))
    stepper.add_breakpoint(Breakpoint(trigger="observe_done", dest="THINKING"))
    hit = await stepper.resume()
    assert hit is not None and (hit.source, hit.dest, hit.step) == ("OBSERVING", "THINKING", 2)
    assert [(await stepper.resume()).step for _ in range(2)] == [3, 4]  # type: ignore[union-attr]
    assert await stepper.resume() is None and agent.state is AgentState.FINISHED


async def test_a_breakpoint_on_a_tool_pauses_before_a_call_of_it_runs(toolbox):
    script = [
        reply(tool_calls=[("add", {"a": 1, "b": 1})]),
        reply(tool_calls=[("slow_echo", {"text": "hi"})]),
    ]
    agent = ToolCallAgent(llm=ScriptedLLM([*script, TERMINATE]), tools=toolbox)
    stepper = Stepper(agent, "task", breakpoints=[Breakpoint(tool="slow_echo")])
    hit = await stepper.resume()
    assert hit is not None and (hit.dest, hit.step) == ("ACTING", 2)
    assert [c.name for c in hit.tool_calls] == ["slow_echo"] and agent.run_state.turn.observations == []
    assert str(Breakpoint(tool="slow_echo")) == "tool slow_echo"
    assert Breakpoint(tool="slow_echo").to_json() == {"tool": "slow_echo"}
    assert Breakpoint(**Breakpoint(trigger="t", dest="D").to_json()) == Breakpoint(trigger="t", dest="D")
    assert await stepper.resume() is None and agent.state is AgentState.FINISHED


async def test_closing_an_unfinished_run_cancels_it(toolbox):
    agent = agent_for(toolbox)
    async with Stepper(agent, "task", breakpoints=[Breakpoint(state="OBSERVING")]) as stepper:
        await stepper.resume()
    assert agent.state is AgentState.ERROR
    assert agent.last_result is not None and agent.last_result.stop_reason is StopReason.CANCELLED


async def test_a_second_run_with_the_same_agent_steps_through_the_reset(toolbox):
    agent = ToolCallAgent(llm=ScriptedLLM([reply("one"), reply("two")]), tools=toolbox)
    await agent.run("first")
    stepper = Stepper(agent, "second")
    reset = await stepper.step()
    assert reset is not None and (reset.trigger, reset.dest) == ("reset", "IDLE") and not stepper.finished
    assert await stepper.resume() is None and stepper.result is not None
    assert stepper.result.output == "two"


def test_breakpoints_are_checked_against_the_machine(toolbox):
    stepper = Stepper(agent_for(toolbox), "task")
    with pytest.raises(ValueError, match="no state 'NAPPING'"):
        stepper.add_breakpoint(Breakpoint(state="NAPPING"))
    with pytest.raises(ValueError, match="no trigger 'jump'"):
        stepper.add_breakpoint(Breakpoint(trigger="jump"))
    with pytest.raises(ValueError, match=r"needs a `state`, an edge .* or a `tool`"):
        Breakpoint()
    with pytest.raises(ValueError, match="on a state, on an edge or on a tool: one of them"):
        Breakpoint(state="ACTING", trigger="act_done")
    with pytest.raises(ValueError, match="one of them"):
        Breakpoint(tool="add", dest="ACTING")
    assert str(Breakpoint(source="OBSERVING", trigger="observe_done")) == "OBSERVING -> * on observe_done"
