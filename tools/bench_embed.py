"""Embedding in an app: `agentfsm.Runs` beside the same runs driven by hand.

Every run is one `add` call and the answer, against `tools/fast_server.py` (its own process and
core), with a checkpoint and a trace on both sides: by hand, each is `agent.run(...,
checkpoint=, trace=)` on a fresh agent, all at once under `asyncio.gather`; through `Runs`, each is
`submit` (its folder, `run.json`, its lease, its events kept and fanned out) and `result(wait=True)`.
Rounds alternate, the median of each. Three goals (issue 36): the managed runs' wall time at most
1.2x the hand-driven ones'; an event's latency (emitted by the agent, read by a reader of
`Runs.events`, one reader a run) at most 20 ms at p95; a restart with that many unfinished runs
(paused at an approval) back, each showing its pending call, within 2 s. Beside the latency, its
floor: the same runs by hand, each event put on a plain `asyncio.Queue` that a task reads.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_http import MODEL, fast_server

GOAL_RATIO = 1.2
GOAL_LATENCY_MS = 20.0
GOAL_RESTART_S = 2.0
MODEL_TIME_S = 0.2
"""The latency is measured twice: against the server answering at once (the loop never idle: each
event waits its turn among every run's work), and answering after this long, as a model does."""


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _agents(model: Any, *, approval: bool = False, emitted: dict[str, list[float]] | None = None) -> Any:
    from agentfsm import Terminate, ToolCallAgent, tool
    from agentfsm.runs import AgentSpec

    adding = tool(needs_approval=True)(add) if approval else tool(add)

    def build(spec: AgentSpec) -> ToolCallAgent:
        agent = ToolCallAgent(llm=model, tools=[adding, Terminate()], name="adder")
        if emitted is not None:  # before the feed's listener: the moment each event is emitted
            agent.on_event(lambda event: emitted.setdefault(event.run_id, []).append(time.perf_counter()))
        return agent

    return build


async def _by_hand(model: Any, count: int, folder: Path) -> float:
    build = _agents(model)
    agents = [build(None) for _ in range(count)]
    began = time.perf_counter()
    folder.mkdir()
    runs = [
        a.run("add", checkpoint=folder / f"{i}.ckpt", trace=folder / f"{i}.jsonl")
        for i, a in enumerate(agents)
    ]
    await asyncio.gather(*runs)
    return time.perf_counter() - began


async def _managed(model: Any, count: int, folder: Path) -> float:
    from agentfsm import Runs

    async def one(runs: Any) -> None:  # as a request of an app would: submit, then wait for the end
        await runs.result(await runs.submit("add", "adder"), wait=True)

    async with Runs(folder, agents={"adder": _agents(model)}, max_active=count) as runs:
        began = time.perf_counter()
        await asyncio.gather(*(one(runs) for _ in range(count)))
        return time.perf_counter() - began


async def _latency(model: Any, count: int, folder: Path) -> list[float]:
    """Each event's time from the agent's emitting it to a reader's reading it (ms)."""
    from agentfsm import Runs

    emitted: dict[str, list[float]] = {}
    read: dict[str, list[float]] = {}

    async def reader(runs: Any, run_id: str) -> None:
        times = read.setdefault(run_id, [])
        async for _ in runs.events(run_id):
            times.append(time.perf_counter())

    async def one(runs: Any) -> str:  # as a page of an app would: submit, then follow its events
        run_id: str = await runs.submit("add", "adder")
        await reader(runs, run_id)
        return run_id

    async with Runs(folder, agents={"adder": _agents(model, emitted=emitted)}, max_active=count) as runs:
        ids = await asyncio.gather(*(one(runs) for _ in range(count)))
    gaps = []
    for run_id in ids:
        emits, reads = emitted[run_id], read[run_id]
        assert len(emits) == len(reads), (run_id, len(emits), len(reads))
        gaps += [(r - e) * 1000 for e, r in zip(emits, reads, strict=True)]
    return gaps


async def _latency_floor(model: Any, count: int, folder: Path) -> list[float]:
    """The floor of `_latency`: the same runs by hand, each event handed by a listener to a plain
    `asyncio.Queue` that a task of the run's own reads (no file, no numbering, no manager): how long
    an event waits for a reader in a loop this busy, whoever hands it over (ms)."""
    gaps: list[float] = []

    async def one(agent: Any, i: int) -> None:
        queue: asyncio.Queue[float | None] = asyncio.Queue()
        agent.on_event(lambda event: queue.put_nowait(time.perf_counter()))

        async def read() -> None:
            while (emitted := await queue.get()) is not None:
                gaps.append((time.perf_counter() - emitted) * 1000)

        reader = asyncio.create_task(read())
        await agent.run("add", checkpoint=folder / f"{i}.ckpt", trace=folder / f"{i}.jsonl")
        queue.put_nowait(None)
        await reader

    build = _agents(model)
    folder.mkdir()
    await asyncio.gather(*(one(build(None), i) for i in range(count)))
    return gaps


async def _restart(model: Any, count: int, folder: Path) -> float:
    """Seconds from entering `Runs` on `count` paused runs to all of them paused again, with their calls."""
    from agentfsm import Runs

    factories = {"adder": _agents(model, approval=True)}
    async with Runs(folder, agents=factories, max_active=count) as runs:
        for _ in range(count):
            await runs.submit("add", "adder")
        while len(await runs.list(state="paused")) < count:
            await asyncio.sleep(0.01)
    began = time.perf_counter()
    async with Runs(folder, agents=factories, max_active=count) as runs:
        while True:
            paused = await runs.list(state="paused")
            if len(paused) == count and all(s.pending_approval for s in paused):
                return time.perf_counter() - began
            await asyncio.sleep(0.005)


async def embed(quick: bool) -> dict[str, Any]:
    from agentfsm import OpenAICompatible

    count = 200 if quick else 1_000
    rounds = 1 if quick else 3
    hand: list[float] = []
    managed: list[float] = []
    with fast_server() as base, tempfile.TemporaryDirectory(prefix="agentfsm-embed-") as scratch:
        model = OpenAICompatible(MODEL, api_base=base, api_key="bench", timeout=120)
        try:
            for n in range(rounds):
                hand.append(await _by_hand(model, count, Path(scratch, f"hand{n}")))
                managed.append(await _managed(model, count, Path(scratch, f"runs{n}")))
            gaps = await _latency(model, count, Path(scratch, "latency"))
            floor = await _latency_floor(model, count, Path(scratch, "floor"))
            restart = await _restart(model, count, Path(scratch, "restart"))
        finally:
            await model.aclose()
    with (
        fast_server(delay=MODEL_TIME_S) as base,
        tempfile.TemporaryDirectory(prefix="agentfsm-embed-") as scratch,
    ):
        model = OpenAICompatible(MODEL, api_base=base, api_key="bench", timeout=120)
        try:
            paced = await _latency(model, count, Path(scratch, "latency"))
            paced_floor = await _latency_floor(model, count, Path(scratch, "floor"))
        finally:
            await model.aclose()
    return {
        "runs": count,
        "rounds": rounds,
        "by_hand_s": round(statistics.median(hand), 3),
        "managed_s": round(statistics.median(managed), 3),
        "ratio": round(statistics.median(managed) / statistics.median(hand), 3),
        "event_latency_p50_ms": round(statistics.median(gaps), 2),
        "event_latency_p95_ms": round(statistics.quantiles(gaps, n=20)[-1], 2),
        "events": len(gaps),
        "paced_event_latency_p50_ms": round(statistics.median(paced), 2),
        "paced_event_latency_p95_ms": round(statistics.quantiles(paced, n=20)[-1], 2),
        "floor_latency_p50_ms": round(statistics.median(floor), 2),
        "floor_latency_p95_ms": round(statistics.quantiles(floor, n=20)[-1], 2),
        "paced_floor_latency_p50_ms": round(statistics.median(paced_floor), 2),
        "paced_floor_latency_p95_ms": round(statistics.quantiles(paced_floor, n=20)[-1], 2),
        "model_time_s": MODEL_TIME_S,
        "restart_s": round(restart, 3),
        "goals": {"ratio": GOAL_RATIO, "latency_p95_ms": GOAL_LATENCY_MS, "restart_s": GOAL_RESTART_S},
    }


def lines(e: dict[str, Any], out: list[str]) -> None:
    out.append(f"Embedding: {e['runs']} concurrent one-tool runs, fast local server, median of {e['rounds']}")
    out.append(f"  by hand (asyncio.gather, checkpoint and trace)  {e['by_hand_s']:>8.3f} s")
    mark = "met" if e["ratio"] <= GOAL_RATIO else "NOT met"
    out.append(
        f"  through Runs {e['managed_s']:>35.3f} s  ({e['ratio']:.2f}x, goal <= {GOAL_RATIO:g}: {mark})"
    )
    for prefix, what in (
        ("", "the server answering at once"),
        ("paced_", f"a model of {e['model_time_s']:g} s"),
    ):
        p50, p95 = e[f"{prefix}event_latency_p50_ms"], e[f"{prefix}event_latency_p95_ms"]
        mark = "met" if p95 <= GOAL_LATENCY_MS else "NOT met"
        out.append(
            f"  event latency, {what}: p50 / p95  {p50:.2f} / {p95:.2f} ms over {e['events']} events "
            f"(goal p95 <= {GOAL_LATENCY_MS:g} ms: {mark})"
        )
        floor50, floor95 = e[f"{prefix}floor_latency_p50_ms"], e[f"{prefix}floor_latency_p95_ms"]
        out.append(
            f"    its floor, the same runs by hand, a plain queue and reader a run: p50 / p95  "
            f"{floor50:.2f} / {floor95:.2f} ms"
        )
    mark = "met" if e["restart_s"] <= GOAL_RESTART_S else "NOT met"
    back = f"{e['restart_s']:.3f} s (goal <= {GOAL_RESTART_S:g} s: {mark})"
    out.append(f"  a restart with {e['runs']} paused runs, all back with their calls: {back}")
