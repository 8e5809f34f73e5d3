"""One request to a search service's JSON API, over aiohttp (the browser wing's one importer of it).

`fetch_json` makes one attempt and says how it failed in a `SearchError` that the retries read
(`attempts.py`): `SearchConnectionError` (refused, dropped, cut short), `SearchTimeoutError`, an
HTTP status with the answer's headers (a 429's ``Retry-After``), or a body that is not JSON. Each
error also carries the fix for when it is the last word: a refused key names its setting, a
refused connection the address.

A session is made for each request: a search is a few requests in a run, so nothing is worth
keeping open, and nothing is left for the agent to close. A service's key travels in a header and
is never in a message: any text of an answer a message quotes has it blanked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import SecretStr

from ...errors import SearchConnectionError, SearchError, SearchTimeoutError
from ...model.retry import unreachable

__all__ = ["Request", "fetch_json"]

_EXCERPT = 200
"""Characters of an answer's body an error quotes."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Request:
    """What to send, and what to say when it fails."""

    backend: str
    """The backend's name, which every message starts with (``brave: ...``)."""
    method: Literal["GET", "POST"]
    url: str
    timeout: float
    params: Mapping[str, str] = field(default_factory=dict)
    body: Mapping[str, Any] | None = None
    """Sent as JSON (a POST's)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    secret: SecretStr | None = None
    """The key in `headers`: blanked in whatever a message quotes."""
    refused_fix: str = ""
    """What to do when the service answers 401 or 403 (a key to check, a format to enable)."""

    def excerpt(self, raw: bytes) -> str:
        """The start of an answer's body, on one line, the key blanked."""
        text = " ".join(raw[:_EXCERPT].decode("utf-8", "replace").split())
        if self.secret is not None and self.secret.get_secret_value():
            text = text.replace(self.secret.get_secret_value(), "<hidden>")
        return text + ("..." if len(raw) > _EXCERPT else "")


async def fetch_json(request: Request) -> Any:
    """The JSON of the service's answer to `request`: one attempt, or a `SearchError` saying why not."""
    import aiohttp

    name, url = request.backend, request.url
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                request.method,
                url,
                params=dict(request.params),
                json=request.body,
                headers=dict(request.headers),
                timeout=aiohttp.ClientTimeout(total=request.timeout),
            ) as response,
        ):
            raw = await response.read()
            status = response.status
            headers = {key.lower(): value for key, value in response.headers.items()}
    except TimeoutError as exc:  # aiohttp's own timeouts are TimeoutErrors too
        lost = unreachable(exc)
        what = f"cannot connect to {url} ({lost[0]})" if lost else f"no answer from {url}"
        raise SearchTimeoutError(
            f"{name}: {what} within {request.timeout:g} s",
            backend=name,
            fix=f"check [search.{name}] url, or raise [search.{name}] timeout",
        ) from exc
    except aiohttp.ClientError as exc:
        lost = unreachable(exc)
        what = f"cannot connect to {url} ({lost[0]})" if lost else f"the connection to {url} failed: {exc}"
        raise SearchConnectionError(
            f"{name}: {what}",
            backend=name,
            fix=f"check [search.{name}] url and that the service is running",
        ) from exc
    if status >= 400:
        raise SearchError(
            f"{name}: HTTP {status} from {url}: {request.excerpt(raw) or '(no body)'}",
            backend=name,
            fix=_status_fix(request, status),
            status_code=status,
            response_headers=headers,
        )
    try:
        return json.loads(raw)
    except ValueError:
        raise SearchError(
            f"{name}: the answer from {url} is not JSON: {request.excerpt(raw) or '(no body)'}",
            backend=name,
            fix=f"check [search.{name}] url: it must be the service's address",
        ) from None


def _status_fix(request: Request, status: int) -> str:
    name = request.backend
    if status in (401, 403) and request.refused_fix:
        return request.refused_fix
    if status == 429:
        return (
            "the service's rate limit: wait, raise [search] backoff_max to wait longer between "
            "tries, or list another backend after it in [search] backends"
        )
    if status >= 500:
        return "the service is failing: try later, or list another backend after it in [search] backends"
    if status == 404:
        return f"check [search.{name}] url: there is no search at that address"
    return "the service refused the query as sent"
