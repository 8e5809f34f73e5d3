"""The inspector at scale: a trace of 10,000 transitions opened in Chromium.

The trace is a real run's (`ToolCallAgent` on a scripted model, one `add` call a step). Each
round starts a new `Inspector` (so the file is parsed again, as on a first visit) and a new page,
and times from asking for the run's deep link to the page showing its first transition (the
machine drawn, the first page of the timeline, the memory there), then pressing End: every
page of the timeline loaded and the last transition shown. The median of the rounds. Goal
(issue 32): the trace opens in under a second.

Live: an app's `Runs` served by `agentfsm.ui.serve`, a run of `LIVE_STEPS` one-call steps whose
model answers after `LIVE_GAP_S` (so each transition is a moment of its own), followed by the page
from its start. Each transition's latency is from the engine's emitting it (the wall clock, in
a listener of the agent) to the page showing it as its last transition (the wall clock, in the
page, when the position line changes): the event's way over server-sent events, the page's
fetches of the run, and its drawing. Goal: each shown within 100 ms (p95 and max reported).

A durable database's list: `LIST_RUNS` finished one-call runs in a SQLite database (made by a
`Worker` in this process, before the clock starts), then `agentfsm ui --db`'s page opened on it:
timed from asking for the page to its list showing (its first page of runs, the newest first).
Median of the rounds, each with a new `Inspector`. Goal (issue 32): under a second.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

GOAL_OPEN_S = 1.0
GOAL_LIVE_MS = 100.0
LIVE_STEPS = 10
LIVE_GAP_S = 0.15
LIST_RUNS = 10_000
GOAL_LIST_S = 1.0


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def _trace(folder: Path, transitions: int) -> int:
    """A run of at least `transitions` transitions (three a step, the start and the answer): how many."""
    from agentfsm import Terminate, ToolCallAgent, tool
    from agentfsm.messages import ToolCall
    from agentfsm.testing import ScriptedLLM, reply

    steps = -(-(transitions - 2) // 3)
    script = [reply(tool_calls=[ToolCall.create(f"c{i}", "add", {"a": i, "b": 1})]) for i in range(steps)]
    agent = ToolCallAgent(
        llm=ScriptedLLM([*script, reply("done")]), tools=[tool(add), Terminate()], max_steps=steps + 5
    )
    await agent.run("add", trace=folder / "run.jsonl")
    return 3 * steps + 2


async def _open(browser: Any, folder: Path, count: int) -> tuple[float, float]:
    from agentfsm.ui.reader import Reader
    from agentfsm.ui.server import Inspector

    inspector = Inspector(Reader([folder]))
    url = await inspector.start()
    context = await browser.new_context()
    try:
        page = await context.new_page()
        began = time.perf_counter()
        await page.goto(f"{url}#/run/0%2Frun.jsonl/0")
        await page.locator("#position").filter(has_text=f"transition 1 of {count}").wait_for()
        opened = time.perf_counter() - began
        began = time.perf_counter()
        await page.keyboard.press("End")
        await page.locator("#position").filter(has_text=f"transition {count} of {count}").wait_for()
        return opened, time.perf_counter() - began
    finally:
        await context.close()
        await inspector.stop()


async def _live(browser: Any, folder: Path) -> list[float]:
    """Each transition's latency (ms) from the engine to the page (see the module's docstring)."""
    from agentfsm import Runs, Terminate, ToolCallAgent, tool
    from agentfsm.messages import Role, ToolCall
    from agentfsm.testing import FunctionLLM, ModelRequest, reply
    from agentfsm.ui import serve

    emitted: list[float] = []
    watching = asyncio.Event()
    """Set once the page watches: the model's first answer waits for it, so that a page slow to
    open (a busy machine) still sees the run's steps arrive, not a run already ended."""

    async def decide(request: ModelRequest) -> Any:
        await watching.wait()
        await asyncio.sleep(LIVE_GAP_S)
        done = sum(1 for m in request.messages if m.role is Role.TOOL)
        if done < LIVE_STEPS:
            return reply(tool_calls=[ToolCall.create(f"c{done}", "add", {"a": done, "b": 1})])
        return reply("done")

    def build(spec: Any) -> ToolCallAgent:
        agent = ToolCallAgent(
            llm=FunctionLLM(decide), tools=[tool(add), Terminate()], max_steps=LIVE_STEPS + 2
        )
        agent.on_transition(lambda t: emitted.append(time.time() * 1000))
        return agent

    async with Runs(folder / "live", agents={"adder": build}) as runs:
        inspector = await serve(runs)
        page = await browser.new_page()
        try:
            run_id = await runs.submit("add", "adder")
            await page.goto(f"{inspector.url}#/run/app%2F{run_id}")
            await page.locator("#position").wait_for()
            await page.evaluate(
                """() => {
                  window.shown = {};
                  const position = document.getElementById("position");
                  const already = Number((position.textContent.match(/^transition (\\d+)/) || [0, 0])[1]);
                  for (let n = 1; n <= already; n++) window.shown[n] = -1; // shown before this watch
                  new MutationObserver(() => {
                    const found = position.textContent.match(/^transition (\\d+) of (\\d+)$/);
                    if (!found || found[1] !== found[2]) return;
                    const now = performance.timeOrigin + performance.now();
                    for (let n = 1; n <= Number(found[1]); n++) {
                      if (!(n in window.shown)) window.shown[n] = now;
                    }
                  }).observe(position, { childList: true, characterData: true, subtree: true });
                }"""
            )
            watching.set()
            await runs.result(run_id, wait=True, timeout=120)
            count = 3 * LIVE_STEPS + 2
            await page.locator("#position").filter(has_text=f"transition {count} of {count}").wait_for()
            shown: dict[str, float] = await page.evaluate("() => window.shown")
        finally:
            await page.close()
            await inspector.stop()
    return [shown[str(n + 1)] - emitted[n] for n in range(len(emitted)) if shown[str(n + 1)] >= 0]


