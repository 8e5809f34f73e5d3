"""OpenTelemetry spans of runs, read back from the SDK's in-memory exporter: names, kinds, parentage,
the GenAI conventions' attributes, transitions as span events, content off by default, errors, flows,
and an MCP call that joins the trace of its `execute_tool` span."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from telemetry_support import exporter

import agentfsm
from agentfsm import OpenAICompatible, Terminate, Tool, ToolCallAgent, ToolResult, tool
from agentfsm.errors import LLMError
from agentfsm.flow import PlanningFlow
from agentfsm.questions import InputRequired, Question
from agentfsm.testing import ScriptedLLM, reply

SERVER = Path(__file__).with_name("mcp_test_server.py")

__all__ = ["exporter"]  # the fixture, used by name


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def only(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    found = by_name(spans, name)
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


@tool
async def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


@tool
async def broken() -> str:
    """Always fails."""
    raise RuntimeError("the disk is on fire")


def scripted(*replies: Any, model: str = "openai/gpt-4o-mini") -> ScriptedLLM:
    llm = ScriptedLLM(replies)
    llm.model = model  # type: ignore[attr-defined]  # what a span names the model by
    return llm


ADD_THEN_TERMINATE = (
    reply(tool_calls=[("add", {"a": 1, "b": 2})]),
    reply("done", tool_calls=[("terminate", {"status": "success"})]),
)


def test_importing_agentfsm_does_not_import_opentelemetry() -> None:
    code = (
        "import sys, agentfsm, agentfsm.telemetry, agentfsm.run.observers\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'opentelemetry'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


async def test_a_run_is_an_agent_span_with_its_chat_and_tool_spans(exporter: InMemorySpanExporter) -> None:
    agent = ToolCallAgent(llm=scripted(*ADD_THEN_TERMINATE), tools=[add, Terminate()], name="adder")
    result = await agent.run("add 1 and 2")

    spans = exporter.get_finished_spans()
    assert result.stop_reason == "terminated"
    run = only(spans, "invoke_agent adder")
    chats = by_name(spans, "chat gpt-4o-mini")
    tools = [only(spans, "execute_tool add"), only(spans, "execute_tool terminate")]
    assert len(chats) == 2 and len(spans) == 5
    assert run.kind is SpanKind.INTERNAL and parent_id(run) is None
    assert all(s.kind is SpanKind.CLIENT for s in chats)
    assert all(s.kind is SpanKind.INTERNAL for s in tools)
    assert {parent_id(s) for s in (*chats, *tools)} == {span_id(run)}
    assert {s.context.trace_id for s in spans if s.context} == {run.context.trace_id if run.context else 0}
    assert dict(run.attributes or {}) | {"agentfsm.run.id": "-"} == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "adder",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "agentfsm.run.id": "-",
        "agentfsm.stop_reason": "terminated",
        "agentfsm.run.steps": 2,
        "agentfsm.usage.input_tokens": 20,
        "agentfsm.usage.output_tokens": 10,
        "agentfsm.usage.llm_calls": 2,
        "agentfsm.usage.tool_calls": 2,
    }
    assert (run.attributes or {})["agentfsm.run.id"] == result.run_id
    chat = dict(chats[0].attributes or {})
    assert chat == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.response.model": "scripted",
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 5,
    }
    assert dict(tools[0].attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "gen_ai.tool.call.id": "call_1",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.description": "Add two numbers.",
    }
    assert all(s.status.status_code is StatusCode.UNSET for s in spans)
    # in time order: each chat before the tool it asked for, all inside the run
    order = sorted((*chats, *tools), key=lambda s: s.start_time or 0)
    assert [s.name.split()[0] for s in order] == ["chat", "execute_tool", "chat", "execute_tool"]
    assert all(
        (run.start_time or 0) <= (s.start_time or 0) <= (s.end_time or 0) <= (run.end_time or 0)
        for s in order
    )


async def test_usage_is_on_the_chat_spans_only_so_a_trace_sums_to_the_run(
    exporter: InMemorySpanExporter,
) -> None:
    agent = ToolCallAgent(llm=scripted(*ADD_THEN_TERMINATE), tools=[add, Terminate()])
    result = await agent.run("add")
    spans = exporter.get_finished_spans()
    keys = ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")
    summed = [sum(int((s.attributes or {}).get(k, 0)) for s in spans) for k in keys]  # type: ignore[call-overload]
    assert summed == [result.usage.input_tokens, result.usage.output_tokens] == [20, 10]
    run = only(spans, "invoke_agent toolcall")
    assert not [k for k in (run.attributes or {}) if k.startswith("gen_ai.usage.")]


async def test_each_transition_is_an_event_on_the_run_span_not_a_span(exporter: InMemorySpanExporter) -> None:
    agent = ToolCallAgent(llm=scripted(*ADD_THEN_TERMINATE), tools=[add, Terminate()])
    seen = []
    agent.on_transition(seen.append)
    await agent.run("add")
    spans = exporter.get_finished_spans()
    run = only(spans, "invoke_agent toolcall")
    events = [e for e in run.events if e.name == "agentfsm.transition"]
    got = [(e.attributes or {}) for e in events]
    assert [
        (a["agentfsm.transition.source"], a["agentfsm.transition.dest"], a["agentfsm.transition.trigger"])
        for a in got
    ] == [(t.source, t.dest, t.trigger) for t in seen]
    assert [a["agentfsm.step"] for a in got] == [t.step for t in seen]
    last = got[-1]
    guards = seen[-1].guards
    assert guards and last["agentfsm.transition.guards"] == ",".join(
        f"{g.name}={str(g.held).lower()}" for g in guards
    )
    assert "agentfsm.transition.guards" not in got[0]  # the start edge has no guard
    assert last["agentfsm.stop_reason"] == "terminated"
    assert not [s for s in spans if "THINKING" in s.name or "transition" in s.name]


async def test_content_is_off_by_default(exporter: InMemorySpanExporter) -> None:
    agent = ToolCallAgent(llm=scripted(*ADD_THEN_TERMINATE), tools=[add, Terminate()])
    await agent.run("a secret request")
    for span in exporter.get_finished_spans():
        attributes = dict(span.attributes or {})
        assert not {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions"} & set(
            attributes
        )
        assert not {"gen_ai.tool.call.arguments", "gen_ai.tool.call.result"} & set(attributes)
        assert "secret" not in json.dumps({k: str(v) for k, v in attributes.items()})


async def test_content_is_written_when_asked_for() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    instrumentation = agentfsm.instrument(provider, include_content=True)
    try:
        agent = ToolCallAgent(llm=scripted(*ADD_THEN_TERMINATE), tools=[add, Terminate()])
        await agent.run("add 1 and 2")
    finally:
        instrumentation.uninstrument()
    spans = memory.get_finished_spans()
    first = sorted(by_name(spans, "chat gpt-4o-mini"), key=lambda s: s.start_time or 0)[0]
    attributes = first.attributes or {}
    sent = json.loads(str(attributes["gen_ai.input.messages"]))
    assert sent[0] == {"role": "user", "parts": [{"type": "text", "content": "add 1 and 2"}]}
    said = json.loads(str(attributes["gen_ai.output.messages"]))
    assert said[0]["parts"] == [
        {"type": "tool_call", "id": "call_1", "name": "add", "arguments": {"a": 1, "b": 2}}
    ]
    assert json.loads(str(attributes["gen_ai.system_instructions"]))[0]["type"] == "text"
    adding = only(spans, "execute_tool add").attributes or {}
    assert json.loads(str(adding["gen_ai.tool.call.arguments"])) == {"a": 1, "b": 2}
    assert "3" in str(adding["gen_ai.tool.call.result"])
    run = only(spans, "invoke_agent toolcall").attributes or {}
    assert json.loads(str(run["gen_ai.input.messages"]))[0]["parts"][0]["content"] == "add 1 and 2"


async def test_a_failing_model_call_and_a_failing_tool_have_error_status(
    exporter: InMemorySpanExporter,
) -> None:
    agent = ToolCallAgent(
        llm=scripted(reply(tool_calls=[("broken", {})]), LLMError("the provider said no")),
        tools=[broken, Terminate()],
    )
    result = await agent.run("try")
    spans = exporter.get_finished_spans()
    assert result.state.value == "ERROR"
    failed_tool = only(spans, "execute_tool broken")
    assert failed_tool.status.status_code is StatusCode.ERROR
    assert (failed_tool.attributes or {})["error.type"] == "tool_error"
    assert "the disk is on fire" in (failed_tool.status.description or "")
    chats = sorted(by_name(spans, "chat gpt-4o-mini"), key=lambda s: s.start_time or 0)
    assert [c.status.status_code for c in chats] == [StatusCode.UNSET, StatusCode.ERROR]
    assert (chats[1].attributes or {})["error.type"] == "LLMError"
    assert "gen_ai.usage.input_tokens" not in (chats[1].attributes or {})
    assert [e.attributes for e in chats[1].events if e.name == "exception"] == [
        {"exception.type": "LLMError", "exception.message": "the provider said no"}
    ]
    run = only(spans, "invoke_agent toolcall")
    assert run.status.status_code is StatusCode.ERROR
    assert (run.attributes or {})["error.type"] == "LLMError"
    assert (run.attributes or {})["agentfsm.stop_reason"] == "error"


async def test_a_run_inside_an_application_span_is_its_child(exporter: InMemorySpanExporter) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = ToolCallAgent(llm=scripted(reply("hello")), tools=[Terminate()])
    with provider.get_tracer("app").start_as_current_span("handle request") as outer:
        await agent.run("hi")
    spans = exporter.get_finished_spans()
    run = only(spans, "invoke_agent toolcall")
    assert parent_id(run) == outer.get_span_context().span_id
    assert trace.get_current_span() is trace.INVALID_SPAN  # nothing the run made current is left current


async def test_a_tool_runs_inside_its_span_in_parallel_too(exporter: InMemorySpanExporter) -> None:
    current: dict[str, str] = {}

    @tool
    async def where(label: str) -> str:
        """Say which span is current."""
        await asyncio.sleep(0.01)
        current[label] = getattr(trace.get_current_span(), "name", "?")
        return label

    calls = [("where", {"label": "a"}), ("where", {"label": "b"})]
    llm = scripted(reply(tool_calls=calls), reply(tool_calls=[("terminate", {"status": "success"})]))
    agent = ToolCallAgent(llm=llm, tools=[where, Terminate()], parallel_tool_calls=True)
    await agent.run("where")
    spans = exporter.get_finished_spans()
    assert current == {"a": "execute_tool where", "b": "execute_tool where"}
    ids = {str((s.attributes or {})["gen_ai.tool.call.id"]) for s in by_name(spans, "execute_tool where")}
    assert len(ids) == 2
    assert trace.get_current_span() is trace.INVALID_SPAN


async def test_uninstrumented_runs_make_no_spans() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    instrumentation = agentfsm.instrument(provider)
    instrumentation.uninstrument()
    agent = ToolCallAgent(llm=scripted(reply("hello")), tools=[Terminate()])
    await agent.run("hi")
    assert memory.get_finished_spans() == ()
    assert not agent.listening  # nobody listens, so the run builds no event at all


def create(*steps: str) -> Any:
    return reply(
        tool_calls=[("planning", {"command": "create", "plan_id": "x", "title": "T", "steps": list(steps)})]
    )


async def test_a_flow_is_a_workflow_span_with_plan_spans_and_its_agents_runs(
    exporter: InMemorySpanExporter,
) -> None:
    planner = scripted(
        create("[coder] write code", "[writer] write docs"), reply("all good"), model="openai/planner"
    )
    coder = ToolCallAgent(llm=scripted(reply("code written")), name="coder")
    writer = ToolCallAgent(llm=scripted(reply("docs written")), name="writer")
    flow = PlanningFlow(agents={"coder": coder, "writer": writer}, planner_llm=planner)
    result = await flow.execute("build it")
    assert result.ok
    spans = exporter.get_finished_spans()
    workflow = only(spans, "invoke_workflow planning")
    plan = only(spans, "plan planning")
    planner_chats = by_name(spans, "chat planner")
    agents = [only(spans, "invoke_agent coder"), only(spans, "invoke_agent writer")]
    assert workflow.kind is SpanKind.INTERNAL and parent_id(workflow) is None
    assert (workflow.attributes or {})["gen_ai.operation.name"] == "invoke_workflow"
    assert (workflow.attributes or {})["gen_ai.agent.name"] == "planning"
    assert (plan.attributes or {})["gen_ai.operation.name"] == "plan" and parent_id(plan) == span_id(workflow)
    assert [parent_id(s) for s in planner_chats] == [
        span_id(plan),
        span_id(workflow),
    ]  # the plan; the summary
    assert [parent_id(s) for s in agents] == [span_id(workflow)] * 2
    for agent_span in agents:
        (chat,) = [s for s in spans if parent_id(s) == span_id(agent_span)]
        assert chat.name == "chat gpt-4o-mini"
    summed = sum(int((s.attributes or {}).get("gen_ai.usage.input_tokens", 0)) for s in spans)  # type: ignore[arg-type]
    assert summed == result.usage.input_tokens == 40
    events = [e.attributes or {} for e in workflow.events]
    assert [e["agentfsm.transition.dest"] for e in events] == [
        "PLANNING",
        "EXECUTING",
        "EXECUTING",
        "FINALIZING",
        "DONE",
    ]


async def test_an_mcp_call_carries_its_execute_tool_span_to_the_server(
    exporter: InMemorySpanExporter,
) -> None:
    from agentfsm.agent.mcp import MCPAgent
    from agentfsm.mcp import MCPServerSettings

    settings = MCPServerSettings(command=sys.executable, args=(str(SERVER), "modern", "stdio"), timeout=10)
    llm = scripted(
        reply(tool_calls=[("mcp_t_meta", {})]), reply(tool_calls=[("terminate", {"status": "success"})])
    )
    async with MCPAgent(llm=llm, servers={"t": settings}) as agent:
        result = await agent.run("show the meta")
    assert result.stop_reason == "terminated"
    echoed = llm.requests[1].messages[-1].content or ""
    meta = json.loads(echoed[echoed.index("{") :])
    spans = exporter.get_finished_spans()
    called = only(spans, "execute_tool mcp_t_meta")
    assert called.context is not None
    assert (called.attributes or {})["gen_ai.tool.type"] == "extension"
    version, trace_id, parent, flags = meta["traceparent"].split("-")
    assert version == "00" and int(flags, 16) & 1  # sampled
    assert int(trace_id, 16) == called.context.trace_id  # the server joins the run's trace
    # the span the server's is a child of: the execute_tool span, or the MCP SDK's client span under it
    under = {span_id(s) for s in spans if parent_id(s) == span_id(called)}
    assert int(parent, 16) in {span_id(called), *under}
    assert meta["agentfsm/call_id"] == (called.attributes or {})["gen_ai.tool.call.id"]


async def test_an_http_model_call_names_its_provider_server_and_finish_reason(
    exporter: InMemorySpanExporter, llmock: Any
) -> None:
    llmock.reply("The answer is 42.")
    model = OpenAICompatible(model="openai/test-model", api_base=llmock.base_url("openai"), api_key="k")
    try:
        agent = ToolCallAgent(llm=model, tools=[Terminate()])
        result = await agent.run("the answer?")
    finally:
        await model.aclose()
    assert result.stop_reason == "final_answer"
    chat = only(exporter.get_finished_spans(), "chat test-model")
    attributes = dict(chat.attributes or {})
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["server.address"] == "127.0.0.1" and isinstance(attributes["server.port"], int)
    assert list(attributes["gen_ai.response.finish_reasons"]) == ["stop"]  # type: ignore[arg-type]
    assert attributes["gen_ai.request.temperature"] == 0.0 and attributes["gen_ai.request.max_tokens"] == 4096
    assert attributes["gen_ai.usage.input_tokens"] == result.usage.input_tokens > 0


async def test_events_of_kinds_it_does_not_know_are_passed_over(exporter: InMemorySpanExporter) -> None:
    from dataclasses import dataclass

    @dataclass
    class TextDelta:  # what a stream adds to the event stream: not a kind this listener knows
        text: str

    holder: list[ToolCallAgent] = []

    @tool
    async def chatty() -> str:
        """Emits an event of a kind of its own."""
        holder[0].emit(TextDelta("hello"))  # type: ignore[arg-type]
        return "said"

    agent = ToolCallAgent(llm=scripted(reply(tool_calls=[("chatty", {})]), reply("done")), tools=[chatty])
    holder.append(agent)
    result = await agent.run("talk")
    assert (result.stop_reason, result.error) == ("final_answer", None)
    names = sorted(s.name for s in exporter.get_finished_spans())
    assert names == ["chat gpt-4o-mini", "chat gpt-4o-mini", "execute_tool chatty", "invoke_agent toolcall"]


async def test_a_run_cancelled_in_a_tool_ends_its_spans_in_error(exporter: InMemorySpanExporter) -> None:
    started = asyncio.Event()

    @tool
    async def wait() -> str:
        """Waits for ever."""
        started.set()
        await asyncio.sleep(60)
        return "never"

    agent = ToolCallAgent(llm=scripted(reply(tool_calls=[("wait", {})])), tools=[wait])
    task = asyncio.create_task(agent.run("wait"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    spans = exporter.get_finished_spans()
    waited, run = only(spans, "execute_tool wait"), only(spans, "invoke_agent toolcall")
    assert waited.status.status_code is StatusCode.ERROR and parent_id(waited) == span_id(run)
    assert run.status.status_code is StatusCode.ERROR
    assert (run.attributes or {})["error.type"] == "CancelledError"
    assert (run.attributes or {})["agentfsm.stop_reason"] == "cancelled"
    assert trace.get_current_span() is trace.INVALID_SPAN


def traceparent_of(span: ReadableSpan) -> str:
    assert span.context is not None
    context = span.context
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def assert_resumes(
    resumed: ReadableSpan, paused: ReadableSpan, *, parent: ReadableSpan | None = None
) -> None:
    """`resumed` is a new span in `paused`'s trace, linked to it, a child of `parent` (default: `paused`)."""
    assert resumed.context is not None and paused.context is not None
    assert resumed.context.trace_id == paused.context.trace_id
    assert parent_id(resumed) == span_id(parent or paused)
    assert [(link.context.span_id, dict(link.attributes or {})) for link in resumed.links] == [
        (span_id(paused), {"agentfsm.link": "resumes"})
    ]
    assert (resumed.attributes or {})["agentfsm.run.resumed"] is True
    assert (resumed.attributes or {})["agentfsm.run.id"] == (paused.attributes or {})["agentfsm.run.id"]


