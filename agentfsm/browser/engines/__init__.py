"""The search backends `web_search` can ask, and the ``[search]`` section that chooses them.

`SearchSettings` is the ``[search]`` section; `build_search` makes the backends it names, in
order, into one `SearchChain` (each the next one's fallback), or None when it names none:
nothing is contacted then. `SearXNG`, `BraveSearch` and `Tavily` ask a service's JSON API over
aiohttp (`request.py`, the wing's one importer of it), each request retried as `attempts.py`
says; `DuckDuckGo` asks the ``ddgs`` package (the `search` extra), off the event loop. Only the
settings are imported with the package (the configuration reads them); the backends on first
use, and neither aiohttp nor ddgs before a search is made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...lazy import lazy_attributes
from .settings import SearchSettings

if TYPE_CHECKING:
    from .brave import BraveSearch
    from .chain import SearchChain
    from .configured import build_search
    from .duckduckgo import DuckDuckGo
    from .searxng import SearXNG
    from .tavily import Tavily

__all__ = ["BraveSearch", "DuckDuckGo", "SearXNG", "SearchChain", "SearchSettings", "Tavily", "build_search"]

__getattr__ = lazy_attributes(
    __name__,
    {
        "BraveSearch": "brave",
        "DuckDuckGo": "duckduckgo",
        "SearXNG": "searxng",
        "SearchChain": "chain",
        "Tavily": "tavily",
        "build_search": "configured",
    },
)
