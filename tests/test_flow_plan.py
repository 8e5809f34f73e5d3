"""The typed plan and the `planning` tool: owners from tags, statuses, and errors as observations."""

from __future__ import annotations

import pytest

from agentfsm.errors import ArgumentError
from agentfsm.flow import PlanningTool, StepStatus
from agentfsm.flow.plan import owner_of


def test_a_tag_picks_the_executor_and_an_unknown_one_gives_the_first():
    executors = ["coder", "writer"]
    assert owner_of("[WRITER] draft the text", executors) == ("writer", "draft the text")
    assert owner_of("[nobody] do it", executors) == ("coder", "[nobody] do it")
    assert owner_of("plain step", executors) == ("coder", "plain step")


async def test_create_mark_get_list_set_active_delete():
    tool = PlanningTool(["coder", "writer"])
    made = await tool(command="create", plan_id="p1", title="T", steps=["[coder] a", "[writer] b"])
    assert made.error is None and "Plan created successfully with ID: p1" in made.output
    plan = tool.plans["p1"]
    assert [(s.id, s.agent, s.text, s.status) for s in plan.steps] == [
        (1, "coder", "a", StepStatus.NOT_STARTED),
        (2, "writer", "b", StepStatus.NOT_STARTED),
    ]
    marked = await tool(command="mark_step", step_id=2, step_status="completed", step_notes="done")
    assert plan.steps[1].status is StepStatus.COMPLETED and "Notes: done" in marked.output
    assert "1/2 steps completed" in (await tool(command="get")).output
    await tool(command="create", plan_id="p2", title="U", steps=["x"])
    assert "p2 (active)" in (await tool(command="list")).output
    await tool(command="set_active", plan_id="p1")
    assert tool.active == "p1"
    assert (await tool(command="delete", plan_id="p1")).output == "Plan 'p1' has been deleted."
    assert tool.active is None and list(tool.plans) == ["p2"]


async def test_update_keeps_a_step_given_again_and_numbers_new_ones_after_the_last():
    tool = PlanningTool(["coder"])
    await tool(command="create", plan_id="p", title="T", steps=["a", "b"])
    await tool(command="mark_step", step_id=1, step_status="completed")
    await tool(command="update", plan_id="p", steps=["a", "c"])
    steps = tool.plans["p"].steps
    assert [(s.id, s.text, s.status) for s in steps] == [
        (1, "a", StepStatus.COMPLETED),
        (3, "c", StepStatus.NOT_STARTED),
    ]


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"command": "create", "title": "T", "steps": ["a"]}, "`plan_id` is required for command create"),
        ({"command": "create", "plan_id": "p", "title": "T", "steps": []}, "a non-empty list of step texts"),
        ({"command": "get"}, "no active plan; give `plan_id`, or create a plan first"),
        ({"command": "get", "plan_id": "zz"}, "no plan with ID 'zz'"),
        ({"command": "delete"}, "`plan_id` is required for command delete"),
    ],
)
async def test_a_bad_command_is_an_error_result_naming_the_fix(arguments, says):
    result = await PlanningTool(["coder"])(**arguments)
    assert result.error is not None and says in result.error


async def test_an_unknown_command_fails_the_schema():
    with pytest.raises(ArgumentError, match="command"):
        await PlanningTool(["coder"])(command="explode")
