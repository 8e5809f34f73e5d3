"""The benchmark compares like with like: every runner does the same task, and the report reads them.

`tools/bench.py` has no timing assertions (CI runs it only to keep it working);
these tests check what its numbers stand for: each framework's runner asks for
the same tool calls, runs them, and ends with the same answer.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import bench
import bench_peers
import bench_sandbox
import bench_stream


def _answer(output: Any) -> str:
    """The final answer, from a runner's output (LangGraph's is its final state)."""
    if isinstance(output, dict):
        return str(output["messages"][-1].content)
    return str(output)


@pytest.mark.parametrize("framework", sorted(bench_peers.FRAMEWORKS))
@pytest.mark.parametrize("n_calls", [1, 9])
async def test_every_runner_runs_the_calls_then_answers(
    framework: str, n_calls: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[int, int]] = []

    def add(a: int, b: int) -> int:
        """Add two integers."""
        calls.append((a, b))
        return a + b

    seen: list[int] = []  # how many messages agentfsm's model was shown, turn by turn
    make_model = bench_peers.agentfsm_model

    def counting_model(n_calls: int, final: str = "answer") -> Any:
        llm = make_model(n_calls, final)
        decide = llm.fn
        llm.fn = lambda request: seen.append(len(request.messages)) or decide(request)
        return llm

    monkeypatch.setattr(bench_peers, "add", add)
    monkeypatch.setattr(bench_peers, "agentfsm_model", counting_model)
    runner = bench_peers.FRAMEWORKS[framework](n_calls)
    if runner is None:
        pytest.fail(f"{framework} is not installed; `tools/dev-env` installs the bench extra")
    shown = []
    for _ in range(2):
        calls.clear()
        seen.clear()
        assert _answer(await runner("add some numbers")) == "done"
        if framework != "agentfsm engine alone":  # its phases run no tool, by design
            assert calls == [(i, 1) for i in range(n_calls)]
        shown.append(list(seen))
    # A reused agent starts again from an empty conversation: the model sees the same turns.
    assert shown[0] == shown[1]
    if framework in ("agentfsm", "agentfsm, one agent", "guarantees, no engine"):
        assert shown[0] == [1 + 2 * turn for turn in range(n_calls + 1)]


def test_the_report_reads_every_runner_and_any_subset_of_sections() -> None:
    runs = {name: 10.0 * (i + 1) for i, name in enumerate(bench_peers.FRAMEWORKS)}
    trigger = {"agentfsm": 1.0, "transitions": 11.0}
    data = {"overhead": {"missing": [], "tool_call_run": runs, "ten_step_run": runs, "trigger_us": trigger}}
    table = bench.report(data)
    assert table.startswith("Overhead per run")
    one_run = runs["agentfsm"]
    assert (
        "a trigger: 1.00 µs (transitions' generic Event.trigger and Transition.execute: 11.00); a one-call "
        f"run fires 7, so firing through them would add 70 µs, {70 / one_run:.0%} of agentfsm's run"
    ) in table
    for name in bench_peers.FRAMEWORKS:
        assert f"\n{name} " in table
    floors = runs["agentfsm engine alone"] + runs["guarantees, no engine"]
    assert f"the two floors together: {floors:.1f} µs" in table
    assert "One step as history grows" not in table
    data["history"] = {"step_us": {"10 messages": 1.0, "10000 messages": 1.1}, "ratio_10000_to_10": 1.1}
    assert "ratio 10,000 : 10 = 1.10" in bench.report(data)
    assert "Recording" not in bench.report(data)
    growth = {"steps": 10, "messages": 21, "history_bytes": 3_000, "trace_bytes": 21_000,
              "trace_bytes_per_message": 1000.0, "trace_to_history": 7.0,
              "checkpoint_bytes": 63_000, "checkpoint_bytes_per_message": 3000.0}  # fmt: skip
    data["recording"] = {
        "step_us": {"10 messages": 1500.0, "10000 messages": 1800.0},
        "ratio_10000_to_10": 1.2,
        "growth": [growth],
    }
    table = bench.report(data)
    assert table.index("One step as history grows") < table.index("Recording: one step") < len(table)
    assert "ratio 10,000 : 10 = 1.20" in table
    assert (
        "     10        21       3,000      21,000       1000           7.00        63,000       3000"
        in table
    )
    data["recording"]["concurrent"] = {
        "runs": 50,
        "steps": 5,
        "rounds": 7,
        "plain": {"wall_s": 0.015, "worst_stall_ms": 9.5, "worst_round_stall_ms": 12.0},
        "checkpointed": {"wall_s": 0.4, "worst_stall_ms": 20.0, "worst_round_stall_ms": 31.0},
    }
    table = bench.report(data)
    assert "50 concurrent runs of 5 steps in one event loop, 7 rounds alternating" in table
    assert "  checkpointed       0.400 s      20.0 ms      31.0 ms" in table
    assert "goal: checkpointed stall <= 10 ms: 20.0 ms, not met (plain runs beside it: 9.5 ms)" in table


async def test_the_concurrent_rounds_alternate_plain_and_checkpointed_runs(tmp_path: Path) -> None:
    from agentfsm import Terminate, ToolCollection, tool

    tools = ToolCollection(tool(bench_peers.add), Terminate())
    figures = await bench.concurrent_rounds(tools, 2, tmp_path)
    assert figures["rounds"] == 2 and figures["runs"] == 50
    for name in ("plain", "checkpointed"):
        assert 0 < figures[name]["worst_stall_ms"] <= figures[name]["worst_round_stall_ms"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0", "1"]
    assert len(list((tmp_path / "0").glob("concurrent-*.checkpoint"))) == 50


async def test_the_recording_section_times_whole_recorded_steps_and_sizes_growing_runs(
    tmp_path: Path,
) -> None:
    """A recorded step is think, act and observe, with every checkpoint and trace record they write;
    a growth run keeps its whole history in memory, so trace and history grow together."""
    from agentfsm import Terminate, ToolCallAgent, ToolCollection, tool
    from agentfsm.recording.checkpoint import read_checkpoint

    tools = ToolCollection(tool(bench_peers.add), Terminate())
    agent = ToolCallAgent(
        llm=bench.endless_model(), tools=tools, memory=bench.filled_memory(10), max_steps=99
    )
    run = bench.RecordedRun(agent, tmp_path)
    for _ in range(3):  # the start edge, then two whole steps
        await run.step()
    assert (agent.fsm_state, agent.current_step) == ("THINKING", 3)
    journal = (tmp_path / "run.checkpoint").read_text().splitlines()
    assert len(journal) == 1 + 1 + 2 * 5  # the header, the start, five writes a step
    await run.close()
    assert read_checkpoint(tmp_path / "run.checkpoint")["run_state"]["state"] == "ERROR"  # closed: cancelled
    assert (tmp_path / "run.jsonl").read_text().count('"kind": "llm"') == 2

    small, large = [await bench._trace_growth(tools, steps, tmp_path) for steps in (3, 12)]
    assert (small["steps"], small["messages"], large["messages"]) == (3, 7, 25)
    assert small["trace_bytes"] < large["trace_bytes"] and small["history_bytes"] < large["history_bytes"]
    assert large["trace_bytes_per_message"] < 1.5 * small["trace_bytes_per_message"]  # linear, not worse

    figures = await bench.concurrent_checkpointed(tools, 3, 2, tmp_path)
    assert figures["wall_s"] > 0 and figures["worst_stall_ms"] > 0
    assert len(list(tmp_path.glob("concurrent-*.checkpoint"))) == 3


# -- the HTTP section ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fast_base() -> Any:
    """The benchmark's fast server in its own process (stopped after the module's tests)."""
    import bench_http

    with bench_http.fast_server() as base:
        assert base.startswith("http://127.0.0.1:")
        yield base


@pytest.mark.http
async def test_the_fast_server_asks_for_one_call_then_answers(fast_base: str) -> None:
    from agentfsm import LLM, ToolCallAgent, ToolCollection, tool

    calls: list[tuple[int, int]] = []

    def add(a: int, b: int) -> int:
        """Add two integers."""
        calls.append((a, b))
        return a + b

    llm = LLM("openai/bench-model", api_base=fast_base, api_key="bench")
    result = await ToolCallAgent(llm=llm, tools=ToolCollection(tool(add)), next_step_prompt=None).run("add")
    assert (result.stop_reason, result.output, calls) == ("final_answer", "done", [(1, 2)])
    assert (result.usage.llm_calls, result.usage.input_tokens) == (2, 40)


@pytest.mark.http
async def test_the_http_section_measures_every_client_and_every_model(fast_base: str) -> None:
    import bench_http

    async with bench_http.callers(fast_base) as calls:
        assert {"bare aiohttp", "openai SDK", "LLM (litellm)"} <= set(calls)
        assert ("OpenAICompatible" in calls) == (bench_http.native_class() is not None)
        for call in calls.values():
            figures = await bench_http.cpu_per_request(call, 3, 6)
            assert figures["requests"] == 6 and figures["cpu_ms"] > 0 and figures["wall_ms"] > 0
    runs = await bench_http.concurrent_runs(fast_base, 5)
    assert runs["failed"] == {} and runs["to_bare"]["bare aiohttp"] == 1.0
    assert set(runs["wall_s"]) == {"bare aiohttp", *bench_http.models(fast_base)}
    fresh = bench_http.fresh_processes(fast_base, quick=True)  # a first call, and `agentfsm run`, exit 0
    assert "s" in fresh["first_call"]["LLM (litellm)"] and "s" in fresh["cli_run"], fresh


def test_the_http_table_states_each_goal_and_says_what_is_not_available() -> None:
    def level(cpu_ms: float) -> dict[str, dict[str, float]]:
        return {str(c): {"cpu_ms": cpu_ms, "wall_ms": 1.0, "requests": 10} for c in (1, 100, 1000)}

    runs = {"bare aiohttp": 1.0, "LLM (litellm)": 10.0}
    data: dict[str, Any] = {
        "pinned": True,
        "native": "not available",
        "cpu_per_request": {
            "bare aiohttp": level(0.2),
            "openai SDK": level(2.0),
            "LLM (litellm)": level(5.0),
        },
        "concurrent_runs": {"runs": 1000, "wall_s": dict(runs), "to_bare": dict(runs), "failed": {}},
        "check_step": {
            "step_ms": {f"{n} messages": {"on": 1.05, "off": 1.0} for n in (10, 1000, 10000)},
            "ratio_on_to_off": {f"{n} messages": 1.05 for n in (10, 1000, 10000)},
        },
        "first_call": {
            "LLM (litellm)": {"s": 3.0, "samples": 1},
            "OpenAICompatible": {"error": "not available"},
        },
        "cli_run": {"s": 4.2, "samples": 1},
    }
    table = bench.report({"http": data})
    assert table.startswith("The model path over HTTP (fast loopback server, client and server pinned")
    assert "  LLM (litellm) / bare aiohttp: 25.0x / 25.0x / 25.0x" in table
    assert "goal: native CPU per request / bare aiohttp at c=1 <= 2x: not available" in table
    assert "goal: LLM: a step with the check / without at 10,000 messages <= 1.1x: 1.05x, met" in table
    assert "goal: a trivial `agentfsm run` <= 0.7 s: 4.20 s, NOT met" in table
    data["cpu_per_request"]["OpenAICompatible"] = level(0.3)
    data["concurrent_runs"]["to_bare"]["OpenAICompatible"] = 1.5
    data["concurrent_runs"]["wall_s"]["OpenAICompatible"] = 1.5
    data["first_call"]["OpenAICompatible"] = {"s": 0.4, "samples": 1}
    for n in (10, 1000, 10000):
        data["check_step"]["step_ms"][f"{n} messages"].update({"native on": 1.2, "native off": 1.0})
    data["check_step"]["native_ratio_on_to_off"] = {f"{n} messages": 1.2 for n in (10, 1000, 10000)}
    table = bench.report({"http": data})
    assert "goal: native: a step with the check / without at 10,000 messages <= 1.1x: 1.20x, NOT met" in table
    assert "goal: native CPU per request / bare aiohttp at c=1,000 <= 2x: 1.50x, met" in table
    assert "goal: native 1,000 runs / bare loop <= 2x: 1.50x, met" in table
    assert "goal: native first call <= 0.5 s: 0.40 s, met" in table
    json.dumps(data)  # what --json prints


@pytest.mark.http
async def test_the_native_model_is_measured_once_its_module_imports(
    fast_base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Standing in for `OpenAICompatible` (same constructor): `LLM`, named by the section's `NATIVE`."""
    import bench_http

    monkeypatch.setattr(bench_http, "NATIVE", ("agentfsm.model.llm", "LLM"))
    async with bench_http.callers(fast_base) as calls:
        assert bench_http.NATIVE_NAME in calls
        figures = await bench_http.cpu_per_request(calls[bench_http.NATIVE_NAME], 2, 4)
    assert figures["requests"] == 4
    runs = await bench_http.concurrent_runs(fast_base, 3)
    assert runs["failed"] == {} and bench_http.NATIVE_NAME in runs["to_bare"]


