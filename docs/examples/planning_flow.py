"""A planning flow on scripted models: plan, run each step with its agent, replan, sum up;
then a plan paused for review, checkpointed, and edited in a flow built again."""

import asyncio

from agentfsm import LLMResponse, ToolCallAgent
from agentfsm.flow import FlowResult, PlanningFlow
from agentfsm.testing import ScriptedLLM, reply


def plan(*steps: str) -> LLMResponse:
    """The planner's reply: a `planning` tool call that creates the plan."""
    return reply(tool_calls=[("planning", {"command": "create", "title": "Primes", "steps": list(steps)})])


def revise(*steps: str) -> LLMResponse:
    """The planner's reply after a blocked step: the steps still to do."""
    return reply(tool_calls=[("planning", {"command": "update", "steps": list(steps)})])


def show(result: FlowResult) -> None:
    print("stop reason:", result.stop_reason, "| replans:", result.replans)
    if result.plan is None:  # no plan was made: the flow failed while planning
        print("no plan:", result.error)
        return
    for step in result.plan.steps:
        print(f"  {step.id}. [{step.agent}] {step.text}: {step.status} ({step.attempts} runs) {step.notes!r}")
    print("summary:", result.summary)


async def main() -> None:
    # The coder's second step fails twice (max_steps=1, and a reply that calls no real tool):
    # the step is blocked, and the planner gives what remains to the checker instead.
    planner = ScriptedLLM(
        [
            plan("[coder] write primes.csv", "[coder] check it"),
            revise("[checker] check primes.csv"),
            reply("primes.csv holds the first 10 primes, checked."),
        ]
    )
    coder = ToolCallAgent(
        name="coder",
        max_steps=1,
        llm=ScriptedLLM(
            [
                reply("Wrote primes.csv."),
                reply(tool_calls=[("no_such_tool", {})]),
                reply(tool_calls=[("no_such_tool", {})]),
            ]
        ),
    )
    checker = ToolCallAgent(name="checker", llm=ScriptedLLM([reply("All 10 rows are primes.")]))
    flow = PlanningFlow(agents={"coder": coder, "checker": checker}, planner_llm=planner)
    result = await flow.execute("write a CSV of the first 10 primes, then check it")
    show(result)
    print("runs:", [(r.step_id, r.agent, r.attempt, str(r.result.stop_reason)) for r in result.runs])

    # A planner that fails: the flow ends in ERROR before any plan exists.
    broken = PlanningFlow(agents={"coder": coder}, planner_llm=ScriptedLLM([RuntimeError("model down")]))
    show(await broken.execute("anything"))

    # Plan review, with a checkpoint: the flow waits for a decision on its plan.
    def build(planner_replies: list[LLMResponse], coder_replies: list[LLMResponse]) -> PlanningFlow:
        return PlanningFlow(
            agents={"coder": ToolCallAgent(name="coder", llm=ScriptedLLM(coder_replies))},
            planner_llm=ScriptedLLM(planner_replies),
            review=True,
        )

    first = build([plan("[coder] write primes.csv")], [])
    paused = await first.execute("write primes.csv", checkpoint="flow.checkpoint.jsonl")
    assert paused.plan is not None
    print("paused:", paused.paused, paused.stop_reason, [step.text for step in paused.plan.steps])
    first.suspend()  # let go of it, as a process stopped at the pause would

    # Another process: the flow is built the same way and resumed from its checkpoint.
    second = build([reply("Done: primes.csv written.")], [reply("Wrote primes.csv.")])
    again = await second.resume(checkpoint="flow.checkpoint.jsonl")
    print("resumed at the pause:", again.stop_reason)
    second.edit_plan(["[coder] write primes.csv with a header row"])
    show(await second.resume())


asyncio.run(main())
