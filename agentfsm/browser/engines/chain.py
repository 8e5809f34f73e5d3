"""`SearchChain`: the configured backends asked in turn, each the next one's fallback.

The first backend with hits answers. One that fails (after its own retries) or finds nothing
hands the query to the next, the failure logged as a ``search_fallback`` warning. When none
answers, the search found nothing if no backend failed; otherwise the last failure is raised: one
line naming the backend, what went wrong and the fix, and what the others did.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ...errors import SearchError
from ...log import event
from ..search import SearchBackend, SearchResult

__all__ = ["SearchChain", "backend_name"]


def backend_name(backend: SearchBackend) -> str:
    """A backend's `name` (ours have one), else its class's."""
    name = getattr(backend, "name", None)
    return name if isinstance(name, str) else type(backend).__name__


class SearchChain:
    """A `SearchBackend` that asks `backends` in order until one has hits."""

    def __init__(self, backends: Sequence[SearchBackend]) -> None:
        self.backends = tuple(backends)

    @property
    def names(self) -> list[str]:
        """The backends' names, in the order they are asked."""
        return [backend_name(backend) for backend in self.backends]

    async def search(self, query: str, *, num_results: int) -> list[SearchResult]:
        failures: list[SearchError] = []
        outcomes: list[tuple[str, str]] = []
        for backend in self.backends:
            name = backend_name(backend)
            try:
                found = list(await backend.search(query, num_results=num_results))
            except SearchError as exc:
                failures.append(exc)
                outcomes.append((name, "failed"))
                if backend is not self.backends[-1]:
                    event("search_fallback", level=logging.WARNING, backend=name, error=str(exc))
                continue
            if found:
                return found[:num_results]
            outcomes.append((name, "found nothing"))
        if not failures:
            return []
        last = failures[-1]
        others = [f"{name} {what}" for name, what in outcomes if name != last.backend]
        also = f" (also asked: {', '.join(others)})" if others else ""
        raise SearchError(
            f"{last}{also}",
            backend=last.backend,
            fix=last.fix,
            status_code=last.status_code,
            response_headers=last.response_headers,
        ) from last