def test_the_sandbox_table_states_the_goals_and_says_why_docker_is_missing() -> None:
    def kind(ms: float) -> dict[str, dict[str, float]]:
        rows = ("start", "close", "python_execute", "bash", "first_python_execute", "first_bash")
        rows += ("run_keep_alive_off", "run_keep_alive_on")
        return {row: {"p50_ms": ms, "p95_ms": 2 * ms, "n": 5} for row in rows}

    data: dict[str, Any] = {"goals": bench_sandbox.GOALS, "docker": kind(20.0), "local": kind(1.0)}
    table = bench.report({"sandbox": data})
    assert table.startswith("The sandbox (ms, p50 / p95")
    assert "  python_execute               20.0 /   40.0        1.0 /    2.0" in table
    assert "  first python_execute         20.0 /   40.0        1.0 /    2.0" in table
    assert "goal: docker python_execute p50 <= 15 ms: 20.0 ms, NOT met" in table
    assert "goal: docker start p50 <= 250 ms: 20.0 ms, met" in table
    del data["docker"]
    data["docker_skipped"] = "cannot reach the Docker engine at unix:///var/run/docker.sock"
    table = bench.report({"sandbox": data})
    assert "docker: skipped, no Docker sandbox here: cannot reach the Docker engine" in table
    assert "goal:" not in table and "  bash                          1.0 /    2.0" in table
    json.dumps(data)  # what --json prints


