"""Many runs in one process: submit, follow the events, stop the process at a pause, start it
again and approve; a run held at a breakpoint; a cancel."""

import asyncio

from agentfsm import LLMResponse, Runs, Terminate, ToolCallAgent, tool
from agentfsm.agent.stepping import Breakpoint
from agentfsm.runs import AgentSpec, RunStatus
from agentfsm.testing import FunctionLLM, ModelRequest, reply


@tool(needs_approval=True)
def send(to: str) -> str:
    """Send the report."""
    return f"sent to {to}"


def answer(request: ModelRequest) -> LLMResponse:
    """The model: send, then say so. It reads only the request, so a run built again after a
    restart gets the reply its place in the run calls for."""
    if request.messages[-1].role == "tool":
        return reply("Sent.", tool_calls=[("terminate", {"status": "success"})])
    return reply(tool_calls=[("send", {"to": "ops"})])


def build_mailer(spec: AgentSpec) -> ToolCallAgent:
    """The factory: a fresh agent for each run, from its spec (and again when a run is taken up)."""
    return ToolCallAgent(llm=FunctionLLM(answer), tools=[send, Terminate()], name=spec.agent, **spec.options)


async def settled(runs: Runs, run_id: str) -> RunStatus:
    """The run's status once it is paused, held or ended (a run being taken up is queued a moment)."""
    while (status := await runs.status(run_id)).state in ("queued", "running") and status.held is None:
        await asyncio.sleep(0.01)
    return status


async def main() -> None:
    async with Runs("runs", agents={"mailer": build_mailer}) as runs:
        run_id = await runs.submit("send the report", AgentSpec(agent="mailer"), run_id="report-1")
        async for event in runs.events(run_id):  # from the first; the iteration ends when the run does
            if event.kind == "transition":
                print(event.seq, event.data["source"], "->", event.data["dest"])
            if event.kind == "run_paused":
                break  # a paused run has not ended
        status = await runs.status(run_id)
        print(status.state, "at pause", status.pause, [call.name for call in status.pending_approval])
    # Leaving `Runs` lets go of the paused run, as a process that stops does.

    async with Runs("runs", agents={"mailer": build_mailer}) as runs:  # the process started again
        status = await settled(runs, "report-1")  # it waits at the same pause again
        print("after the restart:", status.state, [call.id for call in status.pending_approval])
        await runs.approve("report-1", status.pending_approval[0].id)  # the last decision resumes it
        result = await runs.result("report-1", wait=True)
        assert result is not None
        print("report-1:", result.stop_reason, "-", result.output)

        # A breakpoint holds a run after the edge it names, before the next phase's work.
        held = await runs.submit(
            "send it again", "mailer", run_id="report-2", breakpoints=[Breakpoint(tool="send")]
        )
        print("report-2 held:", (await settled(runs, held)).held)
        await runs.cancel(held)  # queued, running, held or paused: ended for good
        print("report-2:", (await runs.status(held)).state)

        for each in await runs.list():
            print(each.run_id, each.state)


asyncio.run(main())