async def test_a_paused_run_ends_its_span_and_the_resumed_run_is_a_linked_span_of_its_trace(
    exporter: InMemorySpanExporter,
) -> None:
    agent = ToolCallAgent(
        llm=scripted(*ADD_THEN_TERMINATE), tools=[add, Terminate()], require_approval=["add"]
    )
    paused = await agent.run("add, once approved")
    assert paused.paused
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["chat gpt-4o-mini", "invoke_agent toolcall"]  # never resumed: ended
    first = only(spans, "invoke_agent toolcall")
    assert {
        k: v for k, v in (first.attributes or {}).items() if k.startswith("agentfsm.run.p") or "stop" in k
    } == {
        "agentfsm.run.paused": True,
        "agentfsm.run.paused_in": "AWAITING_APPROVAL",
        "agentfsm.stop_reason": "awaiting_approval",
    }
    assert first.status.status_code is StatusCode.UNSET
    assert agent.run_state.traceparent == traceparent_of(first)
    agent.approve()
    result = await agent.resume()
    assert result.stop_reason == "terminated"
    spans = exporter.get_finished_spans()
    first, second = by_name(spans, "invoke_agent toolcall")
    assert_resumes(second, first)
    assert "agentfsm.run.paused" not in (second.attributes or {})
    assert (second.attributes or {})["agentfsm.stop_reason"] == "terminated"
    assert [parent_id(s) for s in spans if s.name.startswith("execute_tool")] == [span_id(second)] * 2
    dests = [(e.attributes or {})["agentfsm.transition.dest"] for e in second.events]
    assert dests[0] == "ACTING" and dests[-1] == "FINISHED"
    assert trace.get_current_span() is trace.INVALID_SPAN


