"""Benchmarks of the engine's own cost, side by side in one process and one run.

    .venv/bin/python tools/bench.py            # full run (several minutes), a table on stdout
    .venv/bin/python tools/bench.py --quick    # under two minutes, smaller counts
    .venv/bin/python tools/bench.py --json     # the numbers as one JSON object (only that on stdout)
    .venv/bin/python tools/bench.py --only http,ui   # some sections, by name (docs/benchmarks.md lists them)

Sections: per-run overhead against a bare loop, LangGraph and pydantic-ai,
with agentfsm's two floors (its engine with phases that do nothing, and its
phases' work fused into one loop without the engine);
the cost of a step as history grows; the cost of recording a step (checkpoint
and trace) as history grows, and how a trace grows with its run; many agents
in one event loop; the model path over HTTP against a fast loopback server of
the benchmark's own (`bench_http`: CPU per request for each client, 1,000
concurrent runs, a step with the token check on and off, the first call in a
fresh process); one reply of 100,000 stream deltas through each client (`bench_stream`:
the native adapter, `LLM`, and bare litellm, its floor); the cost of OpenTelemetry
instrumentation (`bench_otel`: in process and on the HTTP path, spans to an in-memory
exporter, and none without it); start-up time; the sandbox (`bench_sandbox`: start, close,
python_execute and bash warm, docker and local); an MCP stdio result of 5 to 50 MB in one
line (`bench_mcp`: the SDK's stdio client beside agentfsm's).
Medians throughout; frameworks are measured in interleaved rounds, so a
noisy neighbour slows all of them alike. See docs/benchmarks.md: the table, what each number
means, and the goals.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_embed
import bench_http
import bench_mcp
import bench_otel
import bench_peers
import bench_sandbox
import bench_stream
import bench_ui

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
TASK = "add some numbers"


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def interleaved(
    runners: dict[str, Callable[[], Awaitable[Any]]], rounds: int, batch: int
) -> dict[str, float]:
    """Median µs per call for each runner, measured in alternating batches."""
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for run in runners.values():  # warm up: imports, caches, first-call paths
        for _ in range(max(3, batch // 4)):
            await run()
    for _ in range(rounds):
        for name, run in runners.items():
            gc.collect()
            started = time.perf_counter()
            for _ in range(batch):
                await run()
            samples[name].append((time.perf_counter() - started) / batch * 1e6)
    return {name: statistics.median(values) for name, values in samples.items()}


# -- 1. overhead per run --------------------------------------------------------------


async def overhead(quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"missing": []}
    for label, n_calls in (("tool_call_run", 1), ("ten_step_run", 9)):
        runners: dict[str, Callable[[], Awaitable[Any]]] = {}
        for name, factory in bench_peers.FRAMEWORKS.items():
            runner = factory(n_calls)
            if runner is None:
                if name not in out["missing"]:
                    out["missing"].append(name)
                continue
            runners[name] = functools.partial(runner, TASK)
        rounds, batch = (7, 40) if quick else (15, 120)
        if n_calls > 1:
            batch //= 4
        out[label] = await interleaved(runners, rounds, batch)
    out["trigger_us"] = trigger_costs(quick)
    return out


ONE_CALL_TRIGGERS = (
    "start",
    "think_done",
    "act_done",
    "observe_done",
    "think_done",
    "act_done",
    "observe_done",
)
"""The triggers a one-tool-call run fires (the tool call, then `terminate`)."""


def trigger_costs(quick: bool) -> dict[str, float]:
    """µs a trigger, median of rounds alternating: `MachineTable.take` (agentfsm's walk over the lists
    transitions built) beside transitions' generic `Event.trigger` and `Transition.execute` on a
    machine of the same table, the guards as its conditions and the effects as `after` callbacks
    (what `agentfsm.fsm.machine` would be if it fired through them)."""
    from transitions import EventData, Machine

    from agentfsm import ToolCallAgent
    from agentfsm.agent.table import AGENT_TABLE
    from agentfsm.fsm.machine import Edge, Guard
    from agentfsm.messages import ToolCall
    from agentfsm.testing import ScriptedLLM

    table = AGENT_TABLE

    def condition(guard: Guard) -> Callable[[EventData], bool]:
        def check(event: EventData) -> bool:
            held = guard.check(event.model)
            outcomes, _ = event.args  # the lists `theirs` passes
            outcomes.append((guard.name, held))  # the guards evaluated, as `take` returns them
            return held

        return check

    def after(edge: Edge) -> Callable[[EventData], None]:
        def apply(event: EventData) -> None:
            if edge.effect is not None:
                edge.effect.apply(event.model)
            _, taken = event.args
            taken.append(edge)

        return apply

    rows: list[dict[str, Any]] = []
    for edge in table.edges:
        row: dict[str, Any] = {
            "trigger": edge.trigger,
            "source": list(table.sources(edge)),
            "dest": edge.dest,
        }
        row["after"] = [after(edge)]
        if edge.guard is not None:
            row["conditions"] = [condition(edge.guard)]
        rows.append(row)
    generic = Machine(
        model=None,
        states=[state.name for state in table.states],
        initial=table.initial,
        transitions=rows,
        auto_transitions=False,
        send_event=True,
        model_attribute="fsm_state",
    )
    agent = ToolCallAgent(llm=ScriptedLLM([]), max_steps=1_000)
    run = agent.run_state

    def walk(fire: Callable[[str], object]) -> None:
        agent.fsm_state, run.step, run.output = table.initial, 0, None
        run.turn.pending_calls = [ToolCall.create("c1", "add", {"a": 1, "b": 2})]
        for trigger in ONE_CALL_TRIGGERS[:-1]:  # the last needs `terminate`'s result: stop before it
            fire(trigger)

    def ours(trigger: str) -> object:
        return table.take(agent, trigger)

    def theirs(trigger: str) -> object:
        return generic.events[trigger].trigger(agent, [], [])

    rounds, batch = (5, 500) if quick else (15, 2_000)
    seen: dict[str, list[float]] = {"agentfsm": [], "transitions": []}
    for _ in range(rounds):
        for name, fire in (("agentfsm", ours), ("transitions", theirs)):
            began = time.perf_counter()
            for _ in range(batch):
                walk(fire)
            seen[name].append((time.perf_counter() - began) / batch / (len(ONE_CALL_TRIGGERS) - 1) * 1e6)
    return {name: statistics.median(values) for name, values in seen.items()}


# -- 2. history growth ------------------------------------------------------------------


def filled_memory(size: int) -> Any:
    from agentfsm import Memory, Message, ToolCall

    memory = Memory(max_messages=size)
    memory.add_request(Message.user_message("the first request"))
    for i in range((size - 1) // 2):  # full: the request and tool turns of two messages each
        call = ToolCall(id=f"old_{i}", name="add", arguments='{"a": 1, "b": 2}')
        memory.add_message(Message.from_tool_calls([call], f"thinking {i}"))
        memory.add_message(Message.tool_message("3", name="add", tool_call_id=call.id))
    return memory


async def history(quick: bool) -> dict[str, Any]:
    from agentfsm import Terminate, ToolCallAgent, ToolCollection

    tools = ToolCollection(Terminate())
    llm = bench_peers.agentfsm_model(0, final="terminate")
    agents: dict[str, Callable[[], Awaitable[Any]]] = {}
    for size in (10, 1_000, 10_000):
        agent = ToolCallAgent(llm=llm, tools=tools, memory=filled_memory(size), next_step_prompt=None)
        agents[f"{size} messages"] = functools.partial(agent.run, "one more step")
    rounds, batch = (7, 40) if quick else (15, 200)
    per_step = await interleaved(agents, rounds, batch)
    return {"step_us": per_step, "ratio_10000_to_10": per_step["10000 messages"] / per_step["10 messages"]}


# -- 3. recording -------------------------------------------------------------------------


def endless_model() -> Any:
    """A model that always asks for one more `add` call, each with new arguments (so stuck
    detection stays quiet): a run goes on until its `max_steps`, or until it is closed."""
    from agentfsm.messages import ToolCall
    from agentfsm.testing import FunctionLLM, ModelRequest, reply

    count = itertools.count()

    def decide(request: ModelRequest) -> Any:
        n = next(count)
        return reply(f"adding {n}", [ToolCall.create(f"rec_{n}", "add", {"a": n, "b": 1})])

    return FunctionLLM(decide, record=False)


class RecordedRun:
    """One run of `agent` with a checkpoint and a trace in `directory`, advanced a step at a time."""

    def __init__(self, agent: Any, directory: Path) -> None:
        from agentfsm.recording.trace import TraceWriter

        self.writer = TraceWriter(directory / "run.jsonl", agent)
        self.steps: AsyncGenerator[Any, None] = agent.iter(
            "one more step", checkpoint=directory / "run.checkpoint"
        )

    async def step(self) -> None:
        """To the next THINKING: one whole step (think, act, observe) with every write it makes; the
        first call takes the run's start edge only."""
        while (await anext(self.steps)).dest != "THINKING":
            pass

    async def close(self) -> None:
        await self.steps.aclose()
        self.writer.close()


