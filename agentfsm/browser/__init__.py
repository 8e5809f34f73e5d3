"""The browser tool: Playwright driving the system's Chromium, with an allowlist held on every request.

`BrowserSettings` is the ``[browser]`` section of the configuration;
`BrowserSession` owns one agent's browser (started on first use, closed by
its owner, replaced when it dies) and is the only module that imports
Playwright, on first use; `BrowserUseTool` is upstream's ``browser_use`` tool
on a session; `PageState` is what the model reads of a page; `SearchBackend`
is what ``web_search`` asks (none by default).
"""

from __future__ import annotations

from .search import SearchBackend, SearchResult
from .session import BrowserSession
from .settings import BrowserSettings
from .state import PageState, Tab
from .tool import BrowserUseTool

__all__ = [
    "BrowserSession",
    "BrowserSettings",
    "BrowserUseTool",
    "PageState",
    "SearchBackend",
    "SearchResult",
    "Tab",
]
