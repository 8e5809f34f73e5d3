"""The live view: progress lines and a status for a terminal, drawn from the engine's events."""

from __future__ import annotations

import io

from rich.console import Console

from agentfsm import ToolCallAgent
from agentfsm.cli.live import LiveView
from agentfsm.testing import ScriptedLLM, reply


async def test_live_view_shows_tool_calls_and_status(toolbox):
    script = [
        reply(tool_calls=[("add", {"a": 2, "b": 3}), ("nope", {})], input_tokens=100, output_tokens=7),
        reply(tool_calls=[("terminate", {"status": "success"})]),
    ]
    agent = ToolCallAgent(llm=ScriptedLLM(script), tools=toolbox, max_steps=9)
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    view = LiveView(agent, console=console)
    statuses = []
    agent.on_transition(lambda t: statuses.append(view._status()))
    with view:
        await agent.run("add")
    text = out.getvalue()
    assert '→ add({"a": 2, "b": 3})' in text
    assert "✓ add (" in text and "Observed output of cmd `add` executed: 5" in text
    assert "✗ nope (" in text and "Error: Unknown tool 'nope'" in text
    assert "[bold]ACTING[/] · step 1/9 · 100 in / 7 out tokens · 0 tool calls" in statuses
    assert statuses[-1].startswith("[bold]FINISHED[/] · step 2/9")
    assert len(agent._transition_listeners) == 1  # the view unsubscribed itself


async def test_the_view_stops_drawing_while_a_question_is_asked(toolbox):
    agent = ToolCallAgent(llm=ScriptedLLM([]), tools=toolbox)
    console = Console(file=io.StringIO(), force_terminal=True, width=120, color_system=None)
    view = LiveView(agent, console=console)
    with view:
        assert view._live.is_started
        with view.suspended():
            assert not view._live.is_started  # the prompt is not drawn over
        assert view._live.is_started
    assert not view._live.is_started


async def test_a_flow_s_view_shows_its_plan_and_its_agents_tool_calls():
    from agentfsm.flow import PlanningFlow

    plan = reply(tool_calls=[("planning", {"command": "create", "title": "T", "steps": ["[coder] a"]})])
    coder = ToolCallAgent(
        llm=ScriptedLLM([reply(tool_calls=[("terminate", {"status": "success"})])]), name="coder"
    )
    flow = PlanningFlow(agents={"coder": coder}, planner_llm=ScriptedLLM([plan, reply("sum")]))
    out = io.StringIO()
    view = LiveView(
        flow, console=Console(file=out, force_terminal=True, width=120, color_system=None), steps=[coder]
    )
    statuses = []
    flow.on_transition(lambda t: statuses.append(view._status()))
    with view:
        await flow.execute("task")
    assert '→ terminate({"status": "success"})' in out.getvalue()
    executing = next(s for s in statuses if s.startswith("[bold]EXECUTING[/]"))
    assert executing.startswith("[bold]EXECUTING[/] · step 0 · ")
    assert "1. [ ] \\[coder] a" in executing  # the plan, its tags escaped for rich
    assert "1. [✓] \\[coder] a" in statuses[-1]
    assert len(coder._transition_listeners) == 0 and len(flow._transition_listeners) == 1
