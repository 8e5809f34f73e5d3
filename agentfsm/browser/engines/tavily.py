"""`Tavily`: the Tavily search API (``POST /search`` with ``{"query", "max_results"}``).

The key is sent as ``Authorization: Bearer tvly-...``, as Tavily's API reference documents it.
The answer holds ``results`` (``url``, ``title``, ``content``); ``max_results`` is at most 20.
"""

from __future__ import annotations

from typing import ClassVar

from ..search import SearchResult
from .attempts import retried
from .hits import hits
from .keyed import KeyedService
from .request import Request, fetch_json

__all__ = ["MAX_RESULTS", "TAVILY_URL", "Tavily"]

TAVILY_URL = "https://api.tavily.com"
MAX_RESULTS = 20
"""The most hits the API gives for one query."""


class Tavily(KeyedService):
    """The `SearchBackend` of the Tavily API (at `url`: its base address)."""

    name: ClassVar[str] = "tavily"
    default_url: ClassVar[str] = TAVILY_URL

    async def search(self, query: str, *, num_results: int) -> list[SearchResult]:
        count = max(1, min(num_results, MAX_RESULTS))
        request = Request(
            backend=self.name,
            method="POST",
            url=f"{self.url}/search",
            body={"query": query, "max_results": count},
            headers={"Authorization": f"Bearer {self.api_key.get_secret_value()}"},
            secret=self.api_key,
            timeout=self.timeout,
            refused_fix="check the key: [search.tavily] api_key, or TAVILY_API_KEY",
        )

        async def attempt() -> list[SearchResult]:
            body = await fetch_json(request)
            found = body.get("results") if isinstance(body, dict) else None
            return hits(
                found,
                backend=self.name,
                where="results",
                url="url",
                title="title",
                description="content",
                limit=count,
            )

        return await retried(attempt, backend=self.name, policy=self.policy)
