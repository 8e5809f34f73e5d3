"""Acting and observing: tool failures as observations, truncation, terminate, order, images, tool_choice."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

import pytest
from conftest import assert_pairs_complete

from agentfsm import (
    AgentState,
    Role,
    StopReason,
    Terminate,
    Tool,
    ToolCall,
    ToolCallAgent,
    ToolCollection,
    ToolResult,
    tool,
)
from agentfsm.errors import ArgumentError, ToolSetupError
from agentfsm.testing import ScriptedLLM, reply

TERMINATE = reply(tool_calls=[("terminate", {"status": "success"})])


def observations(agent: ToolCallAgent) -> list[str]:
    return [m.content or "" for m in agent.memory if m.role is Role.TOOL]


async def run_one_call(toolbox, name, arguments, **kwargs) -> ToolCallAgent:
    agent = ToolCallAgent(
        llm=ScriptedLLM([reply(tool_calls=[(name, arguments)]), TERMINATE]), tools=toolbox, **kwargs
    )
    result = await agent.run("task")
    assert result.stop_reason is StopReason.TERMINATED, result
    return agent


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("nope", {}, "Error: Unknown tool 'nope'"),
        ("add", '{"a": 1, "b": ', "Error: Error parsing arguments for add: Invalid JSON format"),
        ("add", "[1, 2]", "Error: Error parsing arguments for add: expected a JSON object, got list"),
        (
            "explode",
            {"reason": "disk on fire"},
            "Error: ⚠️ Tool 'explode' encountered a problem: disk on fire",
        ),
    ],
)
async def test_tool_failures_are_observations_with_upstream_wording(toolbox, name, arguments, expected):
    agent = await run_one_call(toolbox, name, arguments)
    assert observations(agent)[0] == expected
    assert_pairs_complete(agent.memory.messages)


async def test_arguments_failing_the_schema_never_reach_the_tool(toolbox):
    agent = await run_one_call(toolbox, "add", {"a": "one", "b": 2})
    text = observations(agent)[0]
    assert text.startswith("Error: Invalid arguments for add: a: ")
    agent = await run_one_call(toolbox, "add", {"a": 1})
    assert observations(agent)[0] == "Error: Invalid arguments for add: b: Field required"


async def test_json_schema_tools_are_validated_before_execute():
    ran = []

    class Greet(Tool):
        name = "greet"
        description = "Greet someone."
        parameters: Mapping[str, Any] = {
            "type": "object",
            "properties": {"who": {"type": "string"}, "times": {"type": "integer", "minimum": 1}},
            "required": ["who"],
            "additionalProperties": False,
        }

        async def execute(self, who: str, times: int = 1) -> str:  # type: ignore[override]
            ran.append(who)
            return f"hello {who}" * times

    box = ToolCollection(Greet(), Terminate())
    agent = await run_one_call(box, "greet", {"who": "ann", "times": 0})
    assert (
        observations(agent)[0] == "Error: Invalid arguments for greet: times: 0 is less than the minimum of 1"
    )
    agent = await run_one_call(box, "greet", {"whom": "ann"})
    assert observations(agent)[0].startswith("Error: Invalid arguments for greet: ")
    assert ran == []
    agent = await run_one_call(box, "greet", {"who": "ann"})
    assert observations(agent)[0] == "Observed output of cmd `greet` executed:\nhello ann"


def test_a_schema_is_checked_once_for_every_tool_that_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Agents build `terminate` afresh for each run: its schema is checked against the metaschema
    (0.4 ms) once, not once a run; a schema that is no JSON schema is refused every time."""
    from jsonschema import SchemaError
    from jsonschema.validators import Draft202012Validator

    checked: list[object] = []
    check = Draft202012Validator.check_schema
    monkeypatch.setattr(
        Draft202012Validator,
        "check_schema",
        classmethod(lambda cls, schema: checked.append(schema) or check(schema)),
    )
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "$comment": "test_tool_calls"}
    first, second = (
        Tool(name="a", description="a", parameters=schema),
        Tool(name="b", description="b", parameters=dict(schema)),
    )
    assert first.validate({"n": 1}) == {"n": 1}
    assert second.validate({"n": 2}) == {"n": 2}
    with pytest.raises(ArgumentError, match="'x' is not of type 'integer'"):
        second.validate({"n": "x"})
    assert len(checked) == 1
    broken = {"type": "object", "properties": {"n": {"type": 7}}}
    for _ in range(2):
        with pytest.raises(SchemaError):
            Tool(name="c", description="c", parameters=broken).validate({})
    assert len(checked) == 3


