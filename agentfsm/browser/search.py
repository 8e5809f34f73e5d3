"""Web search for the browser tool: a backend of your choosing, none by default.

Upstream's `web_search` queries Google, Baidu, DuckDuckGo and Bing in turn,
scraping their result pages: outside hosts contacted by default, and breaking
whenever a page changes. Here a search is whatever `SearchBackend` the tool is
given (an API of a search engine, an index of your own); without one,
`web_search` tells the model there is none and to go to a known address.
The backends shipped (SearXNG, Brave, Tavily, DuckDuckGo) and the ``[search]``
section that chooses them are in `agentfsm.browser.engines`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["NO_SEARCH", "SearchBackend", "SearchResult"]

NO_SEARCH = (
    "web_search is not available: no search backend is configured (set [search] backends, or pass "
    "`search=` to BrowserUseTool or Manus); use go_to_url with an address you know instead"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchResult:
    """One hit: where it is, its title, and what the engine says of it."""

    url: str
    title: str = ""
    description: str = ""


@runtime_checkable
class SearchBackend(Protocol):
    """Anything that answers a query with results, best first."""

    async def search(self, query: str, *, num_results: int) -> Sequence[SearchResult]: ...
