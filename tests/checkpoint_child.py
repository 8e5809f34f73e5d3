"""The process that `test_checkpoint.py` kills: a real run with checkpointing, killed with SIGKILL.

    python checkpoint_child.py run|resume WORKDIR KILL

KILL is ``none``, ``write:K`` (SIGKILL right after the K-th checkpoint write),
``torn:K`` (SIGKILL inside the K-th write, half of its line appended to the journal),
``before:N`` or ``after:N`` (SIGKILL inside ``record(n=N)``, before or after its
side effect), ``mark`` (print ``checkpoint`` after each write and let each
call take 20 ms: the parent kills the process when it chooses), or ``wait``
(print ``checkpoint`` after the first write, then wait for a file ``go`` in
WORKDIR: the parent starts a second process while this one holds the run).
The run writes a trace beside its checkpoint, and a resume goes on with it.
The run's result is printed as one JSON line when it ends; a run refused
because another holds the checkpoint prints ``refused: MESSAGE`` and exits 2.
The model is a `FunctionLLM` that answers from the conversation alone, so a
resumed process (a new model object) answers as the killed one would have.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

from agentfsm.agent import ToolCallAgent
from agentfsm.errors import CheckpointLeasedError
from agentfsm.messages import Role, ToolCall
from agentfsm.recording import checkpoint
from agentfsm.testing import FunctionLLM, ModelRequest, reply
from agentfsm.toolbox import Terminate
from agentfsm.toolbox.tool import tool

TASK = "record 1, 2 and 3, then finish"


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def script(request: ModelRequest) -> object:
    """Step 1 records 1 and 2, step 2 records 3, step 3 terminates; decided by the results seen so far."""
    done = sum(1 for m in request.messages if m.role is Role.TOOL)
    if done == 0:
        calls = [ToolCall.create("c1", "record", {"n": 1}), ToolCall.create("c2", "record", {"n": 2})]
        return reply("recording 1 and 2", calls)
    if done == 2:
        return reply("recording 3", [ToolCall.create("c3", "record", {"n": 3})])
    return reply("done", [ToolCall.create("c4", "terminate", {"status": "success"})])


def build(workdir: Path, kill: str) -> ToolCallAgent:
    mode, _, arg = kill.partition(":")
    effects = workdir / "effects.txt"

    @tool
    def record(n: int) -> str:
        """Append `n` to effects.txt (the side effect that must not happen twice)."""
        if mode == "before" and n == int(arg):
            _die()
        if mode == "mark":
            time.sleep(0.02)  # room for the parent's kill to land inside a call
        with open(effects, "a") as out:
            out.write(f"{n}\n")
            out.flush()
            os.fsync(out.fileno())
        if mode == "after" and n == int(arg):
            _die()
        return f"recorded {n}"

    if mode in ("write", "torn", "mark", "wait"):
        append, count = checkpoint.append_record, [0]

        def hooked(path: checkpoint.RecordPath, text: str, *, new: bool = False) -> None:
            count[0] += 1
            if mode == "torn" and count[0] == int(arg):
                append(path, text[: len(text) // 2], new=new)  # the kill lands mid-line
                _die()
            append(path, text, new=new)
            if mode == "write" and count[0] == int(arg):
                _die()
            if mode == "mark" or (mode == "wait" and count[0] == 1):
                print("checkpoint", flush=True)
            if mode == "wait" and count[0] == 1:
                deadline = time.monotonic() + 30
                while not (workdir / "go").exists() and time.monotonic() < deadline:
                    time.sleep(0.01)

        checkpoint.append_record = hooked  # type: ignore[assignment]
    return ToolCallAgent(llm=FunctionLLM(script), tools=[record, Terminate()], name="child", max_steps=5)


async def main(action: str, workdir: Path, kill: str) -> None:
    agent = build(workdir, kill)
    path, trace = workdir / "run.checkpoint.json", workdir / "run.trace.jsonl"
    try:
        if action == "run":
            result = await agent.run(TASK, checkpoint=path, trace=trace)
        else:
            result = await agent.resume(path, trace=trace)  # the trace, cut back to the checkpoint, goes on
    except CheckpointLeasedError as exc:
        print(f"refused: {exc}", flush=True)
        sys.exit(2)
    print(json.dumps(result.model_dump(mode="json")), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3]))
