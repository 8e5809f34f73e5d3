"""`BraveSearch`: the Brave Search API (``GET /res/v1/web/search?q=...&count=N``).

The key is the subscription token, sent as ``X-Subscription-Token``. The answer holds the web
hits at ``web.results`` (``url``, ``title``, ``description``, the matched words marked with
``<strong>``, which are removed); an answer with no ``web`` part found nothing. ``count`` is at
most 20.
"""

from __future__ import annotations

from typing import ClassVar

from ..search import SearchResult
from .attempts import retried
from .hits import hits
from .keyed import KeyedService
from .request import Request, fetch_json

__all__ = ["BRAVE_URL", "MAX_COUNT", "BraveSearch"]

BRAVE_URL = "https://api.search.brave.com"
MAX_COUNT = 20
"""The most hits the API gives for one query."""


class BraveSearch(KeyedService):
    """The `SearchBackend` of the Brave Search API (at `url`: its base address)."""

    name: ClassVar[str] = "brave"
    default_url: ClassVar[str] = BRAVE_URL

    async def search(self, query: str, *, num_results: int) -> list[SearchResult]:
        count = max(1, min(num_results, MAX_COUNT))
        request = Request(
            backend=self.name,
            method="GET",
            url=f"{self.url}/res/v1/web/search",
            params={"q": query, "count": str(count)},
            headers={"Accept": "application/json", "X-Subscription-Token": self.api_key.get_secret_value()},
            secret=self.api_key,
            timeout=self.timeout,
            refused_fix="check the subscription token: [search.brave] api_key, or BRAVE_API_KEY",
        )

        async def attempt() -> list[SearchResult]:
            body = await fetch_json(request)
            web = body.get("web") if isinstance(body, dict) else None
            if isinstance(body, dict) and web is None:
                return []  # Brave leaves the part out when it found nothing
            found = web.get("results") if isinstance(web, dict) else None
            return hits(
                found,
                backend=self.name,
                where="web.results",
                url="url",
                title="title",
                description="description",
                limit=count,
            )

        return await retried(attempt, backend=self.name, policy=self.policy)
