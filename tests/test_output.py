"""`output_type=`: a validated structured final answer through the `final_result` tool, its
corrections counted and bounded, on both model adapters, in traces, checkpoints and replay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from agentfsm import LLM, AgentState, OpenAICompatible, StopReason, Terminate, ToolCallAgent
from agentfsm.agent.replay import replay
from agentfsm.errors import OutputValidationError, WrongTypeError
from agentfsm.testing import ScriptedLLM, reply


class City(BaseModel):
    """A city and where it is."""

    name: str
    country: str
    population: int = Field(gt=0, description="inhabitants")


PARIS = {"name": "Paris", "country": "France", "population": 2_100_000}


def answers(*arguments: dict[str, Any] | str) -> list[Any]:
    return [reply(tool_calls=[("final_result", a)]) for a in arguments]


async def test_invalid_json_then_invalid_fields_then_valid_ends_with_the_object() -> None:
    llm = ScriptedLLM(answers('{"name": "Par', {"name": "Paris", "population": -1}, PARIS))
    agent = ToolCallAgent(llm=llm, output_type=City)

    result = await agent.run("Which city is the capital of France?")

    assert (result.state, result.stop_reason, result.steps) == (AgentState.FINISHED, StopReason.TERMINATED, 3)
    assert result.parsed == City(**PARIS) and isinstance(result.parsed, City)
    assert json.loads(result.output or "") == PARIS
    assert result.ok and result.error is None
    assert llm.requests[1].messages[-1].content == (
        "Error: Error parsing arguments for final_result: Invalid JSON format"
    )
    second = llm.requests[2].messages[-1].content
    assert second.startswith("Error: Invalid arguments for final_result: ")
    assert "country: Field required" in second and "population: Input should be greater than 0" in second
    assert second.endswith("Fix the errors and call `final_result` again.")
    assert agent.run_state.output_failures == 2


async def test_the_final_result_tool_offers_the_models_schema_and_replaces_terminate() -> None:
    llm = ScriptedLLM(answers(PARIS))
    await ToolCallAgent(llm=llm, output_type=City).run("go")

    (declared,) = llm.requests[0].tools
    function = declared["function"]
    assert function["name"] == "final_result"
    assert function["description"] == (
        "The final response which ends this conversation: a City. A city and where it is."
    )
    assert function["parameters"]["properties"]["population"] == {
        "description": "inhabitants",
        "exclusiveMinimum": 0,
        "title": "Population",
        "type": "integer",
    }
    assert function["parameters"]["required"] == ["name", "country", "population"]

    with_tools = ScriptedLLM(answers(PARIS))
    await ToolCallAgent(llm=with_tools, tools=[Terminate()], output_type=City).run("go")
    assert with_tools.requests[0].tool_names == ["terminate", "final_result"]


async def test_retries_are_bounded_with_a_stop_reason_of_their_own() -> None:
    bad = {"name": "Paris"}
    llm = ScriptedLLM([reply("Paris, in France"), *answers(bad, bad)])
    agent = ToolCallAgent(llm=llm, output_type=City, output_retries=2)

    result = await agent.run("go")

    assert (result.state, result.stop_reason, result.steps) == (
        AgentState.ERROR,
        StopReason.OUTPUT_RETRIES,
        3,
    )
    assert result.parsed is None and not result.ok
    assert isinstance(result.exception, OutputValidationError)
    assert result.error is not None and result.error.startswith(
        "OutputValidationError: no valid `final_result` in 3 attempts (output_retries=2); the last: "
        "Error: Invalid arguments for final_result: "
    )
    assert llm.requests[0].messages[-1].content == (
        "When you have the answer, give it by calling `final_result`: that ends the interaction."
    )
    assert llm.requests[1].messages[-1].content == (
        "Plain text responses are not permitted: give your final answer by calling `final_result`.\n"
        "When you have the answer, give it by calling `final_result`: that ends the interaction."
    )
    assert llm.remaining == 0
    last = agent.memory.messages[-1]
    assert last.role == "tool" and last.content.startswith("Error: Invalid arguments")  # pairs stay whole


async def test_output_retries_zero_gives_up_at_the_first_invalid_answer() -> None:
    result = await ToolCallAgent(llm=ScriptedLLM(answers("{")), output_type=City, output_retries=0).run("go")
    assert (result.stop_reason, result.steps) == (StopReason.OUTPUT_RETRIES, 1)


def test_output_type_must_be_a_pydantic_model() -> None:
    with pytest.raises(WrongTypeError, match=r"`output_type` must be a pydantic model class"):
        ToolCallAgent(llm=ScriptedLLM([]), output_type=dict)  # type: ignore[arg-type]


async def test_trace_and_replay_hold_the_answer_and_its_corrections(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    llm = ScriptedLLM(answers({"name": "Paris"}, PARIS))
    result = await ToolCallAgent(llm=llm, output_type=City).run("go", trace=trace)

    records = [json.loads(line) for line in trace.read_text().splitlines()]
    header = records[0]
    assert header["config"]["output"] == {"tool": "final_result", "type": f"{__name__}.City"}
    assert header["config"]["output_retries"] == 2
    tools = [r for r in records if r["kind"] == "tool"]
    assert [(t["is_error"], t.get("output")) for t in tools] == [(True, None), (False, PARIS)]
    assert records[-1]["result"]["parsed"] == PARIS

    replayed = await replay(trace)

    assert replayed.result is not None
    assert (replayed.result.stop_reason, replayed.result.parsed) == (StopReason.TERMINATED, PARIS)
    assert replayed.result.output == result.output
    assert [t.dest for t in replayed.transitions][-1] == "FINISHED"


async def test_replay_of_a_run_that_ran_out_of_retries_takes_the_same_edge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "run.jsonl"
    llm = ScriptedLLM(answers("{", "{"))
    result = await ToolCallAgent(llm=llm, output_type=City, output_retries=1).run("go", trace=trace)

    replayed = await replay(trace)

    assert replayed.result is not None
    assert replayed.result.stop_reason == result.stop_reason == StopReason.OUTPUT_RETRIES
    assert replayed.result.error == result.error
    guards = [g.name for g in replayed.transitions[-1].guards]
    assert guards[:2] == ["terminated", "output_retries_spent"]
    from agentfsm.cli.commands import main

    assert main(["diagram", "--trace", str(trace)]) == 0  # drawn over the machine with the edge
    drawn = capsys.readouterr().out
    assert "OBSERVING --> ERROR: observe_done [output_retries_spent] / output_retries" in drawn


async def test_a_finished_runs_checkpoint_gives_back_the_validated_object(tmp_path: Path) -> None:
    checkpoint = tmp_path / "run.ckpt"
    await ToolCallAgent(llm=ScriptedLLM(answers(PARIS)), output_type=City).run("go", checkpoint=checkpoint)

    again = await ToolCallAgent(llm=ScriptedLLM([]), output_type=City).resume(checkpoint)

    assert again.parsed == City(**PARIS) and isinstance(again.parsed, City)


# -- both adapters, over HTTP ----------------------------------------------------------------


@pytest.mark.http
@pytest.mark.parametrize("adapter", ["litellm", "native"])
async def test_invalid_json_then_valid_over_http(llmock: Any, adapter: str) -> None:
    llmock.call_tool("final_result", PARIS)
    llmock.break_tool_call("malformed_arguments")  # the first reply's arguments are cut in half
    llmock.call_tool("final_result", PARIS)
    cls = LLM if adapter == "litellm" else OpenAICompatible
    llm = cls("openai/llmock-test-model", api_base=llmock.base_url("openai"), api_key="k")

    result = await ToolCallAgent(llm=llm, output_type=City).run("Which city is the capital of France?")

    assert (result.stop_reason, result.parsed) == (StopReason.TERMINATED, City(**PARIS))
    sent = [record.body for record in llmock.requests]
    assert len(sent) == 2
    assert [t["function"]["name"] for t in sent[0]["tools"]] == ["final_result"]
    assert sent[0]["tools"][0]["function"]["parameters"]["required"] == ["name", "country", "population"]
    answered = sent[1]["messages"][-1]
    assert (answered["role"], answered["tool_call_id"], answered["content"]) == (
        "tool",
        sent[1]["messages"][-2]["tool_calls"][0]["id"],
        "Error: Error parsing arguments for final_result: Invalid JSON format",
    )


async def test_manus_and_the_mcp_agent_take_output_type_and_the_config_files_output_retries(
    tmp_path: Path,
) -> None:
    from agentfsm import Manus, MCPAgent
    from agentfsm.sandbox.settings import SandboxSettings

    llm = ScriptedLLM(answers({"name": "Paris"}, PARIS))
    sandbox = SandboxSettings(mode="local", local_dir=str(tmp_path))
    async with Manus(llm=llm, sandbox=sandbox, output_type=City, output_retries=1) as manus:
        result = await manus.run("go")
    assert (result.stop_reason, result.parsed) == (StopReason.TERMINATED, City(**PARIS))
    assert "final_result" in llm.requests[0].tool_names and "terminate" in llm.requests[0].tool_names

    mcp = MCPAgent(llm=ScriptedLLM(answers("{")), servers={}, output_type=City, output_retries=0)
    assert (await mcp.run("go")).stop_reason is StopReason.OUTPUT_RETRIES
    await mcp.aclose()
