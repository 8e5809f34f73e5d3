"""A run's OpenTelemetry spans, kept in memory, and its log lines as JSON."""

import asyncio
import logging
import sys

import structlog
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from structlog.typing import EventDict

import agentfsm
from agentfsm import Terminate, ToolCallAgent, tool
from agentfsm.testing import ScriptedLLM, reply


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def script() -> ScriptedLLM:
    return ScriptedLLM(
        [
            reply(tool_calls=[("add", {"a": 2, "b": 3})]),
            reply("5", tool_calls=[("terminate", {"status": "success"})]),
        ]
    )


def without_timing(logger: object, name: str, event: EventDict) -> EventDict:
    """Drop the one field that differs between runs, so this page's output stays the same."""
    event.pop("duration_ms", None)
    return event


async def main() -> None:
    # Spans: an in-memory exporter here; in an application, OTLP and a BatchSpanProcessor.
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = agentfsm.instrument(provider)  # every run started from now on, in this process

    # Logs: the library only emits; the application adds a handler to the `agentfsm` logger.
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                without_timing,
                structlog.processors.JSONRenderer(),
            ]
        )
    )
    library = logging.getLogger("agentfsm")
    library.addHandler(handler)
    library.setLevel(logging.INFO)  # a line per transition; DEBUG adds each model call

    agent = ToolCallAgent(llm=script(), tools=[add, Terminate()], name="adder")
    await agent.run("what is 2 + 3?", run_id="run-1")
    library.removeHandler(handler)
    tracing.uninstrument()  # new runs are no longer traced

    for span in exporter.get_finished_spans():
        attributes = span.attributes or {}
        shown = {
            key: attributes[key]
            for key in ("gen_ai.tool.name", "gen_ai.usage.input_tokens", "agentfsm.stop_reason")
            if key in attributes
        }
        print(span.name, span.kind.name, shown)
    run_span = exporter.get_finished_spans()[-1]
    for event in run_span.events:
        if event.name == "agentfsm.transition":
            attributes = event.attributes or {}
            edge = [attributes[f"agentfsm.transition.{key}"] for key in ("source", "dest")]
            guards = attributes.get("agentfsm.transition.guards", "")
            print(" ", edge[0], "->", edge[1], *([guards] if guards else []))


asyncio.run(main())
