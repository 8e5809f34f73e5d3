"""`SearXNG`: a SearXNG instance's JSON API (``GET /search?q=...&format=json``).

The instance answers ``{"results": [{"url", "title", "content", ...}, ...]}``, as many hits as
its engines gave (it takes no count: the first `num_results` are kept). It needs no key, but it
answers JSON only when its ``settings.yml`` lists ``json`` under ``search: formats:``; otherwise
every query is a 403, and the error says so.
"""

from __future__ import annotations

from typing import ClassVar

from ...model.retry import RetryPolicy
from ..search import SearchResult
from .attempts import retried, search_policy
from .hits import hits
from .request import Request, fetch_json

__all__ = ["SearXNG"]


class SearXNG:
    """The `SearchBackend` of a SearXNG instance at `url`."""

    name: ClassVar[str] = "searxng"

    def __init__(self, *, url: str, timeout: float = 10.0, policy: RetryPolicy | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.policy = policy or search_policy()

    async def search(self, query: str, *, num_results: int) -> list[SearchResult]:
        request = Request(
            backend=self.name,
            method="GET",
            url=f"{self.url}/search",
            params={"q": query, "format": "json"},
            headers={"Accept": "application/json"},
            timeout=self.timeout,
            refused_fix="let the instance answer JSON: list json under `search: formats:` in its "
            "settings.yml",
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
                limit=num_results,
            )

        return await retried(attempt, backend=self.name, policy=self.policy)
