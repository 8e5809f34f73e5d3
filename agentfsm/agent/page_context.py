"""The page context: after a step that used the browser, the next think's step prompt carries the page.

Upstream's Manus reads the page's state before a think that follows browser use
(a browser_use call among the last three messages) and puts it in front of the
model; its BrowserAgent does so before every think, a browser started or not.
Here both do what Manus does, through this one class, which `Manus` and
`BrowserAgent` each hold. The state (address, title, tabs, the AI-mode
snapshot's elements by ref, what lies off screen) is read once per think and
follows the configured step prompt for that request only: it is never stored in
memory or in the options. A trace records each request as it was sent, page
state included, and replay takes the page state from there
(`sent_page_context`), since no browser runs then. Each action's screenshot
already travels with its result (an image part for a vision model), so the
context itself is text.

This module does not import the browser: it is handed the agent's
`BrowserUseTool`, whose module (and Playwright, on first use) the agent imports
when it is built.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..browser.tool import BrowserUseTool
    from ..memory import Memory

__all__ = ["BROWSER_CONTEXT", "RECENT_MESSAGES", "PageContext", "sent_page_context", "with_page"]

BROWSER_CONTEXT = "The browser's current page:\n{state}"
"""What follows the step prompt after a step that used the browser; ``{state}`` is the page state."""

RECENT_MESSAGES = 3
"""The last messages looked at for a browser_use call (upstream's window)."""

_HEADER = BROWSER_CONTEXT.partition("{state}")[0]


def sent_page_context(step_prompt: str, configured: str | None) -> str | None:
    """The page state a step prompt as sent carries after `configured` (None when it carries none):
    what replay adds back to the configured prompt, since the page is read only while the run runs."""
    lead = f"{configured}\n\n{_HEADER}" if configured else _HEADER
    at = step_prompt.find(lead)
    return step_prompt[at + len(lead) - len(_HEADER) :] if at >= 0 else None


def with_page(step_prompt: str | None, page: str) -> str:
    """`step_prompt` followed by the page's context (`BROWSER_CONTEXT` filled in)."""
    return "\n\n".join(part for part in (step_prompt, page) if part)


class PageContext:
    """The page state a think carries after browser use, for the agent that holds `tool`."""

    def __init__(self, tool: BrowserUseTool) -> None:
        self.tool = tool
        self._prompt: str | None = None

    def used_browser(self, memory: Memory) -> bool:
        """Whether one of the last few messages calls the browser tool (upstream's test)."""
        view = memory.view()
        recent = view[max(0, len(view) - RECENT_MESSAGES) :]
        return any(call.name == self.tool.name for message in recent for call in message.tool_calls)

    @asynccontextmanager
    async def thinking(self, memory: Memory, next_step_prompt: str | None) -> AsyncIterator[None]:
        """Around one think: when a live browser was used in the last few messages, the page's
        state, read now, follows `next_step_prompt` until the think returns."""
        if self.tool.session.active and self.used_browser(memory):
            state = BROWSER_CONTEXT.format(state=await self.tool.state_prompt())
            self._prompt = with_page(next_step_prompt, state)
        try:
            yield
        finally:
            self._prompt = None  # this request's only: the next think reads the page again

    def step_prompt(self, configured: str | None) -> str | None:
        """The step prompt to send: during a think after browser use, `configured` followed by the
        page state; otherwise `configured` itself."""
        return self._prompt if self._prompt is not None else configured
