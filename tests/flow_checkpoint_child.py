"""The process `test_flow_checkpoint.py` kills: a flow with plan review and a checkpoint.

    python flow_checkpoint_child.py ACTION WORKDIR

``run`` executes the flow until it pauses for plan review, prints ``paused``, and waits to
be killed. ``resume`` restores the checkpoint in a new process and prints the result as a JSON
line (paused again: nobody decided); ``approve`` restores it, approves the plan, resumes, and
prints the final result. ``run-kill`` (no review) SIGKILLs itself inside the second step's
agent run; ``resume-kill`` restores that checkpoint and prints the final result. ``step-run``
runs a flow whose step's agent calls a tool that needs approval, prints ``paused`` once the flow
waits in AWAITING_AGENT, and waits to be killed; ``step-approve`` restores it, prints the calls
waiting (a JSON line), approves them, resumes, and prints the final result. The tool appends
to ``WORKDIR/ran`` each time it runs. ``write-kill`` (no review) SIGKILLs itself in the middle
of the checkpoint's third write, half of its record appended. Each process builds its
scripted models for the calls it makes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

from agentfsm import ToolCallAgent, tool
from agentfsm.flow import PlanningFlow
from agentfsm.testing import FunctionLLM, ModelRequest, ScriptedLLM, reply

PLAN = reply(
    tool_calls=[("planning", {"command": "create", "title": "T", "steps": ["[coder] one", "[writer] two"]})]
)


def die(request: ModelRequest) -> object:
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def build(action: str) -> PlanningFlow:
    starts = action.startswith("run")
    planner = ScriptedLLM([PLAN] if starts else [reply("summary after the restart")])
    coder = ToolCallAgent(
        llm=ScriptedLLM([reply("one done")] if action != "resume-kill" else []), name="coder"
    )
    writer_llm = FunctionLLM(die) if action == "run-kill" else ScriptedLLM([reply("two done")])
    writer = ToolCallAgent(llm=writer_llm, name="writer")
    review = not action.endswith("kill")
    return PlanningFlow(agents={"coder": coder, "writer": writer}, planner_llm=planner, review=review)


def build_step(action: str, workdir: Path) -> PlanningFlow:
    @tool
    def record(n: int) -> str:
        """Records `n` (a call that needs approval)."""
        with open(workdir / "ran", "a") as out:
            out.write(f"{n}\n")
        return f"recorded {n}"

    plan = reply(tool_calls=[("planning", {"command": "create", "title": "T", "steps": ["[coder] record"]})])
    first = action == "step-run"
    planner = ScriptedLLM([plan] if first else [reply("summary after the restart")])
    replies = [reply("recording", [("record", {"n": 1})])] if first else [reply("recorded after the restart")]
    coder = ToolCallAgent(llm=ScriptedLLM(replies), tools=[record], name="coder", require_approval=["record"])
    return PlanningFlow(agents={"coder": coder}, planner_llm=planner)


def kill_in_third_write() -> None:
    """The checkpoint's writer thread appends half of the journal's third record, then the process dies."""
    from agentfsm.recording import checkpoint

    append, writes = checkpoint.append_record, [0]

    def half_then_die(path: Path, text: str, *, new: bool = False) -> None:
        writes[0] += 1
        if writes[0] < 3:
            append(path, text, new=new)
            return
        append(path, text[: len(text) // 2].rstrip("\n"), new=new)
        os.kill(os.getpid(), signal.SIGKILL)

    checkpoint.append_record = half_then_die  # type: ignore[assignment]


async def main(action: str, workdir: Path) -> None:
    if action == "write-kill":
        kill_in_third_write()
        await build("run-write-kill").execute("two steps", checkpoint=workdir / "flow.checkpoint.json")
        return  # not reached
    if action.startswith("step-"):
        flow = build_step(action, workdir)
        path = workdir / "flow.checkpoint.json"
        if action == "step-run":
            result = await flow.execute("record one", checkpoint=path)
            assert result.paused and flow.fsm_state == "AWAITING_AGENT"
            print("paused", flush=True)
            time.sleep(60)  # the parent kills the process here
            return
        result = await flow.resume(checkpoint=path)
        print(json.dumps([c.model_dump(mode="json") for c in result.pending_approval]), flush=True)
        flow.approve()
        result = await flow.resume()
        print(json.dumps(result.model_dump(mode="json")), flush=True)
        return
    flow = build(action)
    path = workdir / "flow.checkpoint.json"
    if action == "run-kill":
        await flow.execute("two steps", checkpoint=path)
        return  # not reached: the writer's model kills the process
    if action == "run":
        result = await flow.execute("two steps", checkpoint=path)
        assert result.paused
        print("paused", flush=True)
        time.sleep(60)  # the parent kills the process here
        return
    result = await flow.resume(checkpoint=path)
    if action == "approve":
        flow.approve_plan()
        result = await flow.resume()
    print(json.dumps(result.model_dump(mode="json")), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
