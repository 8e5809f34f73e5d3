"""A step whose agent pauses (approval, input) pauses the flow in AWAITING_AGENT; answered, it goes on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import pytest

from agentfsm import Tool, ToolCallAgent, ToolResult, tool
from agentfsm.agent.approval import Decision
from agentfsm.errors import AgentBusyError, WrongPhaseError
from agentfsm.flow import FLOW_TABLE, FlowStopReason, PlanningFlow, StepStatus
from agentfsm.fsm.diagram import to_mermaid
from agentfsm.messages import Role, ToolCall
from agentfsm.questions import Answer, InputRequired, Question
from agentfsm.run.result import AgentState
from agentfsm.testing import ScriptedLLM, reply

NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def create(*steps: str) -> object:
    return reply(tool_calls=[("planning", {"command": "create", "title": "T", "steps": list(steps)})])


def recorder() -> tuple[Any, list[int]]:
    ran: list[int] = []

    @tool
    def record(n: int) -> str:
        """Records `n` (a call that needs approval)."""
        ran.append(n)
        return f"recorded {n}"

    return record, ran


def approving_agent(*replies: object) -> tuple[ToolCallAgent, list[int]]:
    record, ran = recorder()
    agent = ToolCallAgent(
        llm=ScriptedLLM(replies),  # type: ignore[arg-type]
        tools=[record],
        name="coder",
        require_approval=["record"],
    )
    return agent, ran


async def test_an_approval_pauses_the_flow_and_the_approved_call_runs_once_after_resume():
    planner = ScriptedLLM([create("[coder] record one", "[coder] say done"), reply("summary")])
    coder, ran = approving_agent(
        reply("recording", [("record", {"n": 1})]), reply("recorded it"), reply("all done")
    )
    flow = PlanningFlow(agents={"coder": coder}, planner_llm=planner)
    seen: list[tuple[str, str]] = []
    flow.on_transition(lambda t: seen.append((t.source, t.dest)))

    paused = await flow.execute("task")

    assert paused.paused and paused.stop_reason == "awaiting_approval" and paused.state is AgentState.RUNNING
    assert flow.fsm_state == "AWAITING_AGENT" and coder.fsm_state == "AWAITING_APPROVAL"
    assert [c.name for c in paused.pending_approval] == ["record"] == [c.name for c in flow.pending_approval]
    assert paused.plan is not None and paused.plan.steps[0].status is StepStatus.IN_PROGRESS
    assert ran == []
    with pytest.raises(AgentBusyError, match="waits in AWAITING_AGENT"):
        await flow.execute("another")
    with pytest.raises(WrongPhaseError, match="waits in AWAITING_PLAN_REVIEW"):
        flow.approve_plan()
    assert (await flow.resume()).paused  # nothing decided: it waits again

    flow.approve()
    result = await flow.resume()

    assert (result.stop_reason, result.ok, ran) == (FlowStopReason.COMPLETED, True, [1])
    assert result.plan is not None
    assert [(s.status, s.attempts, s.notes) for s in result.plan.steps] == [
        (StepStatus.COMPLETED, 1, "recorded it"),
        (StepStatus.COMPLETED, 1, "all done"),
    ]
    assert [r.result.stop_reason for r in result.runs] == ["final_answer", "final_answer"]
    assert result.pending_approval == () and result.usage.llm_calls == 5
    assert seen == [
        ("IDLE", "PLANNING"),
        ("PLANNING", "EXECUTING"),
        ("EXECUTING", "AWAITING_AGENT"),
        ("AWAITING_AGENT", "EXECUTING"),
        ("EXECUTING", "EXECUTING"),
        ("EXECUTING", "FINALIZING"),
        ("FINALIZING", "DONE"),
    ]
    # the agent went on from its pause: one run, the approved call answered once in its memory
    results = [m for m in coder.memory.messages if m.role is Role.TOOL]
    assert len(results) == 1 and str(results[0].content).endswith("recorded 1")


async def test_a_rejected_call_is_told_to_the_agent_which_goes_on():
    planner = ScriptedLLM([create("[coder] record"), reply("summary")])
    coder, ran = approving_agent(reply("recording", [("record", {"n": 2})]), reply("it was refused"))
    flow = PlanningFlow(agents={"coder": coder}, planner_llm=planner)
    assert (await flow.execute("task")).paused
    flow.reject(reason="not today")
    result = await flow.resume()
    assert result.ok and ran == []
    told = [m.content for m in coder.memory.messages if m.role is Role.TOOL]
    assert told and "not today" in str(told[0])


async def test_the_flow_s_approver_decides_in_awaiting_agent_without_a_pause():
    asked: list[list[str]] = []

    async def approver(calls: Sequence[ToolCall]) -> list[Decision]:
        asked.append([c.arguments for c in calls])
        return [Decision.approve('{"n": 7}')]

    planner = ScriptedLLM([create("[coder] record"), reply("summary")])
    coder, ran = approving_agent(reply("recording", [("record", {"n": 3})]), reply("recorded"))
    flow = PlanningFlow(agents={"coder": coder}, planner_llm=planner, approver=approver)
    seen: list[str] = []
    flow.on_transition(lambda t: seen.append(t.dest))
    result = await flow.execute("task")
    assert result.ok and ran == [7] and asked == [['{"n": 3}']]
    assert "AWAITING_AGENT" in seen


class Greeter(Tool):
    """Asks for the user's name, then greets them."""

    name = "greet"
    description = "Greet the user, whose name it asks for."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    asks_for_input = True

    async def execute(self, **kwargs: Any) -> ToolResult:
        question = Question(key="name", message="What is your name?", schema=NAME)
        return ToolResult(input_required=InputRequired(questions=(question,), token="1"))

    async def resume(self, asked: InputRequired, answers: Any, **kwargs: Any) -> Any:
        (given,) = answers.values()
        return f"hello, {given.content['name']}"


