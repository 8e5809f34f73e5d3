"""The inspector at scale: a trace of 10,000 transitions opened in Chromium.

The trace is a real run's (`ToolCallAgent` on a scripted model, one `add` call a step). Each
round starts a new `Inspector` (so the file is parsed again, as on a first visit) and a new page,
and times from asking for the run's deep link to the page showing its first transition (the
machine drawn, the first page of the timeline, the memory there), then pressing End: every
page of the timeline loaded and the last transition shown. The median of the rounds. Goal
(issue 32): the trace opens in under a second.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

GOAL_OPEN_S = 1.0


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
            finally:
                await browser.close()
    return {
        "transitions": count,
        "trace_bytes": size,
        "rounds": rounds,
        "open_s": round(statistics.median(t[0] for t in times), 3),
        "to_the_end_s": round(statistics.median(t[1] for t in times), 3),
        "goals": {"open_s": GOAL_OPEN_S},
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