async def recording(quick: bool) -> dict[str, Any]:
    """A checkpointed and traced step at 10 and at 10,000 messages, then traces of growing runs."""
    from agentfsm import Terminate, ToolCallAgent, ToolCollection, tool

    tools = ToolCollection(tool(bench_peers.add), Terminate())
    rounds, batch = (5, 20) if quick else (11, 40)
    sizes = (10, 10_000)
    samples: dict[str, list[float]] = {f"{size} messages": [] for size in sizes}
    with tempfile.TemporaryDirectory() as scratch:
        agents = {
            size: ToolCallAgent(llm=endless_model(), tools=tools, memory=filled_memory(size), max_steps=10**6)
            for size in sizes
        }
        for _ in range(rounds):
            for size, agent in agents.items():
                directory = Path(scratch) / str(size)
                directory.mkdir(exist_ok=True)
                run = RecordedRun(agent, directory)
                await run.step()  # its start edge writes the history whole (trace, journal): not timed
                gc.collect()
                started = time.perf_counter()
                for _ in range(batch):
                    await run.step()
                samples[f"{size} messages"].append((time.perf_counter() - started) / batch * 1e6)
                await run.close()
        growth = [await _trace_growth(tools, steps, Path(scratch)) for steps in (10, 30, 100, 300)]
        concurrent = await concurrent_rounds(tools, 3 if quick else 7, Path(scratch))
    step_us = {name: statistics.median(values) for name, values in samples.items()}
    return {
        "step_us": step_us,
        "ratio_10000_to_10": step_us["10000 messages"] / step_us["10 messages"],
        "growth": growth,
        "concurrent": concurrent,
    }


