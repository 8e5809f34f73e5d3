"""Draw the docs' screenshots of the inspector: a run paused for approval, a run's page stepped
back, a live run held at a breakpoint, and a fork's memory being edited.

    .venv/bin/python tools/ui_screenshots.py        # writes docs/images/inspector-*.png

All from real runs on a scripted model in an app's `Runs`, served by `agentfsm.ui` and taken in
the system's Chromium.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "images"


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def delete_file(path: str) -> str:
    """Delete a file (a person approves each call)."""
    return f"deleted {path}"


def _agent(spec: Any = None) -> Any:
    from agentfsm import Terminate, ToolCallAgent, tool
    from agentfsm.messages import Role, ToolCall
    from agentfsm.testing import FunctionLLM, ModelRequest, reply

    def decide(request: ModelRequest) -> Any:
        done = sum(1 for m in request.messages if m.role is Role.TOOL)
        if done == 0:
            return reply("Adding first.", [ToolCall.create("call_1", "add", {"a": 2, "b": 3})])
        if done == 1:
            deleting = ToolCall.create("call_2", "delete_file", {"path": "report.txt"})
            return reply("Now the old report.", [deleting])
        return reply("Done: 2 + 3 = 5, and the report is deleted.")

    tools = [tool(add), tool(needs_approval=True)(delete_file), Terminate()]
    return ToolCallAgent(llm=FunctionLLM(decide), tools=tools, name="assistant")


async def main() -> int:
    from playwright.async_api import async_playwright

    from agentfsm import Runs
    from agentfsm.agent.stepping import Breakpoint
    from agentfsm.browser.settings import DEFAULT_EXECUTABLE
    from agentfsm.ui import serve

    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        async with Runs(Path(scratch) / "runs", agents={"assistant": _agent}) as runs:
            run_id = await runs.submit("Add 2 and 3, then delete report.txt", "assistant")
            while (await runs.status(run_id)).state != "paused":
                await asyncio.sleep(0.02)
            inspector = await serve(runs)
            try:
                async with async_playwright() as playwright:
                    browser = await playwright.chromium.launch(executable_path=DEFAULT_EXECUTABLE)
                    page = await browser.new_page(viewport={"width": 1280, "height": 1000})
                    await page.goto(f"{inspector.url}#/run/app%2F{run_id}")
                    await page.locator('.decision[data-call="call_2"]').wait_for()
                    await page.wait_for_timeout(300)
                    await page.screenshot(path=OUT / "inspector-paused.png")
                    await page.locator("button.approve").click()
                    await page.locator('svg.machine g.state.current[data-state="FINISHED"]').wait_for()
                    await page.keyboard.press("ArrowLeft")
                    await page.keyboard.press("ArrowLeft")
                    await page.locator("#memory .message.role-tool").first.wait_for()
                    await page.wait_for_timeout(300)
                    await page.screenshot(path=OUT / "inspector-run.png")

                    await page.goto(f"{inspector.url}#/run/app%2F{run_id}/3")
                    await page.locator("#position").filter(has_text="transition 4 of").wait_for()
                    await page.locator("button.fork").click()
                    editor = page.locator(".fork-editor")
                    await editor.locator(".message.role-tool textarea.content").fill("Observed output: 6")
                    await editor.scroll_into_view_if_needed()
                    await page.wait_for_timeout(300)
                    await page.screenshot(path=OUT / "inspector-fork.png")

                    task, at_add = "Add 2 and 3, then delete report.txt", [Breakpoint(tool="add")]
                    held = await runs.submit(task, "assistant", breakpoints=at_add)
                    await page.goto(f"{inspector.url}#/run/app%2F{held}")
                    await page.locator(".held-at").wait_for()
                    await page.wait_for_timeout(300)
                    await page.screenshot(path=OUT / "inspector-held.png")
                    await runs.cancel(held)
                    await browser.close()
            finally:
                await inspector.stop()
    names = ", ".join(f"inspector-{name}.png" for name in ("paused", "run", "fork", "held"))
    print(f"wrote {names} in {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
