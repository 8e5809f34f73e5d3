"""A service's list of hits read as `SearchResult`s: the same checks for every backend.

A list that is not a list is the service's answer misread (a wrong address, a changed API): a
`SearchError` naming the field, never retried. A hit without an http(s) address is skipped (it
cannot be opened); a missing or non-text title or description is empty. HTML in them (Brave marks
the words it matched with ``<strong>``) is removed, entities unescaped, whitespace made single.
"""

from __future__ import annotations

import html
import re

from ...errors import SearchError
from ..search import SearchResult

__all__ = ["hits"]

_TAG = re.compile(r"<[^>]{0,200}>")


def hits(
    items: object,
    *,
    backend: str,
    where: str,
    url: str,
    title: str,
    description: str,
    limit: int,
    fix: str | None = None,
) -> list[SearchResult]:
    """The first `limit` hits of `items` (the service's list, found at `where` in its answer), the
    keys `url`, `title` and `description` of each read. `fix`: what to do when `items` is not a
    list (default: check the backend's ``url``)."""
    if not isinstance(items, list):
        raise SearchError(
            f"{backend}: the answer has no list at `{where}` (found {type(items).__name__})",
            backend=backend,
            fix=fix or f"check [search.{backend}] url: it must be the service's address",
        )
    found = []
    for item in items:
        if not isinstance(item, dict):
            continue
        address = item.get(url)
        if not isinstance(address, str) or not address.lower().startswith(("http://", "https://")):
            continue
        found.append(
            SearchResult(url=address, title=_text(item.get(title)), description=_text(item.get(description)))
        )
        if len(found) >= limit:
            break
    return found


def _text(value: object) -> str:
    if not isinstance(value, str):
        return ""
    return " ".join(html.unescape(_TAG.sub("", value)).split())