STALL_GOAL_MS = 10.0
"""The longest the loop may stall with 50 checkpointed runs in it (the median of the rounds)."""


async def concurrent_rounds(tools: Any, rounds: int, folder: Path) -> dict[str, Any]:
    """`concurrent_checkpointed` plain and checkpointed, alternating for `rounds` rounds after a
    collection of the garbage (a full collection in the middle of a round stalls plain runs
    alike, and says nothing of recording): the median round of each, and its worst."""
    figures: dict[str, list[dict[str, float]]] = {"plain": [], "checkpointed": []}
    for number in range(rounds):
        for name, where in (("plain", None), ("checkpointed", folder / str(number))):
            if where is not None:
                where.mkdir()
            gc.collect()
            figures[name].append(await concurrent_checkpointed(tools, 50, 5, where))
    summary: dict[str, Any] = {"runs": 50, "steps": 5, "rounds": rounds}
    for name, measured in figures.items():
        summary[name] = {
            "wall_s": statistics.median(f["wall_s"] for f in measured),
            "worst_stall_ms": statistics.median(f["worst_stall_ms"] for f in measured),
            "worst_round_stall_ms": max(f["worst_stall_ms"] for f in measured),
        }
    return summary


async def concurrent_checkpointed(tools: Any, runs: int, steps: int, folder: Path | None) -> dict[str, float]:
    """`runs` concurrent runs of `steps` steps in one loop, checkpointed in `folder` (or not), beside a
    ticker task: the wall time and the longest the ticker waited for the loop (a stall every other
    run in the loop waits too). Why: a checkpoint's fsyncs must not be paid on the loop."""
    from agentfsm import ToolCallAgent

    agents = [ToolCallAgent(llm=endless_model(), tools=tools, max_steps=steps) for _ in range(runs)]
    done, worst = False, 0.0

    async def ticker() -> None:
        nonlocal worst
        while not done:
            before = time.perf_counter()
            await asyncio.sleep(0)
            worst = max(worst, time.perf_counter() - before)

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    started = time.perf_counter()
    journals = [None if folder is None else folder / f"concurrent-{i}.checkpoint" for i in range(runs)]
    results = await asyncio.gather(
        *(a.run("keep adding", checkpoint=j) for a, j in zip(agents, journals, strict=True))
    )
    wall = time.perf_counter() - started
    done = True
    await ticking
    assert all(r.stop_reason == "max_steps" for r in results), results[0]
    return {"wall_s": wall, "worst_stall_ms": worst * 1e3}


