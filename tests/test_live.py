"""The live view: progress lines and a status for a terminal, drawn from the engine's events."""

from __future__ import annotations

import io
import re
from collections.abc import Callable

from rich.console import Console

from agentfsm import ToolCallAgent
from agentfsm.cli.live import LiveView
from agentfsm.run.events import Transition
from agentfsm.testing import ScriptedLLM, reply


def after_each_transition(then: Callable[[], None]) -> Callable[[object], None]:
    """An event listener subscribed after the view: it sees the view as the event left it."""

    def listener(event: object) -> None:
        if isinstance(event, Transition):
            then()

    return listener


def timeless(status: str) -> str:
    return re.sub(r"\d+\.\d s", "T s", status)


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
    agent.on_event(after_each_transition(lambda: statuses.append(timeless(view.status_line()))))
    with view:
        await agent.run("add")
    text = out.getvalue()
    assert '→ add({"a": 2, "b": 3})' in text
    assert "✓ add (" in text and "Observed output of cmd `add` executed: 5" in text
    assert "✗ nope (" in text and "Error: Unknown tool 'nope'" in text
    assert "[bold]ACTING[/] · step 1/9 · T s · working · 100 in / 7 out tokens · 0 tool calls" in statuses
    assert "[bold]THINKING[/] · step 2/9 · T s · waiting for the model · " in "\n".join(statuses)
    assert statuses[-1].startswith("[bold]FINISHED[/] · step 2/9 · T s · 110 in")  # nothing to wait for
    assert len(agent._event_listeners) == 1  # the view unsubscribed itself


async def test_the_status_is_the_state_the_last_transition_entered(toolbox):
    """Listeners run as the edge fires: the view reads the event's destination, not the agent."""
    agent = ToolCallAgent(llm=ScriptedLLM([reply(tool_calls=[("terminate", {})])]), tools=toolbox)
    view = LiveView(agent, console=Console(file=io.StringIO(), force_terminal=True, width=120))
    seen = []
    agent.on_event(lambda e: seen.append((e.dest, view.state)) if isinstance(e, Transition) else None)
    with view:
        await agent.run("t")
    assert seen == [(dest, dest) for dest, _ in seen]
    assert [dest for dest, _ in seen][:3] == ["THINKING", "ACTING", "OBSERVING"]


async def test_log_lines_are_printed_above_the_status_never_into_it(toolbox):
    agent = ToolCallAgent(llm=ScriptedLLM([]), tools=toolbox)
    out = io.StringIO()
    view = LiveView(agent, console=Console(file=out, force_terminal=True, width=120, color_system=None))
    with view:
        view._live.refresh()
        view.log_stream.write("a log line\n")
        view.log_stream.write("another, in ")
        view.log_stream.write("two writes\n")
    lines = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\n", out.getvalue().replace("\r", "\n")).split("\n")
    assert "a log line" in lines and "another, in two writes" in lines


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
    flow.on_event(after_each_transition(lambda: statuses.append(timeless(view.status_line()))))
    with view:
        await flow.execute("task")
    assert '→ terminate({"status": "success"})' in out.getvalue()
    executing = next(s for s in statuses if s.startswith("[bold]EXECUTING[/]"))
    assert executing.startswith("[bold]EXECUTING[/] · step 0 · T s · ")
    assert "1. [ ] \\[coder] a" in executing  # the plan, its tags escaped for rich
    assert "1. [✓] \\[coder] a" in statuses[-1]
    assert len(coder._event_listeners) == 0 and len(flow._event_listeners) == 1
