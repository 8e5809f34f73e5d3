"""Plan review: the flow waits in AWAITING_PLAN_REVIEW after planning and after each replan."""

from __future__ import annotations

import pytest

from agentfsm import ToolCallAgent
from agentfsm.errors import AgentBusyError, WrongPhaseError
from agentfsm.flow import FlowStopReason, PlanningFlow, StepStatus
from agentfsm.flow.plan import Plan
from agentfsm.flow.review import PlanDecision
from agentfsm.run.result import AgentState
from agentfsm.testing import ScriptedLLM, reply

FAIL = reply(tool_calls=[("no_such_tool", {})])


def create(*steps: str) -> object:
    return reply(tool_calls=[("planning", {"command": "create", "title": "T", "steps": list(steps)})])


def agent(name: str, *replies: object, max_steps: int = 5) -> ToolCallAgent:
    return ToolCallAgent(llm=ScriptedLLM(replies), name=name, max_steps=max_steps)  # type: ignore[arg-type]


async def test_a_paused_plan_edited_runs_the_edited_steps():
    planner = ScriptedLLM([create("[coder] the planner's step"), reply("summary")])
    coder = agent("coder", reply("done by coder"))
    writer = agent("writer", reply("done by writer"))
    flow = PlanningFlow(agents={"coder": coder, "writer": writer}, planner_llm=planner, review=True)

    paused = await flow.execute("task")
    assert paused.paused and paused.stop_reason == "awaiting_plan_review"
    assert flow.fsm_state == "AWAITING_PLAN_REVIEW" and paused.state is AgentState.RUNNING
    with pytest.raises(AgentBusyError, match="waits in AWAITING_PLAN_REVIEW"):
        await flow.execute("another")
    flow.edit_plan(["[writer] my own step"])
    result = await flow.resume()

    assert result.stop_reason == FlowStopReason.COMPLETED and result.summary == "summary"
    assert result.plan is not None
    assert [(s.agent, s.text, s.status) for s in result.plan.steps] == [
        ("writer", "my own step", StepStatus.COMPLETED)
    ]
    assert coder.llm.requests == [] and [r.agent for r in result.runs] == ["writer"]  # type: ignore[attr-defined]


async def test_resume_without_a_decision_pauses_again_and_cancel_ends_the_flow():
    planner = ScriptedLLM([create("[coder] a")])
    flow = PlanningFlow(agents={"coder": agent("coder")}, planner_llm=planner, review=True)
    assert (await flow.execute("task")).paused
    assert (await flow.resume()).paused
    flow.cancel_plan()
    result = await flow.resume()
    assert (result.state, result.stop_reason, result.ok) == (AgentState.FINISHED, "plan_cancelled", False)
    assert result.plan is not None and result.plan.steps[0].status is StepStatus.NOT_STARTED


async def test_a_reviewer_sees_the_plan_and_the_revision_and_decides_without_a_pause():
    seen: list[list[str]] = []

    async def reviewer(plan: Plan) -> PlanDecision:
        seen.append([s.tagged for s in plan.steps])
        return PlanDecision(kind="approve")

    update = reply(tool_calls=[("planning", {"command": "update", "steps": ["[coder] b"]})])
    planner = ScriptedLLM([create("[coder] a"), update, reply("sum")])
    coder = agent("coder", FAIL, FAIL, reply("b done"), max_steps=1)
    transitions = []
    flow = PlanningFlow(agents={"coder": coder}, planner_llm=planner, reviewer=reviewer)
    flow.on_transition(transitions.append)
    result = await flow.execute("task")
    assert result.ok and result.replans == 1
    assert seen == [["[coder] a"], ["[coder] b"]]
    assert ("REPLANNING", "AWAITING_PLAN_REVIEW") in [(t.source, t.dest) for t in transitions]


def test_a_decision_outside_the_review_is_refused():
    flow = PlanningFlow(agents={"coder": agent("coder")}, planner_llm=ScriptedLLM([]))
    with pytest.raises(WrongPhaseError, match="waits in AWAITING_PLAN_REVIEW"):
        flow.approve_plan()