async def _trace_growth(tools: Any, steps: int, scratch: Path) -> dict[str, Any]:
    """One run of `steps` steps whose memory keeps everything: the trace and checkpoint beside it."""
    from agentfsm import Memory, ToolCallAgent

    memory = Memory(max_messages=2 * steps + 10)
    agent = ToolCallAgent(llm=endless_model(), tools=tools, memory=memory, max_steps=steps)
    trace, journal = scratch / f"growth-{steps}.jsonl", scratch / f"growth-{steps}.checkpoint"
    result = await agent.run("keep adding", trace=trace, checkpoint=journal)
    assert result.stop_reason == "max_steps", result
    messages = len(memory)
    history = sum(len(m.model_dump_json()) for m in memory)
    trace_bytes, checkpoint_bytes = trace.stat().st_size, journal.stat().st_size
    return {
        "steps": steps,
        "messages": messages,
        "history_bytes": history,
        "trace_bytes": trace_bytes,
        "trace_bytes_per_message": trace_bytes / messages,
        "trace_to_history": trace_bytes / history,
        "checkpoint_bytes": checkpoint_bytes,
        "checkpoint_bytes_per_message": checkpoint_bytes / messages,
    }


# -- 4. scale -----------------------------------------------------------------------------


async def scale(quick: bool) -> dict[str, Any]:
    from agentfsm import Terminate, ToolCallAgent, ToolCollection, tool

    count = 1_000 if quick else 10_000
    tools = ToolCollection(tool(bench_peers.add), Terminate())
    llm = bench_peers.agentfsm_model(1)

    def build() -> list[Any]:
        return [ToolCallAgent(llm=llm, tools=tools, next_step_prompt=None) for _ in range(count)]

    build()  # warm
    gc.collect()
    started = time.perf_counter()
    agents = build()
    construct_us = (time.perf_counter() - started) / count * 1e6
    started = time.perf_counter()
    results = await asyncio.gather(*(agent.run(TASK) for agent in agents))
    wall_s = time.perf_counter() - started
    assert all(r.stop_reason == "final_answer" for r in results), results[0]
    del agents, results
    gc.collect()

    rss_before = rss_bytes()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    agents = build()
    built = tracemalloc.get_traced_memory()[0] - base
    rss_built = rss_bytes() - rss_before
    tracemalloc.reset_peak()
    await asyncio.gather(*(agent.run(TASK) for agent in agents))
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    rss_ran = rss_bytes() - rss_before
    return {
        "agents": count,
        "construct_us_per_agent": construct_us,
        "construct_bytes_per_agent": built / count,
        "peak_bytes_per_agent_running": peak / count,
        "rss_bytes_per_agent_built": rss_built / count,
        "rss_bytes_per_agent_after_run": rss_ran / count,
        "wall_s": wall_s,
    }


async def http(quick: bool) -> dict[str, Any]:
    """The model path over HTTP, against the benchmark's own fast server: see `bench_http`."""
    return await bench_http.http(quick, filled_memory, interleaved)


# -- 5. start-up ---------------------------------------------------------------------------


def startup(quick: bool) -> dict[str, Any]:
    agentfsm_cli = Path(PYTHON).parent / "agentfsm"
    commands = {
        "python -c pass": [PYTHON, "-c", "pass"],
        "import agentfsm": [PYTHON, "-c", "import agentfsm"],
        "agentfsm --help": [str(agentfsm_cli), "--help"],
    }
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(5 if quick else 21):
        for name, argv in commands.items():
            started = time.perf_counter()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
            samples[name].append((time.perf_counter() - started) * 1e3)
    ms = {name: statistics.median(values) for name, values in samples.items()}
    return {"ms": ms, "import_net_ms": ms["import agentfsm"] - ms["python -c pass"]}


