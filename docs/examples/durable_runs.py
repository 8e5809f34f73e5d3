"""A durable run on DBOS and SQLite: a worker runs it, another handle decides its approval."""

import asyncio

from agentfsm import LLMResponse, Terminate, ToolCallAgent, tool
from agentfsm.durable import AgentSpec, DurableRuns, RunStatus, Worker
from agentfsm.testing import FunctionLLM, ModelRequest, reply

DB = "sqlite:///runs.db"


@tool(needs_approval=True)
def send(to: str) -> str:
    """Send the report."""
    return f"sent to {to}"


def answer(request: ModelRequest) -> LLMResponse:
    """The model reads only the request: a replay, or another worker, gets the same replies."""
    if request.messages[-1].role == "tool":
        return reply("Sent.", tool_calls=[("terminate", {"status": "success"})])
    return reply(tool_calls=[("send", {"to": "ops"})])


def build_mailer(spec: AgentSpec) -> ToolCallAgent:
    """A worker's factory: a plain function of the run's spec, called for every run it starts or takes up."""
    return ToolCallAgent(llm=FunctionLLM(answer), tools=[send, Terminate()], name=spec.agent, **spec.options)


async def paused(runs: DurableRuns, run_id: str) -> RunStatus:
    while (status := await runs.status(run_id)).state != "paused":
        await asyncio.sleep(0.05)
    return status


async def main() -> None:
    async with Worker(DB, agents={"mailer": build_mailer}, concurrency=8):
        runs = DurableRuns(DB)  # from this process or any other
        try:
            run_id = await runs.submit(
                "send the report", AgentSpec(agent="mailer", options={"max_steps": 5}), run_id="report-1"
            )
            status = await paused(runs, run_id)
            print(status.state, "at pause", status.pause, [call.name for call in status.pending_approval])
            await runs.approve(run_id, status.pending_approval[0].id, pause=status.pause)
            result = await runs.result(run_id, wait=True)
            assert result is not None
            print(result.stop_reason, "-", result.output)
            async for event in runs.events(run_id):  # kept in the database: every event, once
                if event.kind == "transition":
                    print(event.seq, event.data["source"], "->", event.data["dest"])
        finally:
            runs.close()


asyncio.run(main())
