"""A paused run that is cancelled, as a tracing system shows it: its span ended at the pause, and its
end (the cancel) is the last span of the run, in the same trace, a child of the paused span linked
as the one that ``ends`` it: `cancelled` in ERROR, with the pause it was cancelled in, and never
taken for a resumption. For a run paused in this process, and for one resumed from its checkpoint
by another agent and cancelled there."""

from __future__ import annotations

import shutil
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from telemetry_support import exporter
from test_telemetry import ADD_THEN_TERMINATE, add, by_name, parent_id, scripted, span_id

import agentfsm
from agentfsm import AgentState, StopReason, Terminate, ToolCallAgent

__all__ = ["exporter"]  # the fixture, used by name


def approval_agent() -> ToolCallAgent:
    return ToolCallAgent(
        llm=scripted(*ADD_THEN_TERMINATE), tools=[add, Terminate()], require_approval=["add"]
    )


def assert_ends(end: ReadableSpan, paused: ReadableSpan) -> None:
    """`end` is the cancel of the run whose span `paused` ended at the pause."""
    assert paused.context is not None and end.context is not None
    assert end.name == paused.name == "invoke_agent toolcall"
    assert end.context.trace_id == paused.context.trace_id and parent_id(end) == span_id(paused)
    assert [(link.context.span_id, dict(link.attributes or {})) for link in end.links] == [
        (span_id(paused), {"agentfsm.link": "ends"})
    ]
    attributes = dict(end.attributes or {})
    assert attributes["agentfsm.run.id"] == (paused.attributes or {})["agentfsm.run.id"]
    assert attributes["agentfsm.run.cancelled_in"] == "AWAITING_APPROVAL"
    assert attributes["agentfsm.stop_reason"] == "cancelled"
    assert attributes["error.type"] == "CancelledError"
    assert "agentfsm.run.resumed" not in attributes and "agentfsm.run.paused" not in attributes
    assert end.status.status_code is StatusCode.ERROR
    assert end.status.description == "CancelledError: the paused run was cancelled"
    assert [(e.attributes or {})["agentfsm.transition.trigger"] for e in end.events] == ["cancel"]


async def test_a_paused_run_cancelled_ends_in_a_span_that_ends_the_paused_one(
    exporter: InMemorySpanExporter,
) -> None:
    agent = approval_agent()
    paused = await agent.run("add, once approved")
    assert paused.paused

    result = await agent.cancel()

    assert (result.state, result.stop_reason) == (AgentState.ERROR, StopReason.CANCELLED)
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["chat gpt-4o-mini", "invoke_agent toolcall", "invoke_agent toolcall"]
    first, end = by_name(spans, "invoke_agent toolcall")
    assert (first.attributes or {})["agentfsm.run.paused"] is True  # as it was at the pause
    assert_ends(end, first)
    assert [s for s in spans if parent_id(s) == span_id(end)] == []  # nothing ran: no child
    assert trace.get_current_span() is trace.INVALID_SPAN


async def test_a_run_resumed_from_its_checkpoint_and_cancelled_ends_the_trace_of_its_pause(
    exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    journal, copy = tmp_path / "run.checkpoint", tmp_path / "copied.checkpoint"
    paused = await approval_agent().run("add, once approved", checkpoint=journal)
    assert paused.paused
    shutil.copyfile(journal, copy)  # as another process would find it (this agent holds the lease)
    (first,) = exporter.get_finished_spans()[1:]

    other = ToolCallAgent(
        llm=scripted(*ADD_THEN_TERMINATE[1:]), tools=[add, Terminate()], require_approval=["add"]
    )
    again = await other.resume(copy)
    assert again.paused and len(exporter.get_finished_spans()) == 2  # back in its pause: no span
    result = await other.cancel()

    assert result.stop_reason == StopReason.CANCELLED
    spans = exporter.get_finished_spans()
    assert len(spans) == 3
    assert_ends(spans[-1], first)


async def test_a_paused_run_resumed_is_still_a_resumption_not_an_end(exporter: InMemorySpanExporter) -> None:
    agent = approval_agent()
    await agent.run("add, once approved")
    agent.approve()
    await agent.resume()
    first, second = by_name(exporter.get_finished_spans(), "invoke_agent toolcall")
    assert parent_id(second) == span_id(first)
    assert (second.attributes or {})["agentfsm.run.resumed"] is True
    assert "agentfsm.run.cancelled_in" not in (second.attributes or {})
    assert [dict(link.attributes or {}) for link in second.links] == [{"agentfsm.link": "resumes"}]


async def test_the_cancel_s_span_does_not_repeat_the_request_when_content_is_on() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    instrumentation = agentfsm.instrument(provider, include_content=True)
    try:
        agent = approval_agent()
        await agent.run("add, once approved")
        await agent.cancel()
    finally:
        instrumentation.uninstrument()
        provider.shutdown()
    first, end = by_name(memory.get_finished_spans(), "invoke_agent toolcall")
    assert "add, once approved" in str((first.attributes or {})["gen_ai.input.messages"])
    assert "gen_ai.input.messages" not in (end.attributes or {})
    assert_ends(end, first)
