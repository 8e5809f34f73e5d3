"""`browser_use`: upstream's browser tool (`BrowserUseTool`), on a `BrowserSession`.

The actions are upstream's, plus `find`; elements are addressed by the refs of
the last page state (``[ref=e5]`` in the snapshot: ``"ref": "e5"``) instead of
upstream's numeric indexes. Each action waits for the page to settle and
returns a short report with a screenshot of the page as it left it; every
failure (a ref that is not on the page, a refused host, a timeout, a browser
that died) is the model's observation, never an exception. The page state
itself (`state_prompt`) is what Manus and BrowserAgent add to the next think
(`agentfsm.agent.page_context`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import AgentfsmError
from ..messages import Message
from ..toolbox.tool import Tool, ToolResult
from .search import NO_SEARCH
from .session import BrowserSession

if TYPE_CHECKING:
    from ..model.base import ChatModel
    from .search import SearchBackend
    from .settings import BrowserSettings
    from .state import PageState

__all__ = ["ACTIONS", "EXTRACT_PROMPT", "BrowserUseTool"]

ACTIONS = (
    "go_to_url",
    "click_element",
    "input_text",
    "scroll_down",
    "scroll_up",
    "scroll_to_text",
    "send_keys",
    "get_dropdown_options",
    "select_dropdown_option",
    "go_back",
    "web_search",
    "wait",
    "extract_content",
    "switch_tab",
    "open_tab",
    "close_tab",
    "find",
)

_NEEDS: dict[str, tuple[str, ...]] = {
    "go_to_url": ("url",),
    "click_element": ("ref",),
    "input_text": ("ref", "text"),
    "scroll_to_text": ("text",),
    "send_keys": ("keys",),
    "get_dropdown_options": ("ref",),
    "select_dropdown_option": ("ref", "text"),
    "web_search": ("query",),
    "extract_content": ("goal",),
    "switch_tab": ("tab_id",),
    "open_tab": ("url",),
    "close_tab": ("tab_id",),
    "find": ("text",),
}
"""The arguments each action needs besides `action` (upstream's `dependencies`)."""

_MAX_WAIT = 30
_SEARCH_RESULTS = 5

DESCRIPTION = """\
A browser: navigate, click, type, scroll, read and manage tabs.
After each use your next step comes with the page state (address, title, tabs, its elements \
with refs like [ref=e5], what lies above and below); address elements by those refs ("ref": "e5"), \
and use 'find' to read the elements that mention a text.
* Navigation: 'go_to_url' (url), 'go_back', 'web_search' (query: searches, then opens the first \
result), 'open_tab' (url), 'switch_tab' (tab_id), 'close_tab' (tab_id)
* Elements: 'click_element' (ref), 'input_text' (ref, text), 'get_dropdown_options' (ref), \
'select_dropdown_option' (ref, text: the option's text), 'send_keys' (keys, e.g. 'Enter', 'Control+a')
* Reading: 'scroll_down' / 'scroll_up' (scroll_amount in pixels; default one screen), \
'scroll_to_text' (text), 'find' (text: the elements whose line contains it, with their refs), \
'extract_content' (goal: what to pull from the page's text)
* 'wait' (seconds)
Only the hosts the configuration allows can be reached; a refused request says so."""

EXTRACT_PROMPT = """\
Your task is to extract the content of the page. You will be given a page and a goal, and you \
should extract all relevant information around this goal from the page. If the goal is vague, \
summarize the page. Respond in json format.
Extraction goal: {goal}

Page content:
{page}"""
"""Upstream's prompt for `extract_content`."""


class BrowserUseTool(Tool):
    """Upstream's `browser_use` tool on a `BrowserSession` (which the owner of the tool closes)."""

    name = "browser_use"
    description = DESCRIPTION
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": list(ACTIONS), "description": "The browser action."},
            "url": {"type": "string", "description": "For 'go_to_url' and 'open_tab'."},
            "ref": {
                "type": "string",
                "description": "The element's ref from the page state (e.g. 'e5'), for 'click_element', "
                "'input_text', 'get_dropdown_options' and 'select_dropdown_option'.",
            },
            "text": {
                "type": "string",
                "description": "For 'input_text', 'scroll_to_text', 'select_dropdown_option' and 'find'.",
            },
            "scroll_amount": {
                "type": "integer",
                "minimum": 1,
                "description": "Pixels for 'scroll_down' and 'scroll_up' (default: one screen).",
            },
            "tab_id": {"type": "integer", "minimum": 0, "description": "For 'switch_tab' and 'close_tab'."},
            "query": {"type": "string", "description": "For 'web_search'."},
            "goal": {"type": "string", "description": "For 'extract_content'."},
            "keys": {"type": "string", "description": "For 'send_keys'."},
            "seconds": {"type": "integer", "minimum": 0, "description": "For 'wait' (at most 30)."},
        },
        "required": ["action"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        session: BrowserSession | BrowserSettings | None = None,
        *,
        llm: ChatModel | None = None,
        search: SearchBackend | None = None,
    ) -> None:
        """`session`: the browser to drive (settings make a new one; its owner closes it with
        `session.close()`). `llm`: the model `extract_content` asks. `search`: the backend of
        `web_search` (None: the model is told there is none)."""
        super().__init__()
        self.session = session if isinstance(session, BrowserSession) else BrowserSession(session)
        self.llm = llm
        self.search = search
        self._previous_refs: frozenset[str] = frozenset()

    async def execute(self, **kwargs: Any) -> ToolResult:
        action = kwargs["action"]
        missing = [name for name in _NEEDS.get(action, ()) if kwargs.get(name) in (None, "")]
        if missing:
            return ToolResult(error=f"action {action!r} needs {' and '.join(repr(m) for m in missing)}")
        try:
            return await self._act(action, kwargs)
        except AgentfsmError as exc:
            return ToolResult(error=f"{action} failed: {exc}")

    async def _act(self, action: str, args: dict[str, Any]) -> ToolResult:
        session = self.session
        match action:
            case "go_to_url":
                return await self._shown(f"Navigated to {await session.goto(args['url'])}")
            case "click_element":
                await session.click(args["ref"])
                return await self._shown(f"Clicked element {args['ref']}")
            case "input_text":
                await session.fill(args["ref"], args["text"])
                return await self._shown(f"Input {args['text']!r} into element {args['ref']}")
            case "scroll_down" | "scroll_up":
                amount = args.get("scroll_amount")
                sign = 1 if action == "scroll_down" else -1
                at = await session.scroll(sign * (amount or session.settings.viewport_height))
                way = action.removeprefix("scroll_")
                return await self._shown(
                    f"Scrolled {way} by {amount or 'one screen'}; {at} pixels from the top"
                )
            case "scroll_to_text":
                await session.scroll_to_text(args["text"])
                return await self._shown(f"Scrolled to text: {args['text']!r}")
            case "send_keys":
                await session.press(args["keys"])
                return await self._shown(f"Sent keys: {args['keys']}")
            case "get_dropdown_options":
                options = await session.dropdown_options(args["ref"])
                lines = [f"{i}: {text!r}{' (selected)' if chosen else ''}" for i, text, _, chosen in options]
                return ToolResult(output=f"Options of {args['ref']}:\n" + "\n".join(lines))
            case "select_dropdown_option":
                chosen = await session.select_option(args["ref"], args["text"])
                return await self._shown(f"Selected option {chosen!r} of {args['ref']}")
            case "go_back":
                return await self._shown(f"Navigated back to {await session.go_back()}")
            case "web_search":
                return await self._web_search(args["query"])
            case "wait":
                asked = args.get("seconds")
                seconds = min(3 if asked is None else int(asked), _MAX_WAIT)
                await asyncio.sleep(seconds)
                return await self._shown(f"Waited for {seconds} seconds")
            case "extract_content":
                return await self._extract(args["goal"])
            case "switch_tab":
                tab = await session.switch_tab(args["tab_id"])
                return await self._shown(f"Switched to tab {tab.tab_id}: {tab.url}")
            case "open_tab":
                session.check_url(args["url"])
                await session.open_tab(args["url"])
                return await self._shown(f"Opened new tab with {args['url']}")
            case "close_tab":
                await session.close_tab(args["tab_id"])
                return ToolResult(output=f"Closed tab {args['tab_id']}")
            case "find":
                lines = await session.find(args["text"])
                if not lines:
                    return ToolResult(output=f"No element of the page mentions {args['text']!r}")
                return ToolResult(output=f"{len(lines)} matching lines:\n" + "\n".join(lines))
        return ToolResult(error=f"unknown action {action!r}; the actions are {', '.join(ACTIONS)}")

    async def _shown(self, output: str) -> ToolResult:
        """`output` with a screenshot of the page as the action left it."""
        screenshot = await self.session.run(self.session.screenshot, settle=False)
        return ToolResult(output=output, base64_image=screenshot)

    async def _web_search(self, query: str) -> ToolResult:
        if self.search is None:
            return ToolResult(error=NO_SEARCH)
        results = list(await self.search.search(query, num_results=_SEARCH_RESULTS))
        if not results:
            return ToolResult(output=f"No results for {query!r}")
        listed = "\n".join(f"{n}. {r.title} - {r.url}\n   {r.description}" for n, r in enumerate(results, 1))
        try:
            landed = await self.session.goto(results[0].url)
        except AgentfsmError as exc:  # a host off the list (refused before any browser starts), a timeout
            return ToolResult(output=f"Results for {query!r}:\n{listed}\nThe first was not opened: {exc}")
        return await self._shown(f"Results for {query!r}:\n{listed}\nNavigated to the first: {landed}")

    async def _extract(self, goal: str) -> ToolResult:
        if self.llm is None:
            return ToolResult(error="extract_content needs a model: give BrowserUseTool an `llm`")
        text = await self.session.text()
        limit = self.session.settings.max_extract_chars
        if len(text) > limit:
            text = f"{text[:limit]}\n... [page text cut at {limit} of {len(text)} characters]"
        reply = await self.llm.ask_tool([Message.user_message(EXTRACT_PROMPT.format(goal=goal, page=text))])
        extracted = reply.content or "(the model returned nothing)"
        return ToolResult(output=f"Extracted from page:\n{extracted}", usage=reply.usage)

    async def state(self) -> PageState:
        """The current page's state, read now (a browser is started if none runs)."""
        return await self.session.state()

    async def state_prompt(self) -> str:
        """The current page's state as text, refs new since the last call marked (a failure to
        read it is the text)."""
        try:
            state = await self.session.state(screenshot=False)
        except AgentfsmError as exc:
            return f"The browser's state cannot be read: {exc}"
        text = state.render(
            previous_refs=self._previous_refs, max_chars=self.session.settings.max_state_chars
        )
        self._previous_refs = state.refs
        return text
