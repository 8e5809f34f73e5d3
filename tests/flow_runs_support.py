"""A `PlanningFlow` factory for `Runs`, its models answering from what they are asked (no script
position: a flow built again after a restart answers as the first one did), and what it did.

The flow's task names its steps, separated by ``;``: ``note a; delete b; wait``. The planner plans
one step for each, by the agent ``worker``; the worker calls the step's tool (``note`` writes a
note, ``delete`` needs approval, ``wait`` waits for the world's gate), then terminates; its model
breaks on ``boom``, and the planner revises a blocked plan to one step, ``note recovered``.
"""

from __future__ import annotations

import re
from typing import Any

from runs_support import World, call_for

from agentfsm import Terminate, ToolCallAgent
from agentfsm.flow import PlanningFlow
from agentfsm.messages import Message, Role, ToolCall
from agentfsm.runs import AgentSpec
from agentfsm.testing import FunctionLLM, ModelRequest, reply

_TASK = re.compile(r"accomplish the task: (.*?)\n")
_STEP = re.compile(r'working on step \d+: "(?:\[\w+\] )?(.*?)"')


class FlowWorld(World):
    """What the flows' tools and models did (shared by every flow the factory builds), and the gate
    ``wait`` waits at."""

    def __init__(self) -> None:
        super().__init__()
        self.planner_calls = 0
        self.worker_calls = 0
        self.asked: list[list[Message]] = []
        """What the worker was sent, on each call."""

    def factories(self) -> dict[str, Any]:
        world = self
        note, delete, wait = self.tools()

        def planner(request: ModelRequest) -> Any:
            world.planner_calls += 1
            if not request.tools:
                return reply("summary: all done")
            if "is blocked" in str(request.messages[0].content):  # a revision: one step instead
                revised = {"command": "update", "steps": ["[worker] note recovered"]}
                return reply(tool_calls=[("planning", revised)])
            found = _TASK.search(str(request.messages[0].content))
            steps = [f"[worker] {step.strip()}" for step in (found.group(1) if found else "").split(";")]
            return reply(tool_calls=[("planning", {"command": "create", "title": "T", "steps": steps})])

        def worker(request: ModelRequest) -> Any:
            world.worker_calls += 1
            world.asked.append(list(request.messages))
            last = request.messages[-1]
            if last.role is Role.TOOL:
                return reply(tool_calls=[ToolCall.create("end", "terminate", {"status": "success"})])
            asked = [_STEP.search(str(m.content)) for m in request.messages if m.role is Role.USER]
            found = next((step for step in reversed(asked) if step is not None), None)
            task = found.group(1) if found else str(request.messages[0].content)  # the lone agent's task
            if task == "boom":
                raise RuntimeError("the step breaks")
            return reply(tool_calls=[call_for(task, f"c{world.worker_calls}")])

        def build(spec: AgentSpec) -> PlanningFlow:
            agent = ToolCallAgent(
                llm=FunctionLLM(worker), tools=[note, delete, wait, Terminate()], name="worker"
            )
            return PlanningFlow(
                agents={"worker": agent},
                planner_llm=FunctionLLM(planner),
                review=bool(spec.options.get("review")),
            )

        def build_agent(spec: AgentSpec) -> ToolCallAgent:
            return ToolCallAgent(llm=FunctionLLM(worker), tools=[note, Terminate()], name="solo")

        return {"flow": build, "solo": build_agent}
