"""`DuckDuckGo`: DuckDuckGo's results through the ``ddgs`` package (the `search` extra), its one importer.

ddgs reads DuckDuckGo's result pages (no key, no address to set) and is synchronous: each
search runs in a worker thread, off the event loop. Its answer is a list of ``{"href", "title",
"body"}``. It raises when it finds nothing (``No results found.``), which is read as no hits
here, so the next backend is asked; its rate limit and its timeout are retried like a service's
429 and timeout; any other failure of it is said as it is, once. Only DuckDuckGo is asked (ddgs's
``backend="duckduckgo"``), not the other engines ddgs also knows.
"""

from __future__ import annotations

import asyncio
import math
from typing import ClassVar

from ...errors import MissingExtraError, SearchError, SearchTimeoutError
from ...model.retry import RetryPolicy
from ..search import SearchResult
from .attempts import retried, search_policy
from .hits import hits

__all__ = ["DuckDuckGo", "ddgs_missing"]

_NOTHING = "No results found."
"""What ddgs raises when the search found nothing."""
_ELSEWHERE = "or list another backend after it in [search] backends"


def ddgs_missing() -> str | None:
    """Why DuckDuckGo cannot be asked (ddgs is not installed), or None."""
    import importlib.util

    if importlib.util.find_spec("ddgs") is None:
        return "DuckDuckGo needs the ddgs package: pip install 'agentfsm[search]'"
    return None


class DuckDuckGo:
    """The `SearchBackend` of DuckDuckGo, through ddgs."""

    name: ClassVar[str] = "duckduckgo"

    def __init__(
        self,
        *,
        region: str = "us-en",
        safesearch: str = "moderate",
        timeout: float = 10.0,
        policy: RetryPolicy | None = None,
    ) -> None:
        self.region = region
        self.safesearch = safesearch
        self.timeout = timeout
        self.policy = policy or search_policy()

    async def search(self, query: str, *, num_results: int) -> list[SearchResult]:
        async def attempt() -> list[SearchResult]:
            return await asyncio.to_thread(self._search, query, num_results)

        return await retried(attempt, backend=self.name, policy=self.policy)

    def _search(self, query: str, num_results: int) -> list[SearchResult]:
        """One search, in the worker thread."""
        try:
            from ddgs import DDGS
            from ddgs.exceptions import DDGSException, RatelimitException, TimeoutException
        except ImportError as exc:
            raise MissingExtraError(ddgs_missing() or f"ddgs cannot be imported: {exc}") from exc
        try:
            found = DDGS(timeout=math.ceil(self.timeout)).text(
                query,
                max_results=num_results,
                region=self.region,
                safesearch=self.safesearch,
                backend="duckduckgo",
            )
        except RatelimitException as exc:
            raise SearchError(
                f"duckduckgo: rate limited ({_said(exc)})",
                backend=self.name,
                fix=f"wait, {_ELSEWHERE}",
                status_code=429,
            ) from exc
        except TimeoutException as exc:
            raise SearchTimeoutError(
                f"duckduckgo: no answer within {self.timeout:g} s ({_said(exc)})",
                backend=self.name,
                fix=f"raise [search.duckduckgo] timeout, {_ELSEWHERE}",
            ) from exc
        except DDGSException as exc:
            if exc.args == (_NOTHING,):
                return []
            raise SearchError(
                f"duckduckgo: ddgs failed: {_said(exc)}",
                backend=self.name,
                fix=f"DuckDuckGo's pages could not be read: try later, {_ELSEWHERE}",
            ) from exc
        return hits(
            found,
            backend=self.name,
            where="text()",
            url="href",
            title="title",
            description="body",
            limit=num_results,
            fix="this ddgs answers in a shape not read here: install ddgs 9 (pip install 'agentfsm[search]')",
        )


def _said(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
