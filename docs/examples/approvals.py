"""A tool that needs approval: the run pauses, the app decides each call, and the run resumes."""

import asyncio

from agentfsm import Terminate, ToolCallAgent, tool
from agentfsm.testing import ScriptedLLM, reply


@tool(needs_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


llm = ScriptedLLM(
    [
        reply(tool_calls=[("delete", {"path": "/"}), ("delete", {"path": "/tmp/old"})]),
        reply("Removed /tmp/old.", tool_calls=[("terminate", {"status": "success"})]),
    ]
)


async def main() -> None:
    agent = ToolCallAgent(llm=llm, tools=[delete, Terminate()])
    result = await agent.run("clean up")
    while result.paused:  # stop_reason "awaiting_approval", state RUNNING
        print("paused:", result.stop_reason, [call.arguments for call in result.pending_approval])
        for call in result.pending_approval:  # the calls waiting, in order
            if call.arguments == '{"path": "/"}':
                agent.reject(call.id, reason="never the root")  # the model reads the reason
            else:
                agent.approve(call.id)  # or approve(call.id, arguments={...}): an edit
        result = await agent.resume()
    print("ended:", result.stop_reason, "-", result.output)
    for message in llm.requests[1].messages:  # what the model was told of each call
        if message.role == "tool":
            print(" ", (message.content or "").splitlines()[-1])


asyncio.run(main())