async def test_the_telemetry_section_measures_each_variant_and_counts_the_spans(monkeypatch) -> None:
    import bench_otel

    from agentfsm import ToolCallAgent, ToolCollection, tool

    tools = ToolCollection(tool(bench_peers.add))

    async def one_run() -> None:
        await ToolCallAgent(llm=bench_peers.agentfsm_model(1), tools=tools, next_step_prompt=None).run("add")

    figures = await bench_otel._measure(one_run, rounds=2, batch=3)
    assert set(figures["us"]) == set(bench_otel.VARIANTS) and figures["ratio"]["not instrumented"] == 1.0
    # invoke_agent, two chats, execute_tool: what both processors exported; nothing is left installed
    assert figures["spans_per_run"] == {"batch processor": 4.0, "simple processor": 4.0, "SDK by hand": 4.0}
    assert figures["ratio"]["SDK by hand"] > 1.0  # the floor, measured on the path: the run, then its spans
    from agentfsm.run.observers import observers_of

    assert observers_of(None) == ()
    parts = await bench_otel._breakdown(20)
    assert (parts["spans"], parts["events_per_run"]) == (4, 5)
    assert parts["noop"] > 0 and parts["sdk"] > 0 and parts["by_hand"] > 0 and "export" in parts
    assert observers_of(None) == ()


