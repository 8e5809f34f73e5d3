"""What the telemetry tests share: every run of a test traced into memory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentfsm

__all__ = ["exporter"]  # a fixture: a test module imports it, pytest uses it by name


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Every run of the test traced into memory, each span as it ends; uninstrumented after."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    instrumentation = agentfsm.instrument(provider)
    yield memory
    instrumentation.uninstrument()
    provider.shutdown()
