"""`BrowserAgent`: a tool-calling agent that browses: upstream's toolbox of browser_use and terminate.

Upstream builds three agents on `ToolCallAgent`: Manus, BrowserAgent and
MCPAgent. This is the second: a prompt for browsing, the browser tool and
`terminate`, and after each step that used the browser the next think's step
prompt followed by the page's state (address, title, tabs, the elements by ref,
what lies off screen), read then and sent with that request only, as Manus does
it (`PageContext`, which both hold). Each action's screenshot travels with its
result, so a vision model sees the page as the action left it.

The browser (a `BrowserSession`, the agent's) starts with the first browser_use
call and stays between runs, so a conversation keeps its pages; it is closed
when a run fails or is cancelled, and by `aclose()` or the end of ``async with``.
What it may reach is the settings' allowlist (``[browser]`` on the command
line; default: the loopback hosts only).

The browser modules are imported when an agent is built, not when this module
is, so `import agentfsm` stays light (no pydantic, no Playwright).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..run.result import AgentState, RunResult
from ..toolbox.terminate import Terminate
from .page_context import PageContext
from .toolcall import ToolCallAgent, ToolCallOptions

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..browser.search import SearchBackend
    from ..browser.session import BrowserSession
    from ..browser.settings import BrowserSettings
    from ..browser.tool import BrowserUseTool
    from ..memory import Memory
    from ..model.base import ChatModel
    from ..questions import InputHandler
    from ..toolbox.tool import Tool
    from .approval import Approver

__all__ = ["NEXT_STEP_PROMPT", "SYSTEM_PROMPT", "BrowserAgent", "BrowserOptions"]

SYSTEM_PROMPT = """\
You are an AI agent designed to automate browser tasks. Your goal is to accomplish the ultimate \
task by using the browser_use tool step by step.

After each step that used the browser, your next step comes with the page's state: its URL and \
title, the open tabs, its interactive elements with refs like [ref=e5], and how much of the page \
lies above and below the viewport.

Rules:
1. Address elements only by the refs of the latest page state ("ref": "e5"); an element that is \
not there cannot be used.
2. If the page changed after an action, read the new state before acting on it again; use 'find' \
to read the elements that mention a text, and scroll or 'extract_content' for what is not shown.
3. Use 'go_to_url' for a page whose address you know, and 'go_back' when you went wrong.
4. If you are stuck, try another way: another element, another page, scrolling.
5. When the task is done, or cannot be done, call `terminate` with the outcome; state what you \
found in your reply before it."""
"""Upstream's browsing agent's rules, for elements addressed by ref instead of by index."""

NEXT_STEP_PROMPT = """\
What should I do next to achieve my goal?

When the page's state follows, focus on: the current URL and title, the open tabs, the \
interactive elements and their refs, the content above or below the viewport, and any action \
results or errors.

For browser interactions:
- To navigate: browser_use with action="go_to_url", url="..."
- To click: browser_use with action="click_element", ref="e5"
- To type: browser_use with action="input_text", ref="e5", text="..."
- To extract: browser_use with action="extract_content", goal="..."
- To scroll: browser_use with action="scroll_down" or "scroll_up"

Consider both what's visible and what might be beyond the current viewport.
Be methodical - remember your progress and what you've learned so far.

If you want to stop the interaction at any point, use the `terminate` tool/function call."""
"""Upstream's browsing step prompt, with refs; the page state follows it after browser use."""


@dataclass(frozen=True, kw_only=True)
class BrowserOptions(ToolCallOptions):
    """BrowserAgent's options: `ToolCallOptions` (types, bounds and docs), with upstream's
    defaults (Manus's for the images)."""

    max_steps: int = 20
    max_observe: int | None = 10_000
    max_images: int | None = 3
    """Unlike upstream, which sends every screenshot of the run with each request: the latest three."""
    system_prompt: str | None = SYSTEM_PROMPT
    next_step_prompt: str | None = NEXT_STEP_PROMPT


class BrowserAgent(ToolCallAgent):
    """An agent that does its task in a browser: browser_use and terminate."""

    options: BrowserOptions
    options_class: ClassVar[type[BrowserOptions]] = BrowserOptions

    def __init__(
        self,
        *,
        llm: ChatModel,
        browser: BrowserSettings | BrowserSession | None = None,
        search: SearchBackend | None = None,
        extra_tools: Iterable[Tool] = (),
        memory: Memory | None = None,
        output_type: type[BaseModel] | None = None,
        approver: Approver | None = None,
        input_handler: InputHandler | None = None,
        name: str | None = "browser",
        options: BrowserOptions | None = None,
        **values: Any,
    ) -> None:
        """`ToolCallAgent`'s arguments (the options are `BrowserOptions`', by name or as the record
        `options`), and: `browser`: settings for the agent's browser (default: `BrowserSettings()`,
        the system's Chromium, loopback hosts only), or a session, which the agent then owns and
        closes. `search`: the backend of browser_use's web_search (None: there is none).
        `extra_tools` join browser_use and terminate. `output_type`: as `ToolCallAgent`'s
        (`final_result` joins the toolbox, beside `terminate`)."""
        from ..browser.session import BrowserSession
        from ..browser.tool import BrowserUseTool

        self.browser = browser if isinstance(browser, BrowserSession) else BrowserSession(browser)
        """The browser of browser_use, started by its first call."""
        self.browser_tool: BrowserUseTool = BrowserUseTool(self.browser, llm=llm, search=search)
        self.page_context = PageContext(self.browser_tool)
        """The page state the next think carries after a step that used the browser."""
        super().__init__(
            llm=llm,
            tools=[self.browser_tool, Terminate(), *extra_tools],
            memory=memory,
            output_type=output_type,
            approver=approver,
            input_handler=input_handler,
            name=name,
            options=options,
            **values,
        )

    async def think(self) -> None:
        async with self.page_context.thinking(self.memory, self.options.next_step_prompt):
            await super().think()

    @property
    def next_step_prompt(self) -> str | None:
        """The configured step prompt; during a think after browser use, followed by the page's state."""
        return self.page_context.step_prompt(self.options.next_step_prompt)

    async def on_run_end(self, result: RunResult) -> None:
        """Close the browser when the run failed or was cancelled (one that went well keeps its
        pages for the next run)."""
        if result.state is not AgentState.FINISHED:
            await self.browser.close()

    async def aclose(self) -> None:
        """Close the browser, if it runs (the agent can still run: it starts a new one), and the
        model's connections."""
        try:
            await self.browser.close()
        finally:
            await super().aclose()