def test_the_telemetry_table_states_the_goal_per_http_model_beside_the_floor_on_that_path() -> None:
    def path(base: float, batch: float, by_hand: float, again: float | None = None) -> dict:
        us = {"not instrumented": base, "batch processor": batch, "simple processor": batch * 1.1,
              "after uninstrument()": again or base, "SDK by hand": by_hand}  # fmt: skip
        return {
            "us": us,
            "ratio": {k: v / base for k, v in us.items()},
            "spans_per_run": {"simple processor": 4},
        }

    data = {
        "paths": {
            "in process": path(80, 280, 250),
            "LLM (litellm)": path(10_000, 10_150, 10_120, again=10_500),
            "OpenAICompatible": path(900, 1_200, 1_100),
            "OpenAICompatible, 20 ms": path(43_000, 43_600, 43_500),
        },
        "hook_ns": 120,
        "breakdown": {
            "events": 30.0,
            "noop": 30.0,
            "sdk": 150.0,
            "by_hand": 130.0,
            "export": 50.0,
            "spans": 4,
            "events_per_run": 5,
        },
    }
    table = bench.report({"telemetry": data})
    assert table.startswith("OpenTelemetry instrumentation")
    assert "instrumentation's own cost: 200 µs a run (batch)" in table and "120 ns a run" in table
    assert "SDK by hand / not" in table
    assert "the same 4 spans and 5 events by hand 180; agentfsm's part over it 50" in table
    assert (
        "goal: LLM (litellm): instrumented / not, HTTP path <= 1.02x: 1.015x, met;"
        " the SDK alone making the same spans on this path: 1.012x;"
        " the same code measured twice differs by 1.050x here: noise over the goal\n" in table
    )
    assert (
        "goal: OpenAICompatible: instrumented / not, HTTP path <= 1.02x: 1.333x, NOT met;"
        " the SDK alone making the same spans on this path: 1.222x (the floor alone is over the goal)"
        in table
    )
    assert "goal: OpenAICompatible, 20 ms: instrumented / not, HTTP path <= 1.02x: 1.014x, met;" in table
    assert table.count("noise over the goal") == 1


