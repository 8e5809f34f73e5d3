"""The benchmark's telemetry section: what OpenTelemetry instrumentation costs a run, side by side.

Each figure is the median µs of a one-call run (``add``, then the answer), in
interleaved rounds of batches, with the instrumentation installed before each
batch of the instrumented variant and removed after it:

- ``not instrumented``: nothing installed (the engine builds no event when nobody
  listens); ``after uninstrument()``: opentelemetry loaded, instrumentation
  installed once and removed, so the run is back to no cost at all;
- ``batch processor`` and ``simple processor``: `agentfsm.instrument()` into the SDK's
  in-memory exporter, through the batch processor an application configures (spans exported
  on the SDK's own thread) and through the simple one (each span exported as it ends);
- in process (a scripted model), so the instrumentation's own µs a run shows, and on the
  HTTP path (`LLM` and the native `OpenAICompatible` against `fast_server`, as the HTTP
  section runs them, two model calls a run), where its share of a real run shows.

The goal (issue 18): instrumented (batch processor) / not instrumented <= 1.02 on the HTTP path.
"""

from __future__ import annotations

import functools
import gc
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import bench_http
import bench_peers

VARIANTS = ("not instrumented", "batch processor", "simple processor", "after uninstrument()")


async def _measure(run: Callable[[], Awaitable[Any]], rounds: int, batch: int) -> dict[str, Any]:
    """Median µs per run of each variant, in alternating batches. Both processors feed the SDK's
    in-memory exporter: the batch one (what an application configures) exports on its own thread,
    the simple one inside the run, as each span ends."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import agentfsm

    exporter = InMemorySpanExporter()
    providers: dict[str, Any] = {}
    for name, processor in (
        ("batch processor", BatchSpanProcessor),
        ("simple processor", SimpleSpanProcessor),
    ):
        providers[name] = TracerProvider(shutdown_on_exit=False)
        providers[name].add_span_processor(processor(exporter))
    samples: dict[str, list[float]] = {name: [] for name in VARIANTS}
    spans: dict[str, float] = {}
    for warm in range(rounds + 1):
        count = batch if warm else max(3, batch // 4)  # the first round warms caches and connections
        for name in VARIANTS:
            provider = providers.get(name)
            instrumentation = agentfsm.instrument(provider) if provider is not None else None
            gc.collect()
            started = time.perf_counter()
            for _ in range(count):
                await run()
            elapsed = time.perf_counter() - started
            if instrumentation is not None and provider is not None:
                instrumentation.uninstrument()
                provider.force_flush()
                spans[name] = len(exporter.get_finished_spans()) / count
                exporter.clear()
            if warm:
                samples[name].append(elapsed / count * 1e6)
    for provider in providers.values():
        provider.shutdown()
    us = {name: statistics.median(values) for name, values in samples.items()}
    base = us["not instrumented"]
    return {"us": us, "ratio": {name: value / base for name, value in us.items()}, "spans_per_run": spans}


def _hook_ns() -> float:
    """What the engine's hook costs a run with nothing installed: `observers_of` over no observer."""
    from agentfsm.run.observers import observers_of

    count = 200_000
    started = time.perf_counter()
    for _ in range(count):
        observers_of(None)
    return (time.perf_counter() - started) / count * 1e9


def _sdk_floor(count: int) -> dict[str, float]:
    """The SDK's own cost, without agentfsm: a span with six attributes started and ended into the
    in-memory exporter through the batch processor, and an event with four attributes (µs each).
    A one-call run makes four spans and five events: their sum is the floor of any instrumentation."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    tracer = provider.get_tracer("floor")
    attributes = {f"gen_ai.key{i}": "value" for i in range(6)}
    started = time.perf_counter()
    for _ in range(count):
        tracer.start_span("chat model", attributes=attributes).end()
    span_us = (time.perf_counter() - started) / count * 1e6
    event: dict[str, str | int] = {"source": "THINKING", "dest": "ACTING", "trigger": "think_done", "step": 1}
    started = time.perf_counter()
    for _ in range(count // 100):
        holder = tracer.start_span("run")  # a fresh span every 100 events: under the SDK's limit of 128
        for _ in range(100):
            holder.add_event("agentfsm.transition", event)
    event_us = (time.perf_counter() - started) / (count // 100 * 100) * 1e6
    provider.shutdown()
    return {"span_us": span_us, "event_us": event_us}


async def telemetry(quick: bool) -> dict[str, Any]:
    from agentfsm import ToolCallAgent, ToolCollection, tool

    tools = ToolCollection(tool(bench_peers.add))

    async def one_run(llm: Any) -> None:
        result = await ToolCallAgent(llm=llm, tools=tools, next_step_prompt=None).run("add 1 and 2")
        assert result.stop_reason == "final_answer", result

    rounds, batch = (5, 40) if quick else (15, 200)
    paths: dict[str, Any] = {
        "in process": await _measure(functools.partial(one_run, bench_peers.agentfsm_model(1)), rounds, batch)
    }
    with bench_http.fast_server() as base:
        under_test = bench_http.models(base)
        try:
            for name, llm in under_test.items():
                slow = name == "LLM (litellm)"  # ~6 ms of CPU a call: fewer runs say as much
                paths[name] = await _measure(
                    functools.partial(one_run, llm), rounds, batch // 4 if slow else batch
                )
        finally:
            await bench_http.close(under_test)
    return {"paths": paths, "hook_ns": _hook_ns(), "sdk": _sdk_floor(2_000 if quick else 20_000)}


def lines(t: dict[str, Any], out: list[str]) -> None:
    """The section's table, with the goal beside the figures."""
    paths = t["paths"]
    out.append("OpenTelemetry instrumentation: a one-call run (µs, median; spans to the in-memory exporter)")
    out.append(f"  {'':<24}" + "".join(f"{name:>18}" for name in paths))
    for variant in VARIANTS:
        out.append(f"  {variant:<24}" + "".join(f"{p['us'][variant]:>18.1f}" for p in paths.values()))
    for variant in VARIANTS[1:]:
        label = f"{variant} / not"
        out.append(f"  {label:<24}" + "".join(f"{p['ratio'][variant]:>18.3f}" for p in paths.values()))
    local = paths["in process"]
    own = local["us"]["simple processor"] - local["us"]["not instrumented"]
    batch_own = local["us"]["batch processor"] - local["us"]["not instrumented"]
    spans = local["spans_per_run"].get("simple processor", 0)
    out.append(
        f"  instrumentation's own cost: {batch_own:.0f} µs a run (batch), {own:.0f} µs (simple), for"
        f" {spans:.0f} spans; the engine's hook with nothing installed: {t['hook_ns']:.0f} ns a run"
    )
    sdk = t.get("sdk")
    if sdk is not None:
        floor = 4 * sdk["span_us"] + 5 * sdk["event_us"]
        out.append(
            f"  the SDK alone: {sdk['span_us']:.1f} µs a span, {sdk['event_us']:.1f} µs an event;"
            f" a run's 4 spans and 5 events: {floor:.0f} µs"
        )
    for name in paths:
        if name != "in process":
            ratio = paths[name]["ratio"]["batch processor"]
            out.append(bench_http._goal(f"{name}: instrumented / not, HTTP path", ratio, 1.02))