# -- report ------------------------------------------------------------------------------------


def report(data: dict[str, Any]) -> str:
    """The table: each measured section, in the order of `RENDER`."""
    blocks = []
    for section, render in RENDER.items():
        if section in data:
            lines: list[str] = []
            render(data[section], lines)
            blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _overhead_lines(o: dict[str, Any], lines: list[str]) -> None:
    lines.append("Overhead per run (µs, median; in-process fake model, setup built once)")
    lines.append(f"{'framework':<22}{'1 tool call + answer':>22}{'10 steps':>12}")
    for name in o["tool_call_run"]:
        lines.append(f"{name:<22}{o['tool_call_run'][name]:>22.1f}{o['ten_step_run'][name]:>12.1f}")
    for peer in o["missing"]:
        lines.append(f"{peer:<22}{'not installed (pip install agentfsm[bench])':>34}")
    one, ten = o["tool_call_run"], o["ten_step_run"]
    notes = {
        "agentfsm": "a new agent per run",
        "agentfsm, one agent": "one agent, reset between runs",
        "agentfsm engine alone": "the engine's floor, phases doing nothing",
        "guarantees, no engine": "the work's floor, no engine",
    }
    for name, note in notes.items():
        lines.append(
            f"  {name} / bare loop: {one[name] / one['bare loop']:.1f}x"
            f" (10 steps: {ten[name] / ten['bare loop']:.1f}x): {note}"
        )
    floors = one["agentfsm engine alone"] + one["guarantees, no engine"]
    lines.append(
        f"  the two floors together: {floors:.1f} µs = {floors / one['bare loop']:.1f}x the bare loop;"
        f" agentfsm (a new agent per run, as the engine's floor) is {one['agentfsm'] / floors:.2f} of it"
    )
    fired = o["trigger_us"]
    extra = (fired["transitions"] - fired["agentfsm"]) * len(ONE_CALL_TRIGGERS)
    lines.append(
        f"  a trigger: {fired['agentfsm']:.2f} µs (transitions' generic Event.trigger and "
        f"Transition.execute: {fired['transitions']:.2f}); a one-call run fires {len(ONE_CALL_TRIGGERS)}, so "
        f"firing through them would add {extra:.0f} µs, {extra / one['agentfsm']:.0%} of agentfsm's run"
    )
    for peer in ("langgraph", "pydantic-ai"):
        if peer in one:
            lines.append(
                f"  {peer} / agentfsm: {one[peer] / one['agentfsm']:.1f}x"
                f" (10 steps: {ten[peer] / ten['agentfsm']:.1f}x): agentfsm is that many times faster"
            )


def _history_lines(h: dict[str, Any], lines: list[str]) -> None:
    lines.append("One step as history grows (µs, median)")
    for size, value in h["step_us"].items():
        lines.append(f"  {size:<16}{value:>10.1f}")
    lines.append(f"  ratio 10,000 : 10 = {h['ratio_10000_to_10']:.2f}")


