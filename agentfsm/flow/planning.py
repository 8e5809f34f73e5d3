"""`planning`: the tool a planner makes and revises plans with (upstream's seven commands).

A bad command is an observation, never an exception: the result's error says
what was wrong and what to send instead, so a planner (or a flow reading its
call) can correct itself. The tool holds the plans it made, by id, and which
one is active; each step's owner comes from its ``[agent_name]`` tag, read
against the executors the tool was given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import WrongValueError
from ..toolbox.tool import Tool, ToolResult
from .plan import Plan, PlanStep, StepStatus, owner_of

__all__ = ["PlanningTool"]

COMMANDS = ("create", "update", "list", "get", "set_active", "mark_step", "delete")

_DESCRIPTION = (
    "A planning tool that allows the agent to create and manage plans for solving complex tasks.\n"
    "The tool provides functionality for creating plans, updating plan steps, and tracking progress.\n"
    "Start each step with the name of the agent that should do it, in brackets: [agent_name]."
)


class PlanningTool(Tool):
    """Plans by id, one of them active; `executors` are the agents a step's tag may name."""

    name = "planning"
    description = _DESCRIPTION
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "command": {
                "description": f"The command to execute. Available commands: {', '.join(COMMANDS)}.",
                "enum": list(COMMANDS),
                "type": "string",
            },
            "plan_id": {
                "description": "Unique identifier for the plan. Required for create, update, set_active, "
                "and delete commands. Optional for get and mark_step (uses active plan if not specified).",
                "type": "string",
            },
            "title": {
                "description": "Title for the plan. Required for create, optional for update.",
                "type": "string",
            },
            "steps": {
                "description": "List of plan steps, each starting with its agent's [agent_name] tag. "
                "Required for create command, optional for update command.",
                "type": "array",
                "items": {"type": "string"},
            },
            "step_id": {"description": "The number of the step to update (mark_step).", "type": "integer"},
            "step_status": {
                "description": "Status to set for a step. Used with mark_step command.",
                "enum": [s.value for s in StepStatus],
                "type": "string",
            },
            "step_notes": {"description": "Additional notes for a step (mark_step).", "type": "string"},
        },
        "required": ["command"],
        "additionalProperties": False,
    }

    def __init__(self, executors: Sequence[str]) -> None:
        super().__init__()
        if not executors:
            raise WrongValueError("`PlanningTool` needs at least one executor name for a step to belong to")
        self.executors = tuple(executors)
        self.plans: dict[str, Plan] = {}
        self.active: str | None = None

    async def execute(self, **kwargs: Any) -> ToolResult:
        command = kwargs.pop("command")
        handler = {
            "create": self._create,
            "update": self._update,
            "list": self._list,
            "get": self._get,
            "set_active": self._set_active,
            "mark_step": self._mark_step,
            "delete": self._delete,
        }[command]
        return handler(**kwargs)

    # -- commands ------------------------------------------------------------------

    def _create(
        self, plan_id: str | None = None, title: str | None = None, steps: list[str] | None = None, **_: Any
    ) -> ToolResult:
        if not plan_id:
            return _error("`plan_id` is required for command create; name the new plan")
        if plan_id in self.plans:
            return _error(f"a plan with ID {plan_id!r} already exists; use command update to change it")
        if not title:
            return _error("`title` is required for command create; give the plan a title")
        texts = [s for s in steps or () if s.strip()]
        if not texts:
            return _error("`steps` is required for command create: a non-empty list of step texts")
        plan = Plan(plan_id=plan_id, title=title)
        plan.add_steps(texts, self.executors)
        self.plans[plan_id] = plan
        self.active = plan_id
        return ToolResult(output=f"Plan created successfully with ID: {plan_id}\n\n{plan.render()}")

    def _update(
        self, plan_id: str | None = None, title: str | None = None, steps: list[str] | None = None, **_: Any
    ) -> ToolResult:
        """New steps replace the plan's; a step given again (same owner and text) keeps its status,
        attempts and notes, as upstream keeps the status of unchanged steps."""
        plan, problem = self._plan(plan_id, "update", default=False)
        if plan is None:
            return problem
        if title:
            plan.title = title
        if steps is not None:
            old = {(s.agent, s.text): s for s in plan.steps}
            next_id = max((s.id for s in plan.steps), default=0) + 1
            revised = []
            for raw in steps:
                agent, text = owner_of(raw, self.executors)
                step = old.pop((agent, text), None)
                if step is None:
                    step, next_id = PlanStep(id=next_id, text=text, agent=agent), next_id + 1
                revised.append(step)
            plan.steps = revised
        return ToolResult(output=f"Plan updated successfully: {plan.plan_id}\n\n{plan.render()}")

    def _list(self, **_: Any) -> ToolResult:
        if not self.plans:
            return ToolResult(output="No plans available. Create a plan with the 'create' command.")
        lines = ["Available plans:"]
        for plan_id, plan in self.plans.items():
            marker = " (active)" if plan_id == self.active else ""
            lines.append(
                f"• {plan_id}{marker}: {plan.title} - {len(plan.completed)}/{len(plan.steps)} steps completed"
            )
        return ToolResult(output="\n".join(lines))

    def _get(self, plan_id: str | None = None, **_: Any) -> ToolResult:
        plan, problem = self._plan(plan_id, "get")
        return problem if plan is None else ToolResult(output=plan.render())

    def _set_active(self, plan_id: str | None = None, **_: Any) -> ToolResult:
        plan, problem = self._plan(plan_id, "set_active", default=False)
        if plan is None:
            return problem
        self.active = plan.plan_id
        return ToolResult(output=f"Plan '{plan.plan_id}' is now the active plan.\n\n{plan.render()}")

    def _mark_step(
        self,
        plan_id: str | None = None,
        step_id: int | None = None,
        step_status: str | None = None,
        step_notes: str | None = None,
        **_: Any,
    ) -> ToolResult:
        plan, problem = self._plan(plan_id, "mark_step")
        if plan is None:
            return problem
        if step_id is None:
            return _error("`step_id` is required for command mark_step; give the number of the step")
        step = plan.step(step_id)
        if step is None:
            return _error(
                f"no step {step_id} in plan {plan.plan_id!r}; its steps: {[s.id for s in plan.steps]}"
            )
        if step_status is not None:
            step.status = StepStatus(step_status)
        if step_notes is not None:
            step.notes = step_notes
        return ToolResult(output=f"Step {step_id} updated in plan '{plan.plan_id}'.\n\n{plan.render()}")

    def _delete(self, plan_id: str | None = None, **_: Any) -> ToolResult:
        plan, problem = self._plan(plan_id, "delete", default=False)
        if plan is None:
            return problem
        del self.plans[plan.plan_id]
        if self.active == plan.plan_id:
            self.active = None
        return ToolResult(output=f"Plan '{plan.plan_id}' has been deleted.")

    def _plan(
        self, plan_id: str | None, command: str, *, default: bool = True
    ) -> tuple[Plan | None, ToolResult]:
        """The plan `plan_id` names (the active one when `default` and none is named), or the error."""
        if not plan_id:
            if not default:
                return None, _error(f"`plan_id` is required for command {command}; name the plan")
            if self.active is None:
                return None, _error("no active plan; give `plan_id`, or create a plan first")
            plan_id = self.active
        plan = self.plans.get(plan_id)
        if plan is None:
            return None, _error(f"no plan with ID {plan_id!r}; known: {sorted(self.plans)!r}")
        return plan, ToolResult()


def _error(message: str) -> ToolResult:
    return ToolResult(error=message)
