"""The debugger's commands, driven by scripted input (the CLI drives the same class)."""

from __future__ import annotations

import io

from agentfsm import AgentState, StopReason, ToolCallAgent
from agentfsm.agent.stepping import Breakpoint
from agentfsm.cli.debugger import Debugger
from agentfsm.testing import ScriptedLLM, reply

TERMINATE = reply(tool_calls=[("terminate", {"status": "success"})])


def lines(*commands: str):
    queue = list(commands)
    prompts: list[str] = []

    async def read(prompt: str) -> str | None:
        prompts.append(prompt)
        return queue.pop(0) if queue else None

    return read, prompts


def agent_for(toolbox) -> ToolCallAgent:
    script = [reply("adding", tool_calls=[("add", {"a": 2, "b": 3})]), TERMINATE]
    return ToolCallAgent(llm=ScriptedLLM(script), tools=toolbox)


async def test_a_session_steps_breaks_inspects_edits_and_finishes(toolbox):
    agent = agent_for(toolbox)
    read, prompts = lines(
        "state",
        "step",
        "break ACTING",
        "break OBSERVING",
        "break",
        "continue",
        "calls",
        "request",
        "continue",
        "edit 0 'the sum is 6'",
        "memory",
        "usage",
        "diagram",
        "clear ACTING",
        "clear OBSERVING",
        "continue",
    )
    out = io.StringIO()
    result = await Debugger(agent, "add 2 and 3", read_line=read, out=out).run()
    text = out.getvalue()
    assert text.startswith("paused before the first transition of: add 2 and 3")
    assert "state IDLE, phase -, step 0 of 30, stop_reason -" in text
    assert "IDLE -> THINKING  start  step 1" in text
    assert "breakpoints: ACTING, OBSERVING" in text
    assert "THINKING -> ACTING  think_done  step 1" in text
    assert '0: add({"a": 2, "b": 3})  id call_1' in text
    assert "request at step 1: 1 system and 2 messages, tools [add, slow_echo, explode, terminate]" in text
    assert "reply: adding" in text
    assert "observation 0 is now: the sum is 6" in text
    assert '  1 assistant adding -> add({"a": 2, "b": 3})' in text  # the result is not in memory yet
    assert "class OBSERVING current" in text
    assert "run ended: FINISHED (terminated)" in text
    assert result is not None and result.stop_reason is StopReason.TERMINATED
    llm = agent.llm
    assert isinstance(llm, ScriptedLLM)
    assert llm.requests[1].messages[-1].content == "the sum is 6"  # the model saw the edited result
    assert set(prompts) == {"(agentfsm) "}


async def test_quit_ends_the_run_cleanly(toolbox):
    agent = agent_for(toolbox)
    read, _ = lines("step", "step", "quit")
    result = await Debugger(agent, "task", read_line=read, out=io.StringIO()).run()
    assert agent.state is AgentState.ERROR
    assert result is not None and result.stop_reason is StopReason.CANCELLED


async def test_end_of_input_quits_and_mistakes_are_explained(toolbox):
    agent = agent_for(toolbox)
    read, _ = lines("jump", "break NAPPING", "edit 0 x", "next")
    out = io.StringIO()
    await Debugger(agent, "task", read_line=read, out=out, breakpoints=[Breakpoint(state="ACTING")]).run()
    text = out.getvalue()
    assert "unknown command 'jump'; type help for the list" in text
    assert "error: no trigger 'NAPPING'" in text
    assert "edit works in OBSERVING" in text
    assert "end of input: quitting" in text
    assert agent.last_result is not None and agent.last_result.stop_reason is StopReason.CANCELLED


async def test_request_shows_the_step_prompt_where_it_went(toolbox):
    """After tool results the step prompt ends the system message (a user message may not follow
    them): `request` says so, where the last three messages would not show it."""
    agent = agent_for(toolbox)
    read, _ = lines("break ACTING", "continue", "continue", "request", "clear ACTING", "continue")
    out = io.StringIO()
    await Debugger(agent, "add 2 and 3", read_line=read, out=out).run()
    text = out.getvalue()
    assert f"  step prompt, at the end of the system message: {agent.next_step_prompt[:30]}" in text


async def test_a_breakpoint_on_a_tool_is_set_and_cleared_by_name(toolbox):
    agent = agent_for(toolbox)
    read, _ = lines("break tool:add", "continue", "calls", "clear tool:add", "continue")
    out = io.StringIO()
    await Debugger(agent, "task", read_line=read, out=out).run()
    text = out.getvalue()
    assert "breakpoint set: tool add" in text and "breakpoint cleared: tool add" in text
    assert "THINKING -> ACTING" in text and "add" in text.split("calls", 1)[-1]
    assert agent.last_result is not None and agent.last_result.ok