async def test_tool_result_error_and_empty_output():
    @tool
    def failing() -> ToolResult:
        """Report an error."""
        return ToolResult(error="no such file")

    @tool
    def quiet() -> None:
        """Say nothing."""

    box = ToolCollection(failing, quiet, Terminate())
    agent = await run_one_call(box, "failing", {})
    assert observations(agent)[0] == "Error: no such file"
    agent = await run_one_call(box, "quiet", {})
    assert observations(agent)[0] == "Cmd `quiet` completed with no output"


async def test_max_observe_truncates_with_a_marker_saying_how_much(toolbox):
    agent = await run_one_call(toolbox, "slow_echo", {"text": "x" * 500}, max_observe=100)
    text = observations(agent)[0]
    full = len("Observed output of cmd `slow_echo` executed:\n") + 500
    assert text.startswith("Observed output of cmd `slow_echo` executed:\nxxx")
    assert text.endswith(f"\n... [truncated {full - 100} of {full} characters]")
    assert len(text.split("\n... [truncated")[0]) == 100


async def test_calls_after_terminate_are_not_executed_but_answered(toolbox):
    calls = [("add", {"a": 1, "b": 1}), ("terminate", {"status": "success"}), ("explode", {"reason": "boom"})]
    agent = ToolCallAgent(llm=ScriptedLLM([reply(tool_calls=calls)]), tools=toolbox)
    result = await agent.run("task")
    assert result.stop_reason is StopReason.TERMINATED and result.steps == 1
    texts = observations(agent)
    assert texts[0].endswith("\n2")
    assert texts[2] == "Not executed: `terminate` was called earlier in this reply."
    assert result.usage.tool_calls == 2
    assert_pairs_complete(agent.memory.messages)


async def test_terminate_with_invalid_arguments_does_not_end_the_run(toolbox):
    script = [reply(tool_calls=[("terminate", {"status": "maybe"})]), TERMINATE]
    agent = ToolCallAgent(llm=ScriptedLLM(script), tools=toolbox)
    result = await agent.run("task")
    assert result.steps == 2
    assert observations(agent)[0].startswith("Error: Invalid arguments for terminate: status: ")


async def test_special_tool_names_are_configurable(toolbox):
    agent = ToolCallAgent(
        llm=ScriptedLLM([reply(tool_calls=[("add", {"a": 1, "b": 1})])]),
        tools=toolbox,
        special_tool_names={"add"},
    )
    assert (await agent.run("task")).stop_reason is StopReason.TERMINATED


@pytest.mark.parametrize("parallel", [False, True])
async def test_tool_calls_run_in_order_or_concurrently_results_in_call_order(toolbox, parallel):
    calls = [("slow_echo", {"text": str(i), "delay": 0.2 - 0.05 * i}) for i in range(4)]
    agent = ToolCallAgent(
        llm=ScriptedLLM([reply(tool_calls=calls), TERMINATE]), tools=toolbox, parallel_tool_calls=parallel
    )
    started = time.perf_counter()
    await agent.run("task")
    elapsed = time.perf_counter() - started
    assert [t.rsplit("\n", 1)[1] for t in observations(agent)[:4]] == ["0", "1", "2", "3"]
    tool_ids = [m.tool_call_id for m in agent.memory if m.role is Role.TOOL][:4]
    assert tool_ids == ["call_1", "call_2", "call_3", "call_4"]
    if parallel:
        assert elapsed < 0.35  # the slowest call alone is 0.2 s
    else:
        assert elapsed >= 0.5  # 0.2 + 0.15 + 0.1 + 0.05


async def test_tool_images_are_attached_to_the_tool_message():
    @tool
    def screenshot() -> ToolResult:
        """Take a screenshot."""
        return ToolResult(output="page captured", base64_image="aGVsbG8=")

    llm = ScriptedLLM([reply(tool_calls=[("screenshot", {})]), TERMINATE])
    agent = ToolCallAgent(llm=llm, tools=[screenshot, Terminate()])
    await agent.run("look")
    tool_message = llm.requests[1].messages[-1]
    assert tool_message.role is Role.TOOL and tool_message.base64_image == "aGVsbG8="