def _adder(spec: Any) -> Any:
    """A durable worker's agent: one `add` call, then the answer."""
    from agentfsm import Terminate, ToolCallAgent, tool
    from agentfsm.messages import Role, ToolCall
    from agentfsm.testing import FunctionLLM, ModelRequest, reply

    def decide(request: ModelRequest) -> Any:
        if any(m.role is Role.TOOL for m in request.messages):
            return reply("done")
        return reply(tool_calls=[ToolCall.create("c1", "add", {"a": 1, "b": 2})])

    return ToolCallAgent(llm=FunctionLLM(decide), tools=[tool(add), Terminate()])


async def _database(folder: Path, count: int) -> str:
    """A SQLite database holding `count` finished durable runs; its URL."""
    from agentfsm.durable import DurableRuns, Worker

    db = f"sqlite:///{folder / 'runs.db'}"
    async with Worker(db, agents={"adder": _adder}, queue="ui", concurrency=16, polling_s=0.05):
        runs = DurableRuns(db)
        try:
            last = ""
            for start in range(0, count, 50):  # submitted 50 at a time, as many requests of an app would
                batch = [runs.submit("add", "adder", queue="ui") for _ in range(min(50, count - start))]
                last = (await asyncio.gather(*batch))[-1]
            while (await runs.status(last)).state != "finished":  # the queue runs them in order
                await asyncio.sleep(1)
            while len(await runs.list(state="finished")) < count:
                await asyncio.sleep(1)
        finally:
            runs.close()
    return db


async def _listed(browser: Any, db: str) -> float:
    """Seconds from asking for the inspector's page to its list of the database's runs showing."""
    from agentfsm.ui.managed import database
    from agentfsm.ui.reader import Reader
    from agentfsm.ui.server import Inspector

    inspector = Inspector(Reader([], managed=[database(db)]))
    url = await inspector.start()
    page = await browser.new_page()
    try:
        began = time.perf_counter()
        await page.goto(url)
        await page.locator("#run-count").filter(has_text="runs").wait_for()
        await page.locator("table.runs tbody tr").first.wait_for()
        return time.perf_counter() - began
    finally:
        await page.close()
        await inspector.stop()


async def ui(quick: bool) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    from agentfsm.browser.settings import DEFAULT_EXECUTABLE

    rounds = 2 if quick else 5
    with tempfile.TemporaryDirectory(prefix="agentfsm-bench-ui-") as scratch:
        folder = Path(scratch)
        count = await _trace(folder, 2_000 if quick else 10_000)
        size = (folder / "run.jsonl").stat().st_size
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=DEFAULT_EXECUTABLE)
            try:
                times = [await _open(browser, folder, count) for _ in range(rounds)]
                live = await _live(browser, folder)
                listed_runs = 300 if quick else LIST_RUNS
                db = await _database(folder, listed_runs)
                listed = [await _listed(browser, db) for _ in range(rounds)]
            finally:
                await browser.close()
    return {
        "transitions": count,
        "trace_bytes": size,
        "rounds": rounds,
        "open_s": round(statistics.median(t[0] for t in times), 3),
        "to_the_end_s": round(statistics.median(t[1] for t in times), 3),
        "live_transitions": len(live),
        "live_p50_ms": round(statistics.median(live), 1),
        "live_p95_ms": round(statistics.quantiles(live, n=20, method="inclusive")[-1], 1),
        "live_max_ms": round(max(live), 1),
        "database_runs": listed_runs,
        "database_list_s": round(statistics.median(listed), 3),
        "goals": {"open_s": GOAL_OPEN_S, "live_ms": GOAL_LIVE_MS, "list_s": GOAL_LIST_S},
    }


def lines(u: dict[str, Any], out: list[str]) -> None:
    met = "met" if u["open_s"] <= GOAL_OPEN_S else "NOT met"
    out.append(
        f"Inspector: a trace of {u['transitions']} transitions ({u['trace_bytes'] / 1e6:.1f} MB), "
        f"in Chromium, median of {u['rounds']}"
    )
    out.append(f"  opened on its first transition (parsed, drawn, memory shown)  {u['open_s']:>7.3f} s")
    out.append(
        f"  End: every timeline page loaded, the last transition shown     {u['to_the_end_s']:>7.3f} s"
    )
    out.append(f"  goal: opens in under {GOAL_OPEN_S:.0f} s: {met}")
    shown = "met" if u["live_max_ms"] <= GOAL_LIVE_MS else "NOT met"
    out.append(
        f"  live, engine to page: p50 / p95 / max {u['live_p50_ms']:.1f} / {u['live_p95_ms']:.1f} / "
        f"{u['live_max_ms']:.1f} ms over {u['live_transitions']} transitions "
        f"(goal: each within {GOAL_LIVE_MS:.0f} ms: {shown})"
    )
    listed = "met" if u["database_list_s"] <= GOAL_LIST_S else "NOT met"
    out.append(
        f"  a durable database of {u['database_runs']} runs, its list shown  {u['database_list_s']:>7.3f} s "
        f"(goal: under {GOAL_LIST_S:.0f} s: {listed})"
    )
