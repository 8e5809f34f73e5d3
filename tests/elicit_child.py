"""The process `test_mcp_elicitation.py` kills while its run waits for input, and the one resuming it.

    python elicit_child.py run WORKDIR SERVER      # answers the first question, pauses at the second
    python elicit_child.py resume WORKDIR SERVER   # resumes the checkpoint, answers the second

SERVER is a URL (streamable HTTP) or ``stdio:REVISION`` (the elicit server started over
stdio, a new process each time). The model calls the server's ``favourite`` (two questions,
one after the other) beside ``echo``, then terminates; it answers from the conversation
alone, so the resumed process (a new model object) answers as the killed one would have.
``run`` answers the first question in place, resumes, and prints ``paused KEY MESSAGE`` once
the run pauses at the second question (its checkpoint written), then waits to be killed.
``resume`` restores the run into the same pause, answers, and prints the result and the tool
messages as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from agentfsm.agent.mcp import MCPAgent
from agentfsm.mcp import MCPServerSettings
from agentfsm.messages import Role, ToolCall
from agentfsm.testing import FunctionLLM, ModelRequest, reply

SERVER = Path(__file__).with_name("mcp_elicit_server.py")


def script(request: ModelRequest) -> object:
    if not any(m.role is Role.TOOL for m in request.messages):
        calls = [
            ToolCall.create("c1", "mcp_el_favourite", {}),
            ToolCall.create("c2", "mcp_el_echo", {"text": "x"}),
        ]
        return reply("asking", calls)
    return reply("done", [ToolCall.create("c3", "terminate", {"status": "success"})])


def settings(server: str) -> MCPServerSettings:
    if server.startswith("stdio:"):
        return MCPServerSettings(command=sys.executable, args=(str(SERVER), server[6:], "stdio"), timeout=10)
    return MCPServerSettings(url=server, timeout=10)


async def main(action: str, workdir: Path, server: str) -> None:
    path = workdir / "run.checkpoint.json"
    async with MCPAgent(llm=FunctionLLM(script), servers={"el": settings(server)}) as agent:
        if action == "run":
            result = await agent.run("what do I like?", checkpoint=path)
            ((call, question),) = result.pending_input
            agent.answer(call.id, {"name": "Ada"}, key=question.key)
            result = await agent.resume()
            ((call, question),) = result.pending_input
            print(f"paused {question.key} {question.message}", flush=True)
            await asyncio.sleep(60)  # the parent kills the process here
            return
        result = await agent.resume(path)
        ((call, question),) = result.pending_input
        agent.answer(call.id, {"colour": "red"}, key=question.key)
        result = await agent.resume()
        tools = [m.content for m in agent.memory.messages if m.role is Role.TOOL]
        print(json.dumps({"result": result.model_dump(mode="json"), "tools": tools}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3]))