def _recording_lines(r: dict[str, Any], lines: list[str]) -> None:
    lines.append("Recording: one step with a checkpoint and a trace, as history grows (µs, median)")
    for size, value in r["step_us"].items():
        lines.append(f"  {size:<16}{value:>10.1f}")
    lines.append(f"  ratio 10,000 : 10 = {r['ratio_10000_to_10']:.2f}")
    lines.append("Recording: a run's trace and checkpoint against its history (memory keeps every message)")
    lines.append(
        f"  {'steps':>7}{'messages':>10}{'history B':>12}{'trace B':>12}{'B/message':>11}"
        f"{'trace/history':>15}{'checkpoint B':>14}{'B/message':>11}"
    )
    for g in r["growth"]:
        lines.append(
            f"  {g['steps']:>7}{g['messages']:>10}{g['history_bytes']:>12,}{g['trace_bytes']:>12,}"
            f"{g['trace_bytes_per_message']:>11.0f}{g['trace_to_history']:>15.2f}"
            f"{g['checkpoint_bytes']:>14,}{g['checkpoint_bytes_per_message']:>11.0f}"
        )
    c = r.get("concurrent")
    if c is not None:
        lines.append(
            f"Recording: {c['runs']} concurrent runs of {c['steps']} steps in one event loop, "
            f"{c.get('rounds', 1)} rounds alternating (the median round: wall time, the loop's longest "
            "stall seen by a ticker task; and the worst round's stall)"
        )
        for name in ("plain", "checkpointed"):
            f = c[name]
            worst = f.get("worst_round_stall_ms", f["worst_stall_ms"])
            lines.append(f"  {name:<16}{f['wall_s']:>8.3f} s{f['worst_stall_ms']:>10.1f} ms{worst:>10.1f} ms")
        stall = c["checkpointed"]["worst_stall_ms"]
        met = "met" if stall <= STALL_GOAL_MS else "not met"
        lines.append(
            f"  goal: checkpointed stall <= {STALL_GOAL_MS:.0f} ms: {stall:.1f} ms, {met} "
            f"(plain runs beside it: {c['plain']['worst_stall_ms']:.1f} ms)"
        )


def _scale_lines(s: dict[str, Any], lines: list[str]) -> None:
    lines.append(f"{s['agents']:,} agents in one event loop (in-process fake model, 1 tool call + answer)")
    lines.append(f"  construct            {s['construct_us_per_agent']:.1f} µs/agent")
    lines.append(
        f"  memory built         {s['construct_bytes_per_agent'] / 1024:.2f} KiB/agent (tracemalloc),"
        f" {s['rss_bytes_per_agent_built'] / 1024:.2f} KiB/agent (RSS)"
    )
    lines.append(
        f"  peak while running   {s['peak_bytes_per_agent_running'] / 1024:.2f} KiB/agent (tracemalloc),"
        f" RSS after {s['rss_bytes_per_agent_after_run'] / 1024:.2f} KiB/agent"
    )
    lines.append(f"  run all concurrently {s['wall_s']:.3f} s wall")


def _startup_lines(st: dict[str, Any], lines: list[str]) -> None:
    lines.append("Start-up, fresh processes (ms, median)")
    for name, value in st["ms"].items():
        lines.append(f"  {name:<18}{value:>8.1f}")
    lines.append(f"  import agentfsm, net of interpreter start: {st['import_net_ms']:.1f}")


RENDER: dict[str, Callable[[dict[str, Any], list[str]], None]] = {
    "overhead": _overhead_lines,
    "history": _history_lines,
    "recording": _recording_lines,
    "scale": _scale_lines,
    "http": bench_http.lines,
    "telemetry": bench_otel.lines,
    "startup": _startup_lines,
    "stream": bench_stream.lines,
    "sandbox": bench_sandbox.lines,
    "mcp": bench_mcp.lines,
    "embed": bench_embed.lines,
    "ui": bench_ui.lines,
}


async def collect(quick: bool, sections: list[str]) -> dict[str, Any]:
    data: dict[str, Any] = {"quick": quick, "python": sys.version.split()[0], "cpus": os.cpu_count()}
    if "startup" in sections:  # first, before this process warms the disk cache for others
        data["startup"] = startup(quick)
    for name, fn in (
        ("overhead", overhead),
        ("history", history),
        ("recording", recording),
        ("scale", scale),
        ("http", http),
        ("stream", bench_stream.stream),
        ("sandbox", bench_sandbox.sandbox),
        ("telemetry", bench_otel.telemetry),
        ("mcp", bench_mcp.mcp),
        ("embed", bench_embed.embed),
        ("ui", bench_ui.ui),
    ):
        if name in sections:
            data[name] = await fn(quick)
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and agents (under two minutes)")
    parser.add_argument("--json", action="store_true", help="print the numbers as one JSON object")
    parser.add_argument(
        "--only",
        default="startup,overhead,history,recording,scale,http,stream,telemetry,sandbox,mcp,embed,ui",
        help="comma-separated sections (default: all)",
    )
    args = parser.parse_args(argv)
    sections = args.only.split(",")
    data = asyncio.run(collect(args.quick, sections))
    print(json.dumps(data, indent=2) if args.json else report(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
