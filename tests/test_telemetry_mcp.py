"""`agentfsm mcp-serve --otel`: a served run's spans are exported, in the trace of the client that called
it. An instrumented client agent (spans into memory) calls `run_agent` on an instrumented served agent
over real streamable HTTP on 127.0.0.1; the server exports over OTLP/HTTP to a collector on 127.0.0.1,
and both sides' spans are one trace, the served run under the caller's `execute_tool` span."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from telemetry_support import exporter
from test_mcp_serve import _model_flags, _serving_http
from test_telemetry_cli import Collector, attributes

from agentfsm.agent.mcp import MCPAgent
from agentfsm.mcp import MCPServerSettings
from agentfsm.testing import ScriptedLLM, reply

pytestmark = [pytest.mark.http, pytest.mark.usefixtures("clean_env")]

__all__ = ["exporter"]  # the fixture, used by name


@pytest.fixture
def collector() -> Iterator[Collector]:
    receiver = Collector()
    yield receiver
    receiver.close()


async def test_a_served_run_is_exported_in_the_trace_of_the_calling_agent(
    collector: Collector, exporter: InMemorySpanExporter, llmock: Any, clean_env: Path, monkeypatch: Any
) -> None:
    llmock.reply("The answer is 42.")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "served-agent")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    llm = ScriptedLLM(
        [reply(tool_calls=[("mcp_served_run_agent", {"task": "what is the answer?"})]), reply("it says 42")]
    )
    llm.model = "openai/caller"  # type: ignore[attr-defined]
    async with _serving_http([*_model_flags(llmock), "--otel"], clean_env) as (url, process):
        async with MCPAgent(llm=llm, servers={"served": MCPServerSettings(url=url, timeout=30)}) as agent:
            result = await agent.run("ask the served agent")
        process.send_signal(signal.SIGTERM)  # its provider shuts down on the way out: what is left is sent
        assert process.wait(timeout=30) == 0
    assert (result.stop_reason, result.output) == ("final_answer", "it says 42")
    assert "The answer is 42." in (llm.requests[1].messages[-1].content or "")

    (called,) = [s for s in exporter.get_finished_spans() if s.name == "execute_tool mcp_served_run_agent"]
    assert called.context is not None
    served = {span.name: (resource, span) for resource, span in collector.spans()}
    assert {"invoke_agent toolcall", "chat test-model", "tools/call run_agent"} <= set(served)
    resource, run = served["invoke_agent toolcall"]
    _, server = served["tools/call run_agent"]  # the MCP SDK's server span of the call
    _, chat = served["chat test-model"]
    assert resource["service.name"] == "served-agent"
    trace_id = called.context.trace_id.to_bytes(16, "big")
    assert {span.trace_id for span in (server, run, chat)} == {trace_id}  # one trace on both sides
    assert server.parent_span_id == called.context.span_id.to_bytes(8, "big")
    assert server.kind == server.SPAN_KIND_SERVER
    assert run.parent_span_id == server.span_id and chat.parent_span_id == run.span_id
    assert attributes(run)["agentfsm.stop_reason"] == "final_answer"
