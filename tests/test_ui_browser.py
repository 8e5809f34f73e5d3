"""The inspector's page in the system's Chromium, driven by Playwright, against `Inspector` on 127.0.0.1.

Each test checks what the page shows (the marked state of the drawing, the timeline, the memory,
the one-line problem of a damaged file) after what a person does (click, arrow keys, a deep link).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from browser_support import require_chromium
from test_ui import record, record_flow

from agentfsm.browser.settings import DEFAULT_EXECUTABLE
from agentfsm.ui.reader import Reader
from agentfsm.ui.server import Inspector

pytestmark = [pytest.mark.http, pytest.mark.asyncio(loop_scope="module")]

HOSTILE = '<img src=x onerror="document.title=1">'


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_chromium()
    folder = tmp_path_factory.mktemp("runs")
    await record(folder, steps=2)
    await record(folder / "long", steps=400)  # 1,202 transitions: the timeline comes in three pages
    lines = (folder / "run.jsonl").read_text().splitlines()
    last = json.loads(lines[-2])
    last["step"] = "three"
    (folder / "damaged.jsonl").write_text("\n".join([*lines[:-2], json.dumps(last)]) + "\n")
    hostile = (folder / "run.jsonl").read_text().replace("add one and one", HOSTILE.replace('"', '\\"'))
    (folder / "hostile").mkdir()
    (folder / "hostile" / "run.jsonl").write_text(hostile)
    await record_flow(folder / "flow")
    return folder


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def url(runs: Path) -> AsyncIterator[str]:
    inspector = Inspector(Reader([runs]))
    served = await inspector.start()
    try:
        yield served
    finally:
        await inspector.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=DEFAULT_EXECUTABLE)
        try:
            yield launched
        finally:
            await launched.close()


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Any) -> AsyncIterator[Any]:
    context = await browser.new_context(viewport={"width": 1300, "height": 900})
    opened = await context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield opened
    finally:
        await context.close()
    assert errors == []


async def current(page: Any) -> str:
    """The state the drawing marks as current (not the group around it)."""
    marked = await page.locator("svg.machine g.state.current").get_attribute("data-state")
    return str(marked)


async def test_the_list_opens_a_run_on_its_last_transition_and_the_arrows_step_through_it(
    page: Any, url: str
):
    await page.goto(url)
    row = page.locator('tr[data-key="0/run.jsonl"]')
    await row.wait_for()
    assert "FINISHED" in await row.inner_text() and "final_answer" in await row.inner_text()
    await row.locator("a").click()
    await page.locator("#position").filter(has_text="transition 8 of 8").wait_for()
    assert await current(page) == "FINISHED"
    assert page.url.endswith("#/run/0%2Frun.jsonl/7")
    assert await page.locator("svg.machine .edge-label.taken .count").all_inner_texts() != []
    await page.keyboard.press("ArrowLeft")
    await page.locator("#position").filter(has_text="transition 7 of 8").wait_for()
    assert await current(page) == "THINKING"  # OBSERVING -> THINKING
    assert page.url.endswith("/6")
    memory = page.locator("#memory .message.role-tool")
    await memory.first.wait_for()
    assert "Observed output of cmd `add` executed:\n2" in await memory.last.inner_text()
    await page.keyboard.press("Home")
    await page.locator("#position").filter(has_text="transition 1 of 8").wait_for()
    assert await current(page) == "THINKING"
    assert await page.locator("svg.machine g.state.visited").count() == 1  # only where it went
    await page.keyboard.press("ArrowRight")
    await page.locator("#position").filter(has_text="transition 2 of 8").wait_for()
    assert await current(page) == "ACTING"
    await page.locator("#calls summary").click()  # each model call, with its tokens
    calls = page.locator("#calls tbody tr")
    assert await calls.count() == 3
    assert (await calls.first.locator("td").all_inner_texts())[:5] == ["1", "1", "scripted", "10", "5"]
    detail = await page.locator("#detail").inner_text()
    assert "token_limit: did not hold" in detail and "has_tool_calls: held (taken)" in detail


async def test_a_deep_link_names_a_run_and_a_transition(page: Any, url: str):
    await page.goto(f"{url}#/run/0%2Frun.jsonl/2")
    await page.locator("#position").filter(has_text="transition 3 of 8").wait_for()
    assert await current(page) == "OBSERVING"  # ACTING -> OBSERVING
    assert await page.locator('#transitions li[data-index="2"]').get_attribute("class") == "selected"
    assert await page.locator("svg.machine path.edge.selected").count() == 1


async def test_a_long_run_loads_its_timeline_in_pages(page: Any, url: str):
    await page.goto(f"{url}#/run/0%2Flong%2Frun.jsonl/0")
    await page.locator("#position").filter(has_text="transition 1 of 1202").wait_for()
    assert await page.locator("#transitions li").count() == 500
    await page.keyboard.press("End")
    await page.locator("#position").filter(has_text="transition 1202 of 1202").wait_for()
    assert await page.locator("#transitions li").count() == 1202
    assert await current(page) == "FINISHED"


async def test_a_damaged_trace_shows_its_problem_on_its_row_and_its_page(page: Any, url: str):
    await page.goto(url)
    row = page.locator('tr[data-key="0/damaged.jsonl"]')
    await row.wait_for()
    assert 'its transition record\'s step is "three"' in await row.locator("td.problem").inner_text()
    await row.locator("a").click()
    problem = page.locator("main p.problem")
    await problem.wait_for()
    assert "the trace is damaged" in await problem.inner_text()


async def test_what_a_run_holds_is_shown_as_text_never_as_markup(page: Any, url: str):
    await page.goto(f"{url}#/run/0%2Fhostile%2Frun.jsonl/0")
    await page.locator("#position").filter(has_text="transition 1 of 8").wait_for()
    user = page.locator("#memory .message.role-user").first
    await user.wait_for()
    assert HOSTILE in await user.inner_text()
    assert await page.locator("#memory img").count() == 0
    assert await page.title() == "agentfsm inspector"


async def test_a_flows_page_shows_its_plan_and_opens_a_steps_agent_run(page: Any, url: str):
    await page.goto(f"{url}#/run/0%2Fflow%2Fflow.jsonl")
    await page.locator("#position").filter(has_text="transition 5 of 5").wait_for()
    assert await current(page) == "DONE"
    step = page.locator('#plan li.step[data-step="2"]')
    assert "[coder] test it · completed · 1 attempt" in await step.inner_text()
    await step.locator("a").click()
    await page.locator("#request").filter(has_text="Request: test it").wait_for()
    assert await current(page) == "FINISHED"
    assert page.url.endswith("#/run/0%2Fflow%2Fflow.jsonl~coder~2/2")
