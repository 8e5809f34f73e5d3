"""The search backends `web_search` can ask, and the ``[search]`` section that chooses them.

`SearchSettings` is the ``[search]`` section; `build_search` makes the backends it names, in
order, into one `SearchChain` (each the next one's fallback), or None when it names none:
nothing is contacted then. `SearXNG`, `BraveSearch` and `Tavily` ask a service's JSON API over
aiohttp (`request.py`, the wing's one importer of it), each request retried as `attempts.py`
says; `DuckDuckGo` asks the ``ddgs`` package (the `search` extra), off the event loop. Neither
aiohttp nor ddgs is imported before a search is made.
"""

from __future__ import annotations

from .brave import BraveSearch
from .chain import SearchChain
from .configured import build_search
from .duckduckgo import DuckDuckGo
from .searxng import SearXNG
from .settings import SearchSettings
from .tavily import Tavily

__all__ = ["BraveSearch", "DuckDuckGo", "SearXNG", "SearchChain", "SearchSettings", "Tavily", "build_search"]