@pytest.mark.http
async def test_the_stream_section_reads_every_delta_through_each_client_and_the_table_says_so() -> None:
    data = await bench_stream.stream(quick=True, deltas=300)

    clients = data["clients"]
    assert list(clients) == ["OpenAICompatible", "LLM (litellm)", "bare litellm stream"]
    assert all(figures["text_chars"] == 300 for figures in clients.values())
    table: list[str] = []
    bench_stream.lines(data, table)
    assert table[0] == "Streaming: one reply of 300 deltas, one call per client"
    assert "over bare litellm (its floor)" in table[-1]


def test_the_mcp_section_sets_the_sdk_beside_agentfsm_for_each_size() -> None:
    data = {"mcp": {"results": {"50 MB": {"sdk_s": 16.5, "agentfsm_s": 1.5, "kept_chars": 200_066}}}}
    table = bench.report(data)
    assert table.startswith("An MCP stdio result of one long line")
    assert "  50 MB       16.50      1.50   11.0x     200,066" in table


async def test_the_embed_section_measures_managed_runs_events_and_a_restart_and_reports_the_goals() -> None:
    """A few runs of each part of `--only embed` (`tools/bench_embed.py`), against the fast server."""
    import bench_embed

    with bench_embed.fast_server() as base, tempfile.TemporaryDirectory() as scratch:
        from agentfsm import OpenAICompatible

        model = OpenAICompatible(bench_embed.MODEL, api_base=base, api_key="bench")
        try:
            assert await bench_embed._by_hand(model, 5, Path(scratch, "hand")) > 0
            assert await bench_embed._managed(model, 5, Path(scratch, "runs")) > 0
            gaps = await bench_embed._latency(model, 5, Path(scratch, "latency"))
            assert len(gaps) == 5 * 11 and all(gap >= 0 for gap in gaps)  # every event, each read once
            floor = await bench_embed._latency_floor(model, 5, Path(scratch, "floor"))
            assert len(floor) == 5 * 11 and all(gap >= 0 for gap in floor)  # the same events, by hand
            assert await bench_embed._restart(model, 5, Path(scratch, "restart")) > 0
        finally:
            await model.aclose()
    figures: dict[str, Any] = {"runs": 5, "rounds": 1, "by_hand_s": 1.0, "managed_s": 1.5, "ratio": 1.5}
    figures |= {"events": 55, "event_latency_p50_ms": 1.0, "event_latency_p95_ms": 30.0, "restart_s": 0.5}
    figures |= {"model_time_s": 0.2, "paced_event_latency_p50_ms": 1.0, "paced_event_latency_p95_ms": 3.0}
    figures |= {"floor_latency_p50_ms": 0.9, "floor_latency_p95_ms": 28.0}
    figures |= {"paced_floor_latency_p50_ms": 0.8, "paced_floor_latency_p95_ms": 2.5}
    table = bench.report({"embed": figures})
    assert "(1.50x, goal <= 1.2: NOT met)" in table
    assert "at once: p50 / p95  1.00 / 30.00 ms over 55 events (goal p95 <= 20 ms: NOT met)" in table
    assert "a model of 0.2 s: p50 / p95  1.00 / 3.00 ms over 55 events (goal p95 <= 20 ms: met)" in table
    assert "all back with their calls: 0.500 s (goal <= 2 s: met)" in table
    assert "a plain queue and reader a run: p50 / p95  0.90 / 28.00 ms" in table  # the floor


