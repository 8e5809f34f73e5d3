"""`KeyedService`: what a search service reached over its HTTP API with a key is built from.

Brave and Tavily differ in their requests and answers (`BraveSearch.search`, `Tavily.search`),
not in what they need to be reached: the key (kept as a `SecretStr`, so no repr, log or error
shows it), the API's base address (the service's own by default; another for a proxy or a
server of the tests), the timeout of one request and the retry policy (`search_policy`).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import SecretStr

from ...model.retry import RetryPolicy
from .attempts import search_policy

__all__ = ["KeyedService"]


class KeyedService:
    """A search backend at `url` (None: the service's `default_url`), authorised by `api_key`."""

    name: ClassVar[str]
    default_url: ClassVar[str]

    def __init__(
        self,
        *,
        api_key: str | SecretStr,
        url: str | None = None,
        timeout: float = 10.0,
        policy: RetryPolicy | None = None,
    ) -> None:
        self.api_key = api_key if isinstance(api_key, SecretStr) else SecretStr(api_key)
        self.url = (url or self.default_url).rstrip("/")
        self.timeout = timeout
        self.policy = policy or search_policy()
