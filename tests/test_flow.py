"""PlanningFlow on scripted models: plans, owners, retries, replans and their bound, fallback, usage."""

from __future__ import annotations

import pytest

from agentfsm import ToolCallAgent
from agentfsm.errors import WrongValueError
from agentfsm.flow import FlowStopReason, PlanningFlow, StepStatus
from agentfsm.run.result import AgentState, StopReason
from agentfsm.testing import ScriptedLLM, reply


def create(*steps: str) -> object:
    return reply(
        tool_calls=[("planning", {"command": "create", "plan_id": "x", "title": "T", "steps": list(steps)})]
    )


def update(*steps: str) -> object:
    return reply(tool_calls=[("planning", {"command": "update", "plan_id": "x", "steps": list(steps)})])


def agent(name: str, *replies: object, max_steps: int = 5) -> ToolCallAgent:
    return ToolCallAgent(llm=ScriptedLLM(replies), name=name, max_steps=max_steps)  # type: ignore[arg-type]


FAIL = reply(tool_calls=[("no_such_tool", {})])
"""One step of an agent with `max_steps=1` that ends it on `max_steps`."""


async def test_a_three_step_plan_completed_by_two_agents():
    planner = ScriptedLLM(
        [create("[coder] write code", "[writer] write docs", "[CODER] test it"), reply("all good")]
    )
    coder = agent("coder", reply("code written"), reply("tests pass"))
    writer = agent("writer", reply("docs written", tool_calls=[("terminate", {"status": "success"})]))
    flow = PlanningFlow(agents={"coder": coder, "writer": writer}, planner_llm=planner)
    seen = []
    flow.on_transition(seen.append)

    result = await flow.execute("build it")

    assert (result.state, result.stop_reason, result.ok) == (
        AgentState.FINISHED,
        FlowStopReason.COMPLETED,
        True,
    )
    assert result.plan is not None and result.plan.plan_id == f"plan_{result.run_id}"
    assert [(s.agent, s.status, s.attempts) for s in result.plan.steps] == [
        ("coder", StepStatus.COMPLETED, 1),
        ("writer", StepStatus.COMPLETED, 1),
        ("coder", StepStatus.COMPLETED, 1),
    ]
    assert [s.notes for s in result.plan.steps] == ["code written", "docs written", "tests pass"]
    assert [(r.step_id, r.agent, r.result.stop_reason) for r in result.runs] == [
        (1, "coder", StopReason.FINAL_ANSWER),
        (2, "writer", StopReason.TERMINATED),
        (3, "coder", StopReason.FINAL_ANSWER),
    ]
    assert result.summary == "all good"
    # the step prompt carries the plan's status and the step
    shown = coder.llm.requests[1].messages  # type: ignore[attr-defined]
    second = [m.content for m in shown if "CURRENT PLAN" in str(m.content)][-1]
    assert "1. [✓] [coder] write code" in second and 'working on step 3: "test it"' in second
    assert [(t.source, t.dest) for t in seen] == [
        ("IDLE", "PLANNING"),
        ("PLANNING", "EXECUTING"),
        ("EXECUTING", "EXECUTING"),
        ("EXECUTING", "EXECUTING"),
        ("EXECUTING", "FINALIZING"),
        ("FINALIZING", "DONE"),
    ]
    assert seen[4].guards == (
        ("step_paused", False),
        ("finished_early", False),
        ("replans_spent", False),
        ("step_blocked", False),
        ("plan_done", True),
    )
    assert seen[4].stop_reason == "completed" and {t.agent for t in seen} == {"planning"}


async def test_an_agent_that_reports_the_task_done_ends_the_flow_early():
    planner = ScriptedLLM([create("[coder] a", "[coder] b", "[coder] c"), reply("done early")])
    coder = agent("coder", reply("TASK COMPLETE\nIt was all one step."))
    result = await PlanningFlow(agents={"coder": coder}, planner_llm=planner).execute("go")
    assert result.stop_reason == FlowStopReason.FINISHED_EARLY and result.ok
    assert result.plan is not None
    assert [s.status for s in result.plan.steps] == [
        StepStatus.COMPLETED,
        StepStatus.NOT_STARTED,
        StepStatus.NOT_STARTED,
    ]
    assert len(result.runs) == 1 and coder.llm.remaining == 0  # type: ignore[attr-defined]


