"""Streaming: both adapters over llmock's server-sent events, the deltas on the run's one event
stream, `run_stream` (and `final_only`), faults and cancellation mid-stream, and a streamed run
recorded exactly as the same run without streaming.

The llmock tests run once per adapter (`LLM`: litellm; `OpenAICompatible`: aiohttp) and check
what the server received as well as what the run saw.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import EventCapture
from llmock.scenarios import Reply, StreamFault
from llmock.scenarios import ToolCall as MockCall

from agentfsm import (
    LLM,
    AgentState,
    LLMResponse,
    OpenAICompatible,
    RunResult,
    StopReason,
    TextDelta,
    ToolCallAgent,
    ToolCallDelta,
    Transition,
)
from agentfsm.agent.replay import replay
from agentfsm.recording.checkpoint import read_checkpoint
from agentfsm.run.events import LLMCall, ToolCallCompleted, ToolCallStarted
from agentfsm.testing import ScriptedLLM, reply

ADAPTERS: dict[str, type[LLM] | type[OpenAICompatible]] = {"litellm": LLM, "native": OpenAICompatible}
MODEL = "openai/llmock-test-model"
ANSWER = "The sum of two and three is five, as the tool said."


@pytest.fixture(params=sorted(ADAPTERS))
def adapter(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def make_llm(llmock: Any, adapter: str, **options: Any) -> LLM | OpenAICompatible:
    options.setdefault("backoff_base", 0.01)
    options.setdefault("backoff_max", 0.05)
    return ADAPTERS[adapter](MODEL, api_base=llmock.base_url("openai"), api_key="test", **options)


def script_add_then_answer(llmock: Any) -> None:
    """Two turns: text and a tool call, then the final answer in words."""
    llmock.add(Reply(text="I will add them.", tool_calls=(MockCall("add", {"a": 2, "b": 3}),)))
    llmock.add(Reply(text=ANSWER))


async def collect(agent: ToolCallAgent, task: str, **kwargs: Any) -> tuple[list[Any], RunResult]:
    events = [event async for event in agent.run_stream(task, **kwargs)]
    result = events.pop()
    assert isinstance(result, RunResult)
    return events, result


def texts(events: list[Any], step: int | None = None) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta) and step in (None, e.step))


# -- the adapters and the events -------------------------------------------------------------


@pytest.mark.http
async def test_text_and_tool_call_deltas_arrive_in_order_with_the_other_events(
    adapter: str, llmock, toolbox
) -> None:
    script_add_then_answer(llmock)
    agent = ToolCallAgent(llm=make_llm(llmock, adapter, stream=True), tools=toolbox)

    events, result = await collect(agent, "add 2 and 3")

    assert (result.state, result.stop_reason, result.output) == (
        AgentState.FINISHED,
        StopReason.FINAL_ANSWER,
        ANSWER,
    )
    body = llmock.requests[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    kinds = [type(e).__name__ for e in events]
    # step 1: the edge into THINKING, the call sent, its pieces, the call, the edge out; the tools; and so on
    first_call = kinds.index("LLMCall")
    assert kinds[:2] == ["Transition", "LLMCallStarted"]
    assert set(kinds[2:first_call]) == {"TextDelta", "ToolCallDelta"}
    assert kinds[first_call + 1 : first_call + 5] == [
        "Transition",
        "ToolCallStarted",
        "ToolCallCompleted",
        "Transition",
    ]
    text_pieces = [e for e in events if isinstance(e, TextDelta)]
    assert len(text_pieces) > 4  # word-sized pieces, not one
    assert {e.step for e in text_pieces} == {1, 2} and {e.attempt for e in text_pieces} == {1}
    assert texts(events, 1) == "I will add them."
    assert texts(events, 2) == ANSWER
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert calls[0].name == "add" and calls[0].call_id and calls[0].step == 1
    assert all(c.name is None and c.call_id is None for c in calls[1:])
    assert len(calls) > 2  # the arguments come in fragments
    llm_calls = [e for e in events if isinstance(e, LLMCall)]
    assert llm_calls[0].reply is not None
    (made,) = llm_calls[0].reply.tool_calls
    assert (made.id, made.name) == (calls[0].call_id, "add")
    assert "".join(c.arguments for c in calls) == made.arguments
    assert json.loads(made.arguments) == {"a": 2, "b": 3}
    observed = [e for e in events if isinstance(e, ToolCallCompleted)]
    assert observed[0].observation.content == "Observed output of cmd `add` executed:\n5"


@pytest.mark.http
async def test_the_streamed_reply_is_the_reply_without_streaming(adapter: str, llmock) -> None:
    from agentfsm import Message

    replies: dict[bool, LLMResponse] = {}
    for stream in (False, True):
        llmock.add(Reply(text=ANSWER, tool_calls=(MockCall("add", {"a": 2, "b": 3}),)))
        replies[stream] = await make_llm(llmock, adapter, stream=stream).ask_tool(
            [Message.user_message("hi")],
            tools=[{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}],
        )
    plain, streamed = replies[False], replies[True]
    assert streamed.usage == plain.usage and streamed.usage.output_tokens > 0  # the usage came last
    assert streamed.usage.llm_calls == 1
    ids = {plain.tool_calls[0].id: "id", streamed.tool_calls[0].id: "id"}  # llmock makes new ids
    assert [(ids[c.id], c.name, c.arguments) for c in streamed.tool_calls] == [
        (ids[c.id], c.name, c.arguments) for c in plain.tool_calls
    ]
    assert (streamed.content, streamed.model, streamed.finish_reason, streamed.provider_fields) == (
        plain.content,
        plain.model,
        plain.finish_reason,
        plain.provider_fields,
    )


@pytest.mark.http
async def test_a_priced_model_costs_the_same_streamed(adapter: str, llmock) -> None:
    from agentfsm import Message

    costs = []
    for stream in (False, True):
        llmock.reply(ANSWER)
        llm = ADAPTERS[adapter](
            "openai/gpt-4o-mini", api_base=llmock.base_url("openai"), api_key="t", stream=stream
        )
        costs.append((await llm.ask_tool([Message.user_message("hi")])).usage.cost_usd)
    assert costs[0] is not None and costs[0] > 0
    assert costs[1] == pytest.approx(costs[0])


# -- recorded alike ----------------------------------------------------------------------------

_IDS = re.compile(r"call_[0-9a-f]{12,}")
_VARYING = {"run_id", "started_at", "duration_s", "duration_ms", "written_at", "at", "ended_at"}


def normalised(value: Any, ids: dict[str, str]) -> Any:
    """`value` without what differs between any two runs: times, the run id, llmock's call ids
    (numbered in order of appearance)."""
    if isinstance(value, dict):
        return {k: normalised(v, ids) for k, v in value.items() if k not in _VARYING}
    if isinstance(value, list):
        return [normalised(v, ids) for v in value]
    if isinstance(value, str):
        return _IDS.sub(lambda m: ids.setdefault(m.group(), f"call#{len(ids)}"), value)
    return value


def records(path: Path) -> list[Any]:
    ids: dict[str, str] = {}
    return [normalised(json.loads(line), ids) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.http
async def test_streamed_and_non_streamed_runs_are_recorded_record_for_record(
    adapter: str, llmock, toolbox, tmp_path: Path
) -> None:
    outcomes = {}
    for stream in (False, True):
        script_add_then_answer(llmock)
        agent = ToolCallAgent(llm=make_llm(llmock, adapter, stream=stream), tools=toolbox)
        trace, checkpoint = tmp_path / f"{stream}.jsonl", tmp_path / f"{stream}.ckpt"
        result = await agent.run("add 2 and 3", trace=trace, checkpoint=checkpoint)
        ids: dict[str, str] = {}
        memory = normalised([m.model_dump(mode="json") for m in agent.memory.messages], ids)
        state = normalised(read_checkpoint(checkpoint), {})
        outcomes[stream] = (normalised(result.model_dump(mode="json"), {}), memory, records(trace), state)
        replayed = await replay(trace)
        assert normalised(replayed.result.model_dump(mode="json"), {}) == outcomes[stream][0]  # the same run

    plain, streamed = outcomes[False], outcomes[True]
    assert len(streamed[2]) == len(plain[2]) > 6
    for kind_plain, kind_streamed in zip(plain[2], streamed[2], strict=True):
        assert kind_streamed == kind_plain
    assert streamed[1] == plain[1]  # memory
    assert streamed[3] == plain[3]  # the checkpoint's run, as resume reads it back
    assert streamed[0] == plain[0]  # the result, usage included
    sent = [r.body for r in llmock.requests]
    assert [b.get("stream", False) for b in sent] == [False, False, True, True]
    without = [{k: v for k, v in b.items() if k not in ("stream", "stream_options")} for b in sent]
    assert normalised(without[2:], {}) == normalised(without[:2], {})  # the same requests otherwise


# -- faults mid-stream -------------------------------------------------------------------------


@pytest.mark.http
@pytest.mark.parametrize("kind", ["disconnect", "malformed", "truncate"])
async def test_a_stream_broken_mid_way_is_retried_whole(
    adapter: str, kind: str, llmock, agentfsm_events: EventCapture
) -> None:
    llmock.add(Reply(text=ANSWER, times=2))
    llmock.add(StreamFault(kind, after_chunks=4))  # three pieces of text, then the fault
    agent = ToolCallAgent(llm=make_llm(llmock, adapter, stream=True))

    events, result = await collect(agent, "sum up")

    assert (result.state, result.stop_reason, result.output) == (
        AgentState.FINISHED,
        StopReason.FINAL_ANSWER,
        ANSWER,
    )
    assert len(llmock.requests) == 2
    deltas = [e for e in events if isinstance(e, TextDelta)]
    first = [e.text for e in deltas if e.attempt == 1]
    assert 0 < len(first) < len(deltas) and ANSWER.startswith("".join(first))
    assert "".join(e.text for e in deltas if e.attempt == 2) == ANSWER
    assert result.usage.llm_calls == 1
    (retry,) = agentfsm_events.named("llm_retry")
    assert retry["attempt"] == 1
    assert [c["attempts"] for c in agentfsm_events.named("llm_call")] == [2]


@pytest.mark.http
async def test_a_stream_that_keeps_breaking_ends_the_run_in_error(adapter: str, llmock) -> None:
    llmock.add(StreamFault("disconnect", after_chunks=2, times=None))
    agent = ToolCallAgent(llm=make_llm(llmock, adapter, stream=True, max_attempts=3))

    result = await agent.run("sum up")

    assert (result.state, result.stop_reason) == (AgentState.ERROR, StopReason.ERROR)
    assert result.error is not None and result.error.startswith("LLMError: ")
    assert "after 3 attempts" in result.error
    assert len(llmock.requests) == 3


# -- cancellation mid-stream -----------------------------------------------------------------


@pytest.mark.http
async def test_cancelling_mid_stream_ends_cancelled_with_the_partial_usage(adapter: str, llmock) -> None:
    llmock.reply(ANSWER)
    llmock.add(StreamFault("stall", after_chunks=4, stall_seconds=5))  # three pieces, then silence
    agent = ToolCallAgent(llm=make_llm(llmock, adapter, stream=True))
    pieces: list[TextDelta] = []
    three = asyncio.Event()

    def on_event(event: object) -> None:
        if isinstance(event, TextDelta):
            pieces.append(event)
            if len(pieces) == 3:
                three.set()

    agent.on_event(on_event)
    task = asyncio.create_task(agent.run("sum up"))
    await asyncio.wait_for(three.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    result = agent.last_result
    assert result is not None
    assert (result.state, result.stop_reason) == (AgentState.ERROR, StopReason.CANCELLED)
    assert result.usage.llm_calls == 1
    assert result.usage.output_tokens == 3  # one a piece received
    assert result.usage.cost_usd is None  # the usage chunk never came: the cost is unknown
    assert agent.memory.messages[-1].content == "sum up"  # nothing half-said reached memory


@pytest.mark.http
async def test_leaving_run_stream_early_cancels_the_run(adapter: str, llmock) -> None:
    llmock.reply(ANSWER)
    llmock.add(StreamFault("stall", after_chunks=3, stall_seconds=5))
    agent = ToolCallAgent(llm=make_llm(llmock, adapter, stream=True))
    seen = 0
    stream = agent.run_stream("sum up")
    async for event in stream:
        if isinstance(event, TextDelta):
            seen += 1
            if seen == 2:
                break
    await stream.aclose()

    result = agent.last_result
    assert result is not None and result.stop_reason is StopReason.CANCELLED
    assert result.usage.output_tokens == 2
    assert agent.state is AgentState.ERROR  # over: nothing runs behind the caller's back


# -- final_only --------------------------------------------------------------------------------


@pytest.mark.http
async def test_final_only_yields_only_the_tokens_of_the_turn_that_ends_the_run(
    adapter: str, llmock, toolbox
) -> None:
    script_add_then_answer(llmock)
    agent = ToolCallAgent(llm=make_llm(llmock, adapter, stream=True), tools=toolbox)

    events, result = await collect(agent, "add 2 and 3", final_only=True)

    assert result.stop_reason is StopReason.FINAL_ANSWER
    deltas = [e for e in events if isinstance(e, TextDelta | ToolCallDelta)]
    assert {e.step for e in deltas} == {2} and not any(isinstance(e, ToolCallDelta) for e in deltas)
    assert texts(events) == ANSWER
    # held until the machine decided: released just before the edge into FINISHED
    last = events.index(deltas[-1])
    final = events[last + 1]
    assert isinstance(final, Transition) and (final.source, final.dest) == ("THINKING", "FINISHED")
    assert all(isinstance(e, TextDelta) for e in events[last - len(deltas) + 1 : last + 1])
    # every other event still came: both LLM calls, the tool call, every transition
    assert sum(isinstance(e, LLMCall) for e in events) == 2
    assert sum(isinstance(e, ToolCallStarted) for e in events) == 1


@pytest.mark.http
async def test_final_only_drops_the_pieces_of_an_attempt_that_broke(adapter: str, llmock) -> None:
    llmock.add(Reply(text=ANSWER, times=2))
    llmock.add(StreamFault("disconnect", after_chunks=4))
    agent = ToolCallAgent(llm=make_llm(llmock, adapter, stream=True))

    events, result = await collect(agent, "sum up", final_only=True)

    assert result.output == ANSWER
    assert {e.attempt for e in events if isinstance(e, TextDelta)} == {2}
    assert texts(events) == ANSWER


async def test_final_only_on_a_run_ended_by_terminate_yields_its_last_turn(toolbox) -> None:
    script = [
        reply("Adding first.", tool_calls=[("add", {"a": 2, "b": 3})]),
        reply("Done: it is 5.", tool_calls=[("terminate", {"status": "success"})]),
    ]
    agent = ToolCallAgent(llm=ScriptedLLM(script, stream=True), tools=toolbox)

    everything, _ = await collect(agent, "add")
    agent.llm = ScriptedLLM(script, stream=True)
    agent.reset(clear_memory=True)
    final, result = await collect(agent, "add", final_only=True)

    assert result.stop_reason is StopReason.TERMINATED
    assert texts(everything) == "Adding first.Done: it is 5."
    assert texts(final) == "Done: it is 5."
    calls = [e for e in final if isinstance(e, ToolCallDelta)]
    assert calls[0].name == "terminate" and "".join(c.arguments for c in calls) == '{"status": "success"}'
    edge = final[final.index(calls[-1]) + 1]
    assert isinstance(edge, Transition) and (edge.source, edge.dest) == ("OBSERVING", "FINISHED")


async def test_run_stream_without_a_streaming_model_yields_every_event_and_the_result(toolbox) -> None:
    script = [reply(tool_calls=[("add", {"a": 1, "b": 1})]), reply("two")]
    agent = ToolCallAgent(llm=ScriptedLLM(script), tools=toolbox)
    seen: list[object] = []
    agent.on_event(seen.append)

    events, result = await collect(agent, "add")

    assert events == seen  # the same events, in the same order, as any listener gets
    assert not any(isinstance(e, TextDelta | ToolCallDelta) for e in events)
    assert result.output == "two" and result is agent.last_result


async def test_run_stream_refuses_a_second_run_while_one_runs(toolbox) -> None:
    from agentfsm.errors import AgentBusyError
    from agentfsm.testing import FunctionLLM

    go = asyncio.Event()

    async def answer(request: object) -> LLMResponse:
        await go.wait()
        return reply("a")

    agent = ToolCallAgent(llm=FunctionLLM(answer), tools=toolbox)
    stream = agent.run_stream("one")
    first = await anext(stream)
    assert isinstance(first, Transition) and first.dest == "THINKING"
    with pytest.raises(AgentBusyError, match="already running"):
        agent.run_stream("two")
    go.set()
    rest = [e async for e in stream]
    assert isinstance(rest[-1], RunResult) and rest[-1].output == "a"