class Asker(Tool):
    """Asks for a name, then greets with it."""

    name = "greet"
    description = "Greet the user, whose name it asks for."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    asks_for_input = True

    async def execute(self, **kwargs: Any) -> ToolResult:
        question = Question(key="name", message="Your name?", schema={"type": "object"})
        return ToolResult(input_required=InputRequired(questions=(question,), token="1"))

    async def resume(self, asked: InputRequired, answers: Any, **kwargs: Any) -> Any:
        return f"hi, {answers['name'].content['name']}"


async def test_a_run_paused_for_a_question_ends_its_span_likewise(exporter: InMemorySpanExporter) -> None:
    agent = ToolCallAgent(llm=scripted(reply(tool_calls=[("greet", {})]), reply("done")), tools=[Asker()])
    paused = await agent.run("greet")
    assert paused.paused and paused.stop_reason == "awaiting_input"
    first = only(exporter.get_finished_spans(), "invoke_agent toolcall")
    assert (first.attributes or {})["agentfsm.run.paused_in"] == "AWAITING_INPUT"
    assert (first.attributes or {})["agentfsm.stop_reason"] == "awaiting_input"
    ((call, _),) = agent.pending_input
    agent.answer(call.id, {"name": "Ada"})
    result = await agent.resume()
    assert result.stop_reason == "final_answer"
    first, second = by_name(exporter.get_finished_spans(), "invoke_agent toolcall")
    assert_resumes(second, first)