async def test_a_question_pauses_the_flow_and_the_answer_reaches_the_tool():
    planner = ScriptedLLM([create("[coder] greet"), reply("summary")])
    coder = ToolCallAgent(
        llm=ScriptedLLM([reply("asking", [("greet", {})]), reply("greeted")]), tools=[Greeter()], name="coder"
    )
    flow = PlanningFlow(agents={"coder": coder}, planner_llm=planner)
    paused = await flow.execute("task")
    assert paused.stop_reason == "awaiting_input" and flow.fsm_state == "AWAITING_AGENT"
    ((call, question),) = paused.pending_input
    assert (call.name, question.key) == ("greet", "name")
    flow.answer(call.id, {"name": "Ada"})
    result = await flow.resume()
    assert result.ok
    told = [str(m.content) for m in coder.memory.messages if m.role is Role.TOOL]
    assert len(told) == 1 and told[0].endswith("hello, Ada")


async def test_the_flow_s_input_handler_answers_without_a_pause():
    async def handler(call: ToolCall, question: Question) -> Answer:
        return Answer.accept({"name": "Grace"})

    planner = ScriptedLLM([create("[coder] greet"), reply("summary")])
    coder = ToolCallAgent(
        llm=ScriptedLLM([reply("asking", [("greet", {})]), reply("greeted")]), tools=[Greeter()], name="coder"
    )
    result = await PlanningFlow(agents={"coder": coder}, planner_llm=planner, input_handler=handler).execute(
        "t"
    )
    assert result.ok
    told = [str(m.content) for m in coder.memory.messages if m.role is Role.TOOL]
    assert len(told) == 1 and told[0].endswith("hello, Grace")


def test_answers_outside_the_pause_are_refused_and_the_diagram_draws_the_state():
    flow = PlanningFlow(agents={"coder": approving_agent()[0]}, planner_llm=ScriptedLLM([]))
    with pytest.raises(WrongPhaseError, match="waits in AWAITING_AGENT"):
        flow.approve()
    drawn = to_mermaid(FLOW_TABLE)
    assert "EXECUTING --> AWAITING_AGENT: step_done [step_paused]" in drawn
    assert "AWAITING_AGENT --> EXECUTING: answered" in drawn
