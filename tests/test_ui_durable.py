"""The inspector over a durable database (`agentfsm ui --db`), on SQLite and PostgreSQL, with a worker
process running the runs: the list holds each run with its state, worker, steps and stop reason; an
ended run opens on its trace from the database; a paused one shows the calls it waits on; the page,
in Chromium, lists them, steps through one, and approves a paused one's call through the database
(the run goes on to its end, its tool run once); a database that cannot be read is one row saying so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from browser_support import require_chromium
from durable_agents import TASK
from postgres_support import either_db, pg_url, postgres_server  # noqa: F401 (fixtures)
from runs_support import until
from test_durable_crash import start_worker, stop_worker

from agentfsm.browser.settings import DEFAULT_EXECUTABLE
from agentfsm.durable import AgentSpec, DurableRuns
from agentfsm.ui.managed import database, shown_url
from agentfsm.ui.reader import Reader
from agentfsm.ui.server import Inspector

pytestmark = pytest.mark.http

QUEUE = "ui"


@pytest.fixture
def worker(either_db: str):  # noqa: F811 (the fixture)
    child = start_worker(either_db, "ui-worker", "--queue", QUEUE, "--concurrency", "4")
    try:
        yield either_db
    finally:
        stop_worker(child)


async def _two_runs(db: str, tmp_path: Path) -> tuple[str, str]:
    """A finished run and one paused for an approval."""
    runs = DurableRuns(db)
    try:
        spec = AgentSpec(agent="record", options={"effects": str(tmp_path / "done.txt")})
        finished = await runs.submit(TASK, spec, queue=QUEUE)
        waiting = AgentSpec(agent="approval", options={"effects": str(tmp_path / "wait.txt")})
        paused = await runs.submit("record 7", waiting, queue=QUEUE)
        await until(runs, finished, "finished", timeout=60)
        await until(runs, paused, "paused", timeout=60)
    finally:
        runs.close()
    return finished, paused


async def test_the_database_lists_its_runs_and_an_ended_one_opens_on_its_trace(worker: str, tmp_path: Path):
    finished, paused = await _two_runs(worker, tmp_path)
    reader = Reader([], managed=[database(worker)])
    try:
        rows = {row.key: row for row in await reader.rows()}
        done = rows[f"db/{finished}"]
        assert (done.kind, done.state, done.stop_reason, done.worker) == (
            "durable",
            "finished",
            "terminated",
            "ui-worker",
        )
        assert done.step == 3 and done.request == TASK
        assert rows[f"db/{paused}"].state == "paused"
        view = await reader.view(f"db/{finished}")
        assert view.table_source == "recorded"
        assert [t["dest"] for t in view.transitions][-2:] == ["OBSERVING", "FINISHED"]
        assert view.transitions[-1]["guards"][0] == {"name": "terminated", "held": True}
        memory = view.memory_at(len(view.transitions) - 1)["messages"]
        assert memory[-1]["role"] == "tool" and memory[-1]["name"] == "terminate"
        waiting = (await reader.view(f"db/{paused}")).summary()
        assert waiting["count"] == 0 and waiting["result"] is None
        assert [(c["id"], c["name"]) for c in waiting["status"]["pending_approval"]] == [("c1", "record")]
        assert waiting["status"]["state"] == "paused" and waiting["status"]["pause"] == 1
    finally:
        reader.close()


async def test_the_page_lists_the_database_and_steps_through_a_run(worker: str, tmp_path: Path):
    require_chromium()
    from playwright.async_api import async_playwright

    finished, paused = await _two_runs(worker, tmp_path)
    inspector = Inspector(Reader([], managed=[database(worker)]))
    url = await inspector.start()
    try:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=DEFAULT_EXECUTABLE)
            try:
                page: Any = await browser.new_page()
                await page.goto(url)
                row = page.locator(f'tr[data-key="db/{finished}"]')
                await row.wait_for()
                text = await row.inner_text()
                assert "finished" in text and "terminated" in text and shown_url(worker) in text
                await row.locator("a").click()
                await page.locator("#position").filter(has_text="transition 10 of 10").wait_for()
                marked = page.locator("svg.machine g.state.current")
                assert await marked.get_attribute("data-state") == "FINISHED"
                await page.keyboard.press("ArrowLeft")
                await page.locator("#position").filter(has_text="transition 9 of 10").wait_for()
                assert await marked.get_attribute("data-state") == "OBSERVING"
                await page.goto(f"{url}#/run/db%2F{paused}")  # approved from the page, through the database
                decision = page.locator('.decision[data-call="c1"]')
                await decision.wait_for()
                assert "record · c1 waits for a decision" in await decision.inner_text()
                await decision.locator("button.approve").click()
                await page.locator('svg.machine g.state.current[data-state="FINISHED"]').wait_for()
                assert (tmp_path / "wait.txt").read_text().split() == ["7"]
            finally:
                await browser.close()
    finally:
        await inspector.stop()


async def test_a_database_is_listed_a_page_at_a_time_the_newest_first(
    worker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    finished, paused = await _two_runs(worker, tmp_path)
    runs = DurableRuns(worker)
    try:
        assert [s.run_id for s in await runs.list(limit=1, newest_first=True)] == [paused]
        assert [s.run_id for s in await runs.list(limit=1, offset=1, newest_first=True)] == [finished]
        assert [s.run_id for s in await runs.list(offset=1)] == [paused]
    finally:
        runs.close()
    monkeypatch.setattr("agentfsm.ui.managed.PAGE", 1)
    reader = Reader([], managed=[database(worker)])
    try:
        assert [row.run_id for row in await reader.rows()] == [paused]
        assert reader.more == {"db": 1}
        assert [row.run_id for row in await reader.more_rows("db", 1)] == [finished]
        assert await reader.more_rows("db", 2) == [] and reader.more == {}
        assert (await reader.view(f"db/{finished}")).summary()["count"] == 10  # a later page's run opens
    finally:
        reader.close()
    require_chromium()  # the page asks for the next page while its screen is not full, or as it scrolls
    from playwright.async_api import async_playwright

    inspector = Inspector(Reader([], managed=[database(worker)]))
    url = await inspector.start()
    try:
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=DEFAULT_EXECUTABLE)
            try:
                page: Any = await browser.new_page()
                await page.goto(url)
                await page.locator("#run-count").filter(has_text="2 runs").wait_for()  # page after page
                rows = page.locator("table.runs tbody tr")
                assert [await r.get_attribute("data-key") for r in await rows.all()] == [
                    f"db/{paused}",
                    f"db/{finished}",
                ]
            finally:
                await browser.close()
    finally:
        await inspector.stop()


async def test_a_database_that_cannot_be_read_is_one_row_saying_so(tmp_path: Path):
    db = f"sqlite:///{tmp_path / 'no' / 'such' / 'folder' / 'runs.db'}"
    reader = Reader([], managed=[database(db)])
    try:
        (row,) = await reader.rows()
    finally:
        reader.close()
    assert row.key == "db" and row.problem is not None
    assert row.problem.startswith(f"cannot read the runs in {db}: ") and "\n" not in row.problem


def test_a_database_url_is_shown_without_its_password():
    assert (
        shown_url("postgresql://ada:hunter2@127.0.0.1:5432/runs")
        == "postgresql://ada:***@127.0.0.1:5432/runs"
    )
    assert shown_url("sqlite:///tmp/runs.db") == "sqlite:///tmp/runs.db"