async def test_a_run_resumed_from_its_checkpoint_in_a_new_process_continues_the_trace(
    exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    journal, copy = tmp_path / "run.checkpoint", tmp_path / "copied.checkpoint"
    script = f"""
import asyncio, json, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import agentfsm
from agentfsm import Terminate, ToolCallAgent
from test_telemetry import ADD_THEN_TERMINATE, add, scripted

async def main():
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    agentfsm.instrument(provider)
    llm = scripted(*ADD_THEN_TERMINATE[1:])
    agent = ToolCallAgent(llm=llm, tools=[add, Terminate()], require_approval=["add"])
    await agent.resume({str(copy)!r})
    agent.approve()
    result = await agent.resume()
    (span,) = [s for s in memory.get_finished_spans() if s.name.startswith("invoke_agent")]
    links = [f"{{l.context.trace_id:032x}}-{{l.context.span_id:016x}}" for l in span.links]
    print(json.dumps({{"stop": result.stop_reason, "trace": f"{{span.context.trace_id:032x}}",
                      "parent": f"{{span.parent.span_id:016x}}", "links": links,
                      "resumed": span.attributes.get("agentfsm.run.resumed")}}))

asyncio.run(main())
"""
    agent = ToolCallAgent(
        llm=scripted(*ADD_THEN_TERMINATE), tools=[add, Terminate()], require_approval=["add"]
    )
    paused = await agent.run("add, once approved", checkpoint=journal)
    assert paused.paused
    shutil.copyfile(journal, copy)  # the journal as another machine would have it (this one holds its lease)
    first = only(exporter.get_finished_spans(), "invoke_agent toolcall")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert first.context is not None
    assert seen["stop"] == "terminated" and seen["resumed"] is True
    assert seen["trace"] == f"{first.context.trace_id:032x}"  # one trace over both processes
    assert seen["parent"] == f"{first.context.span_id:016x}"
    assert seen["links"] == [f"{first.context.trace_id:032x}-{first.context.span_id:016x}"]


async def test_a_flow_paused_for_its_agent_ends_both_spans_and_resumes_in_the_same_trace(
    exporter: InMemorySpanExporter,
) -> None:
    planner = scripted(create("[coder] add"), reply("summary"), model="openai/planner")
    coder = ToolCallAgent(
        llm=scripted(*ADD_THEN_TERMINATE), tools=[add, Terminate()], name="coder", require_approval=["add"]
    )
    flow = PlanningFlow(agents={"coder": coder}, planner_llm=planner)
    paused = await flow.execute("build it")
    assert paused.paused and flow.fsm_state == "AWAITING_AGENT"
    spans = exporter.get_finished_spans()
    workflow, agent = only(spans, "invoke_workflow planning"), only(spans, "invoke_agent coder")
    assert parent_id(agent) == span_id(workflow)
    assert (workflow.attributes or {})["agentfsm.run.paused_in"] == "AWAITING_AGENT"
    assert (workflow.attributes or {})["agentfsm.stop_reason"] == "awaiting_approval"
    assert (agent.attributes or {})["agentfsm.run.paused_in"] == "AWAITING_APPROVAL"
    flow.approve()
    result = await flow.resume()
    assert result.ok
    spans = exporter.get_finished_spans()
    workflows, agents = by_name(spans, "invoke_workflow planning"), by_name(spans, "invoke_agent coder")
    assert len(workflows) == len(agents) == 2
    assert_resumes(workflows[1], workflows[0])
    assert_resumes(
        agents[1], agents[0], parent=workflows[1]
    )  # the agent's new span: under the flow's new one
    assert {s.context.trace_id for s in spans if s.context} == {
        workflow.context.trace_id if workflow.context else 0
    }


class SpanInsideTheCall:
    """A model whose call opens a span of its own, as an instrumented HTTP client under a model
    does; `stream`: it streams (a sink takes the pieces)."""

    token_budget = None
    model = "openai/inner"

    def __init__(self, tracer: trace.Tracer, *, stream: bool = False) -> None:
        self.tracer, self.stream, self.calls = tracer, stream, 0

    async def ask_tool(self, messages: Any, *, sink: Any = None, **kwargs: Any) -> Any:
        self.calls += 1
        with self.tracer.start_as_current_span("inside the call"):
            await asyncio.sleep(0)
            if sink is not None:
                sink.text("do", 1)
                sink.text("ne", 1)
        from agentfsm.model.base import LLMResponse, Usage

        return LLMResponse(content="done", usage=Usage(input_tokens=3, output_tokens=1, llm_calls=1))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_span_opened_inside_a_model_call_is_a_child_of_its_chat_span(
    exporter: InMemorySpanExporter, stream: bool
) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    llm = SpanInsideTheCall(provider.get_tracer("client"), stream=stream)
    result = await ToolCallAgent(llm=llm, tools=[Terminate()]).run("hi")  # type: ignore[arg-type]
    assert (result.output, llm.calls) == ("done", 1)
    spans = exporter.get_finished_spans()
    chat, inner, run = (
        only(spans, "chat inner"),
        only(spans, "inside the call"),
        only(spans, "invoke_agent toolcall"),
    )
    assert parent_id(inner) == span_id(chat) and parent_id(chat) == span_id(run)
    assert (chat.start_time or 0) <= (inner.start_time or 0) <= (inner.end_time or 0) <= (chat.end_time or 0)
    assert dict(chat.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "inner",
        "gen_ai.usage.input_tokens": 3,
        "gen_ai.usage.output_tokens": 1,
    }
    assert trace.get_current_span() is trace.INVALID_SPAN


async def test_each_http_attempt_of_a_retried_call_is_a_child_of_its_one_chat_span(
    exporter: InMemorySpanExporter, llmock: Any
) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("http client")

    class Instrumented(OpenAICompatible):
        """The native adapter with each HTTP request in a span, as an instrumented aiohttp makes."""

        async def _post(self, session: Any, payload: bytes) -> dict[str, Any]:
            with tracer.start_as_current_span("POST", kind=SpanKind.CLIENT):
                return await super()._post(session, payload)

    llmock.fail(503, times=1)
    llmock.reply("The answer is 42.")
    model = Instrumented(
        model="openai/test-model", api_base=llmock.base_url("openai"), api_key="k", backoff_base=0.01
    )
    try:
        result = await ToolCallAgent(llm=model, tools=[Terminate()]).run("the answer?")
    finally:
        await model.aclose()
    assert result.output == "The answer is 42."
    spans = exporter.get_finished_spans()
    chat, posts = only(spans, "chat test-model"), by_name(spans, "POST")
    assert len(posts) == 2 and {parent_id(p) for p in posts} == {span_id(chat)}  # one span a logical call
    assert [p.status.status_code for p in posts] == [StatusCode.ERROR, StatusCode.UNSET]
    assert chat.status.status_code is StatusCode.UNSET
    assert (chat.start_time or 0) <= min(p.start_time or 0 for p in posts)
    assert max(p.end_time or 0 for p in posts) <= (chat.end_time or 0)


async def test_a_run_cancelled_during_a_model_call_ends_its_chat_span_in_error(
    exporter: InMemorySpanExporter,
) -> None:
    asked = asyncio.Event()

    class Waiting:
        token_budget = None
        model = "openai/slow"

        async def ask_tool(self, messages: Any, **kwargs: Any) -> Any:
            asked.set()
            await asyncio.sleep(60)

    task = asyncio.create_task(ToolCallAgent(llm=Waiting(), tools=[Terminate()]).run("wait"))  # type: ignore[arg-type]
    await asked.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    spans = exporter.get_finished_spans()
    chat, run = only(spans, "chat slow"), only(spans, "invoke_agent toolcall")
    assert parent_id(chat) == span_id(run)
    assert (
        chat.status.status_code is StatusCode.ERROR and (chat.attributes or {})["error.type"] == "cancelled"
    )
    assert (run.attributes or {})["agentfsm.stop_reason"] == "cancelled"
    assert trace.get_current_span() is trace.INVALID_SPAN


async def test_spans_follow_the_tables_roles_not_the_class(exporter: InMemorySpanExporter) -> None:
    """A tool-calling agent whose table adds a phase that produces `Payload.PLAN` (it asks its model
    for a plan before acting) runs as a workflow with a ``plan`` span around that phase's call:
    what the spans say comes from the table, as for `PlanningFlow`, whatever the class."""
    from agentfsm import Edge, Payload, StateSpec
    from agentfsm.agent.table import AGENT_TABLE

    async def plan_ahead(agent: Any) -> None:
        await agent.ask_model(agent.llm, agent.memory.view(), (), (), "none")

    start = AGENT_TABLE.edge("IDLE", "THINKING")
    planning = StateSpec(
        "PLANNING_AHEAD", "RUNNING", plan_ahead, "planned", produces=frozenset({Payload.PLAN})
    )

    class Planning(ToolCallAgent):
        table = AGENT_TABLE.extend(  # the run starts by planning
            states=[planning],
            edges=[
                Edge("start", "IDLE", "PLANNING_AHEAD", effect=start.effect),
                Edge("planned", "PLANNING_AHEAD", "THINKING"),
            ],
            before=start,
        )

    agent = Planning(
        llm=scripted(reply("first, add"), *ADD_THEN_TERMINATE), tools=[add, Terminate()], name="planner"
    )
    result = await agent.run("add")
    assert result.stop_reason == "terminated"
    spans = exporter.get_finished_spans()
    workflow, plan = only(spans, "invoke_workflow planner"), only(spans, "plan planner")
    assert parent_id(plan) == span_id(workflow)
    chats = [s for s in spans if s.name.startswith("chat")]
    assert [parent_id(s) for s in chats] == [span_id(plan), span_id(workflow), span_id(workflow)]