async def test_a_step_that_hits_max_steps_is_retried_then_blocked_then_replanned():
    planner = ScriptedLLM(
        [create("[coder] first", "[coder] hard"), update("[writer] other way"), reply("summary")]
    )
    coder = agent("coder", reply("first done"), FAIL, FAIL, max_steps=1)
    writer = agent("writer", reply("other way done"))
    seen = []
    flow = PlanningFlow(agents={"coder": coder, "writer": writer}, planner_llm=planner)
    flow.on_transition(seen.append)

    result = await flow.execute("task")

    assert result.stop_reason == FlowStopReason.COMPLETED and result.replans == 1
    assert [r.stop_reason for r in result.results_of(2)] == [StopReason.MAX_STEPS, StopReason.MAX_STEPS]
    assert result.plan is not None
    # the completed step is kept with its result; the blocked one is replaced by the revision
    assert [(s.id, s.agent, s.text, s.status, s.notes) for s in result.plan.steps] == [
        (1, "coder", "first", StepStatus.COMPLETED, "first done"),
        (3, "writer", "other way", StepStatus.COMPLETED, "other way done"),
    ]
    assert ("EXECUTING", "REPLANNING") in [(t.source, t.dest) for t in seen]
    replan_request = planner.requests[1].messages[-1].content
    assert "Step 2 is blocked: attempt 2 ended max_steps" in replan_request


async def test_the_replan_bound_ends_the_flow_with_its_stop_reason():
    planner = ScriptedLLM([create("[coder] a"), update("[coder] b"), reply("gave up")])
    coder = agent("coder", FAIL, FAIL, FAIL, FAIL, max_steps=1)
    flow = PlanningFlow(agents={"coder": coder}, planner_llm=planner, max_replans=1)
    result = await flow.execute("task")
    assert (result.state, result.stop_reason, result.ok) == (AgentState.FINISHED, "replan_limit", False)
    assert result.replans == 1 and len(result.runs) == 4 and result.summary == "gave up"
    assert result.plan is not None and [s.status for s in result.plan.steps] == [StepStatus.BLOCKED]


async def test_a_planner_with_no_usable_plan_twice_gets_the_fallback_plan():
    planner = ScriptedLLM(
        [reply("I would rather not"), reply(tool_calls=[("planning", "{broken")]), reply("ok")]
    )
    coder = agent("coder", reply("did the whole request"))
    result = await PlanningFlow(agents={"coder": coder}, planner_llm=planner).execute("count to three")
    assert result.ok and result.plan is not None
    assert result.plan.title.startswith("Fallback plan for: count to three")
    assert [(s.agent, s.text, s.status) for s in result.plan.steps] == [
        ("coder", "count to three", StepStatus.COMPLETED)
    ]
    retry = planner.requests[1].messages[-1].content
    assert "That gave no usable plan: the reply called no `planning` tool" in retry


async def test_usage_sums_every_agent_and_the_planner():
    planner = ScriptedLLM(
        [
            reply(
                tool_calls=[
                    ("planning", {"command": "create", "title": "T", "steps": ["[a] one", "[b] two"]})
                ],
                input_tokens=100,
                output_tokens=1,
            ),
            reply("sum", input_tokens=200, output_tokens=2),
        ]
    )
    first = agent("a", reply("x", input_tokens=30, output_tokens=3))
    second = agent("b", reply("y", input_tokens=40, output_tokens=4))
    result = await PlanningFlow(agents={"a": first, "b": second}, planner_llm=planner).execute("t")
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.llm_calls) == (370, 10, 4)


def test_executors_must_name_agents():
    with pytest.raises(WrongValueError, match="must name agents"):
        PlanningFlow(agents={"a": agent("a")}, planner_llm=ScriptedLLM([]), executors=["b"])
