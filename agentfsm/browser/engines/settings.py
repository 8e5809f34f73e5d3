"""`[search]`: which backends `web_search` asks, in order of fallback, and each one's settings.

Nothing is asked unless ``backends`` names it: the default is none, and `web_search` then tells
the model there is no search. Each backend has a table of its own (``[search.searxng]``,
``[search.brave]``, ``[search.tavily]``, ``[search.duckduckgo]``): the service's address
(``url``, its base, so that a server of your own can stand in for it), the key where the service
needs one, and the timeout of one request. A key is a `SecretStr` (``**********`` in every dump,
repr and error); left unset, the service's usual variable (``BRAVE_API_KEY``,
``TAVILY_API_KEY``) is read when the backends are built (`build_search`), and
``AGENTFSM_SEARCH__BRAVE__API_KEY`` sets it as any other key of the configuration.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from ...errors import ConfigError

__all__ = [
    "BACKENDS",
    "BACKEND_TABLES",
    "BackendName",
    "BraveSettings",
    "DuckDuckGoSettings",
    "SearXNGSettings",
    "SearchSettings",
    "TavilySettings",
]

BackendName = Literal["searxng", "brave", "tavily", "duckduckgo"]
"""The backends `[search] backends` may name."""
BACKENDS: tuple[BackendName, ...] = get_args(BackendName)


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    timeout: float = Field(default=10.0, gt=0)
    """Seconds one request may take, from connecting to the last byte of the answer."""


class _Service(_Table):
    url: str
    """The service's base address: http(s), no query."""

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        url = value.strip().rstrip("/")
        scheme, _, rest = url.partition("://")
        if scheme.lower() not in ("http", "https") or not rest or "?" in rest or "#" in rest:
            raise ConfigError(
                f"{value!r} is not a service's address: give its http(s) base URL, e.g. "
                "'http://127.0.0.1:8888' (no query)"
            )
        return url


class SearXNGSettings(_Service):
    """``[search.searxng]``: a SearXNG instance (its JSON API, ``/search?format=json``)."""

    url: str = "http://127.0.0.1:8888"
    """The instance's address (SearXNG's own default port here). It answers JSON only when its
    ``settings.yml`` lists ``json`` under ``search: formats:``; otherwise every query gets 403."""


class BraveSettings(_Service):
    """``[search.brave]``: the Brave Search API (``/res/v1/web/search``)."""

    url: str = "https://api.search.brave.com"
    api_key: SecretStr | None = None
    """The subscription token, sent as ``X-Subscription-Token`` (unset: ``BRAVE_API_KEY``)."""


class TavilySettings(_Service):
    """``[search.tavily]``: the Tavily search API (``POST /search``)."""

    url: str = "https://api.tavily.com"
    api_key: SecretStr | None = None
    """The key (``tvly-...``), sent as ``Authorization: Bearer`` (unset: ``TAVILY_API_KEY``)."""


class DuckDuckGoSettings(_Table):
    """``[search.duckduckgo]``: DuckDuckGo through the ``ddgs`` package (the `search` extra),
    which reads its result pages: no key, and no address of its own to set."""

    region: str = "us-en"
    """The results' region, as ddgs takes it (``us-en``, ``uk-en``, ``de-de``, ``wt-wt`` for none)."""
    safesearch: Literal["on", "moderate", "off"] = "moderate"
    """DuckDuckGo's filter of explicit results, as ddgs takes it."""


BACKEND_TABLES: dict[str, type[BaseModel]] = {
    "searxng": SearXNGSettings,
    "brave": BraveSettings,
    "tavily": TavilySettings,
    "duckduckgo": DuckDuckGoSettings,
}
"""Each backend's ``[search.<backend>]`` table."""


class SearchSettings(BaseModel):
    """The ``[search]`` section: the backends, in order, and how each request is retried."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    backends: tuple[BackendName, ...] = ()
    """The backends `web_search` asks, in order: one that fails (after its retries) or finds
    nothing hands the query to the next. Empty (the default): no search, nothing contacted."""
    max_attempts: int = Field(default=3, ge=1, le=10)
    """Tries of one request that failed on a rate limit (429), a server error (5xx), a timeout or
    a lost connection; a service that has never answered gets two. Other errors are not retried."""
    backoff_max: float = Field(default=10.0, gt=0, le=300)
    """The longest wait between two tries, in seconds: a 429's ``Retry-After`` is honoured up to
    it, and a longer one is cut to it."""
    searxng: SearXNGSettings = Field(default_factory=SearXNGSettings)
    brave: BraveSettings = Field(default_factory=BraveSettings)
    tavily: TavilySettings = Field(default_factory=TavilySettings)
    duckduckgo: DuckDuckGoSettings = Field(default_factory=DuckDuckGoSettings)

    @field_validator("backends", mode="before")
    @classmethod
    def _known(cls, value: Any) -> Any:
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list | tuple):
            return value  # pydantic says what it expected
        for name in names:
            if name not in BACKENDS:
                raise ConfigError(f"unknown search backend {name!r}: choose from {', '.join(BACKENDS)}")
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ConfigError(f"{', '.join(twice)} named twice: name each backend once, in the order to ask")
        return tuple(names)
