"""The process `test_mcp_recording.py` kills: an `MCPAgent` run with a checkpoint, over the suite's
MCP test server on stdio, killed with SIGKILL right after its K-th checkpoint write.

    python mcp_checkpoint_child.py run|resume WORKDIR K REVISION

The model is a `FunctionLLM` that answers from the conversation alone (echo "one", echo "two",
then terminate), so the resuming process answers as the killed one would have. The result is
printed as one JSON line; the `_meta` each server call carried is appended to WORKDIR/meta.jsonl.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from agentfsm.agent.mcp import MCPAgent
from agentfsm.mcp import MCPServerSettings
from agentfsm.messages import Role, ToolCall
from agentfsm.recording import checkpoint
from agentfsm.testing import FunctionLLM, ModelRequest, reply

SERVER = Path(__file__).with_name("mcp_test_server.py")
TASK = "echo one and two, then finish"


def script(request: ModelRequest) -> object:
    results = [m for m in request.messages if m.role is Role.TOOL]
    if not results:
        return reply("one", [ToolCall.create("c1", "mcp_t_echo", {"text": "one"})])
    if len(results) == 1:
        return reply("two", [ToolCall.create("c2", "mcp_t_meta", {})])
    return reply("done", [ToolCall.create("c3", "terminate", {"status": "success"})])


def _hook(workdir: Path, kill_after: int) -> None:
    append, count = checkpoint.append_record, [0]

    def hooked(path: checkpoint.RecordPath, text: str, *, new: bool = False) -> None:
        append(path, text, new=new)
        count[0] += 1
        if count[0] == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    checkpoint.append_record = hooked  # type: ignore[assignment]


async def main(action: str, workdir: Path, kill_after: int, revision: str) -> None:
    if kill_after:
        _hook(workdir, kill_after)
    settings = MCPServerSettings(command=sys.executable, args=(str(SERVER), revision, "stdio"), timeout=10)
    path = workdir / "run.checkpoint.jsonl"
    async with MCPAgent(llm=FunctionLLM(script), servers={"t": settings}, name="child") as agent:
        result = await (agent.run(TASK, checkpoint=path) if action == "run" else agent.resume(path))
        tools = [m for m in agent.memory.messages if m.role is Role.TOOL and m.name == "mcp_t_meta"]
        metas = [m.content.partition("\n")[2] for m in tools]  # after "Observed output ..."
    with open(workdir / "meta.jsonl", "a") as out:
        out.writelines(f"{text}\n" for text in metas)
    print(json.dumps(result.model_dump(mode="json")), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))