async def test_tool_choice_none_never_executes_or_records_calls(toolbox):
    ran = []

    @tool
    def record(x: int) -> int:
        """Record x."""
        ran.append(x)
        return x

    llm = ScriptedLLM([reply("no tools then", tool_calls=[("record", {"x": 1})])])
    agent = ToolCallAgent(llm=llm, tools=[record, Terminate()], tool_choice="none")
    result = await agent.run("task")
    assert result.stop_reason is StopReason.FINAL_ANSWER and result.output == "no tools then"
    assert ran == []
    assert all(not m.tool_calls for m in agent.memory)
    assert llm.requests[0].tool_choice == "none"


async def test_tool_choice_auto_accepts_text_or_calls(toolbox):
    llm = ScriptedLLM([reply(tool_calls=[("add", {"a": 1, "b": 1})]), reply("two")])
    agent = ToolCallAgent(llm=llm, tools=toolbox)
    result = await agent.run("task")
    assert result.stop_reason is StopReason.FINAL_ANSWER and result.output == "two"
    assert llm.requests[0].tool_choice == "auto"
    assert set(llm.requests[0].tool_names) == {"add", "slow_echo", "explode", "terminate"}


async def test_tool_choice_required_nudges_once_then_errors(toolbox):
    llm = ScriptedLLM([reply("I'd rather talk"), reply("still talking")])
    agent = ToolCallAgent(llm=llm, tools=toolbox, tool_choice="required")
    result = await agent.run("task")
    assert (result.state, result.stop_reason) == (AgentState.ERROR, StopReason.ERROR)
    assert result.error == "Tool calls required but none provided"
    assert llm.requests[1].messages[-1].content.startswith("You must call one of the available tools")
    assert llm.requests[0].tool_choice == "required"


async def test_tool_choice_required_recovers_after_one_miss(toolbox):
    llm = ScriptedLLM([reply("hmm"), reply(tool_calls=[("add", {"a": 1, "b": 1})]), reply("chat"), TERMINATE])
    agent = ToolCallAgent(llm=llm, tools=toolbox, tool_choice="required")
    result = await agent.run("task")
    assert result.stop_reason is StopReason.TERMINATED  # one miss, a call, one miss again: never two in a row


async def test_empty_reply_gets_a_corrective_nudge(toolbox):
    llm = ScriptedLLM([reply(), TERMINATE])
    agent = ToolCallAgent(llm=llm, tools=toolbox)
    result = await agent.run("task")
    assert result.stop_reason is StopReason.TERMINATED and result.steps == 2
    assert "empty" in llm.requests[1].messages[-1].content
    assert (
        "empty" not in (llm.requests[1].messages[-1].content or "").split("\n")[-1]
    )  # nudge, then the prompt


async def test_tool_set_can_change_between_steps(toolbox):
    llm = ScriptedLLM([reply(tool_calls=[("add", {"a": 1, "b": 1})]), TERMINATE])
    agent = ToolCallAgent(llm=llm, tools=toolbox)
    async for transition in agent.iter("task"):
        if transition.dest == "OBSERVING" and "explode" in agent.tools:
            agent.tools.remove("explode")
    assert "explode" in llm.requests[0].tool_names
    assert "explode" not in llm.requests[1].tool_names


def test_tool_declarations():
    @tool
    async def search(query: str, limit: int = 5) -> str:
        """Search the index.

        Returns matching lines."""
        return query

    assert search.name == "search"
    assert search.description == "Search the index.\n\nReturns matching lines."
    assert search.parameters == {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "default": 5}},
        "required": ["query"],
        "additionalProperties": False,
    }
    with pytest.raises(ToolSetupError, match="duplicate tool name 'search'"):
        ToolCollection(search, search)
    with pytest.raises(ToolSetupError, match="needs a type hint"):
        tool(lambda x: x)
    with pytest.raises(ToolSetupError, match="wrap functions with @tool"):
        ToolCollection(print)  # type: ignore[arg-type]


async def test_tool_called_directly_validates_and_runs():
    @tool
    def double(n: int) -> int:
        """Double n."""
        return n * 2

    assert (await double(n=4)).output == 8
    assert asyncio.iscoroutinefunction(double.execute)