async def test_the_ui_section_opens_a_trace_of_the_size_asked_for_and_reports_the_goal() -> None:
    """`--only ui` (`tools/bench_ui.py`) on a small trace: the run it records has the transitions
    its figure names, the page opens it and reaches its end, a live run's transitions are each
    timed, a durable database's list is opened, and the report says whether the goals held."""
    from browser_support import require_chromium

    require_chromium()
    import bench_ui
    from playwright.async_api import async_playwright

    from agentfsm.browser.settings import DEFAULT_EXECUTABLE

    with tempfile.TemporaryDirectory() as scratch:
        count = await bench_ui._trace(Path(scratch), 50)
        lines = (Path(scratch) / "run.jsonl").read_text().splitlines()
        assert count == 50 == sum('"kind": "transition"' in line for line in lines)
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=DEFAULT_EXECUTABLE)
            try:
                opened, to_the_end = await bench_ui._open(browser, Path(scratch), count)
            finally:
                await browser.close()
        async with async_playwright() as playwright:  # a run followed live, each transition timed
            browser = await playwright.chromium.launch(executable_path=DEFAULT_EXECUTABLE)
            try:
                live = await bench_ui._live(browser, Path(scratch))
                db = await bench_ui._database(Path(scratch), 3)  # a durable database's list
                listed = await bench_ui._listed(browser, db)
            finally:
                await browser.close()
    assert opened > 0 and to_the_end > 0
    assert 0 < len(live) <= 3 * bench_ui.LIVE_STEPS + 2 and all(gap > 0 for gap in live)
    figures: dict[str, Any] = {"transitions": 10_001, "trace_bytes": 6_800_000, "rounds": 5}
    figures |= {"open_s": 1.2, "to_the_end_s": 2.0, "live_transitions": 30}
    assert listed > 0
    figures |= {"live_p50_ms": 20.0, "live_p95_ms": 60.0, "live_max_ms": 120.0}
    figures |= {"database_runs": 10_000, "database_list_s": 0.4}
    table = bench.report({"ui": figures | {"goals": {"open_s": 1.0, "live_ms": 100.0, "list_s": 1.0}}})
    assert "Inspector: a trace of 10001 transitions (6.8 MB), in Chromium, median of 5" in table
    assert "goal: opens in under 1 s: NOT met" in table
    live_line = (
        "p50 / p95 / max 20.0 / 60.0 / 120.0 ms over 30 transitions (goal: each within 100 ms: NOT met)"
    )
    assert live_line in table
    assert "a durable database of 10000 runs, its list shown    0.400 s (goal: under 1 s: met)" in table