def test_validated_arguments_are_what_pydantic_returns():
    @tool
    def mixed(a: int, b: float = 1.0, s: str = "x", flag: bool = False) -> str:
        """Plain fields, with defaults."""
        return ""

    cases = [
        {"a": 1},
        {"a": 1, "b": 2.5, "s": "y", "flag": True},
        {"a": True},  # pydantic coerces
        {"a": 1.0},
        {"a": "1"},
        {"a": 1, "b": 2},
        {"a": 1, "extra": 1},
        {},
        {"b": 1.0},
    ]
    for arguments in cases:
        try:
            via_pydantic: object = mixed._model.__pydantic_validator__.validate_python(arguments).__dict__
        except Exception:
            via_pydantic = "error"
        try:
            validated: object = mixed.validate(arguments)
        except Exception:
            validated = "error"
        assert validated == via_pydantic, arguments
        if validated != "error":
            assert [type(v) for v in validated.values()] == [type(v) for v in via_pydantic.values()]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', "ok"),
        ('  {"a": 1}  ', "ok"),
        ('{"a": 1} {"b": 2}', "Error: Error parsing arguments for add: Invalid JSON format"),
        ('{"a": 1}}', "Error: Error parsing arguments for add: Invalid JSON format"),
        ("{a: 1}", "Error: Error parsing arguments for add: Invalid JSON format"),
        ('{"a": [1, {"b": 2}]}', "ok"),
    ],
)
def test_argument_json_parsing(text, expected):
    from agentfsm.agent.tool_runner import _arguments

    arguments = _arguments(ToolCall(id="call_1", name="add", arguments=text))
    assert arguments == (json.loads(text) if expected == "ok" else expected)


@pytest.mark.parametrize("parallel", [False, True])
async def test_the_tool_call_path_is_an_object_the_agent_owns(toolbox, parallel: bool) -> None:
    """ACTING hands the reply's calls to `agent.tool_runner`; a runner handed to the agent (a
    subclass that changes how a tool runs, as a durable run's and a replay's do) runs every call,
    one after another or together, with the bookkeeping of the base."""
    from agentfsm.agent.tool_runner import ToolRunner
    from agentfsm.messages import ToolCall as Call
    from agentfsm.run.state import Observation

    class Counting(ToolRunner):
        def __init__(self, agent: ToolCallAgent) -> None:
            super().__init__(agent)
            self.seen: list[str] = []

        async def execute(self, call: Call) -> Observation:
            self.seen.append(call.id)
            return await super().execute(call)

    calls = [("add", {"a": 1, "b": 2}), ("add", {"a": 2, "b": 2})]
    agent = ToolCallAgent(
        llm=ScriptedLLM([reply(tool_calls=calls), TERMINATE]), tools=toolbox, parallel_tool_calls=parallel
    )
    assert type(agent.tool_runner) is ToolRunner
    runner = agent.tool_runner = Counting(agent)
    result = await agent.run("add twice")
    assert result.stop_reason is StopReason.TERMINATED
    ids = [call.id for call in agent.memory.messages[1].tool_calls]
    assert (
        len(ids) == 2 and runner.seen[:2] == ids and len(runner.seen) == 3
    )  # the calls in order, then terminate
    assert observations(agent)[:2] == [
        "Observed output of cmd `add` executed:\n3",
        "Observed output of cmd `add` executed:\n4",
    ]


async def test_a_run_takes_the_id_it_is_given(tmp_path) -> None:
    from agentfsm.errors import WrongValueError

    agent = ToolCallAgent(llm=ScriptedLLM([TERMINATE, TERMINATE]))
    trace = tmp_path / "run.jsonl"
    result = await agent.run("go", run_id="order-42", trace=trace)
    assert result.run_id == "order-42" and agent.run_state.run_id == "order-42"
    assert json.loads(trace.read_text().splitlines()[0])["run_id"] == "order-42"
    again = await agent.run("again")
    assert again.run_id not in ("order-42", "")
    for bad in ("", "  ", 42):
        with pytest.raises(WrongValueError, match="`run_id` must be a non-empty string"):
            await agent.run("x", run_id=bad)  # type: ignore[arg-type]
