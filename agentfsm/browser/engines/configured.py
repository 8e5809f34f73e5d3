"""`build_search`: the `[search]` section's backends, built in order into one `SearchChain`.

No backend named, no search (None): nothing is contacted, and `web_search` tells the model there
is none. A backend that cannot work is refused here, before any run, in one line with the fix: a
key that is nowhere (neither in its table nor in the service's variable), ddgs not installed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import assert_never

from pydantic import SecretStr

from ...errors import ConfigError, MissingExtraError
from ..search import SearchBackend
from .attempts import search_policy
from .brave import BraveSearch
from .chain import SearchChain
from .duckduckgo import DuckDuckGo, ddgs_missing
from .searxng import SearXNG
from .settings import SearchSettings
from .tavily import Tavily

__all__ = ["KEY_VARIABLES", "build_search"]

KEY_VARIABLES = {"brave": "BRAVE_API_KEY", "tavily": "TAVILY_API_KEY"}
"""The variable each keyed service's key is read from when its table sets none."""


def build_search(settings: SearchSettings, *, environ: Mapping[str, str] | None = None) -> SearchChain | None:
    """The backends `settings` names, in order, as one chain (None: none named). `environ`: where
    the keys' variables are read (default: the process's environment)."""
    if not settings.backends:
        return None
    environ = os.environ if environ is None else environ
    built: list[SearchBackend] = []
    for name in settings.backends:
        policy = search_policy(max_attempts=settings.max_attempts, backoff_max=settings.backoff_max)
        if name == "searxng":
            table = settings.searxng
            built.append(SearXNG(url=table.url, timeout=table.timeout, policy=policy))
        elif name == "brave":
            brave = settings.brave
            key = _key(name, brave.api_key, environ)
            built.append(BraveSearch(api_key=key, url=brave.url, timeout=brave.timeout, policy=policy))
        elif name == "tavily":
            tavily = settings.tavily
            key = _key(name, tavily.api_key, environ)
            built.append(Tavily(api_key=key, url=tavily.url, timeout=tavily.timeout, policy=policy))
        elif name == "duckduckgo":
            missing = ddgs_missing()
            if missing is not None:
                raise MissingExtraError(f"[search] backends names 'duckduckgo': {missing}")
            ddg = settings.duckduckgo
            built.append(
                DuckDuckGo(region=ddg.region, safesearch=ddg.safesearch, timeout=ddg.timeout, policy=policy)
            )
        else:
            assert_never(name)
    return SearchChain(built)


def _key(name: str, configured: SecretStr | None, environ: Mapping[str, str]) -> SecretStr:
    if configured is not None and configured.get_secret_value():
        return configured
    variable = KEY_VARIABLES[name]
    found = environ.get(variable, "").strip()
    if not found:
        raise ConfigError(
            f"[search] backends names {name!r}, which needs an API key: set [search.{name}] api_key, "
            f"{variable}, or AGENTFSM_SEARCH__{name.upper()}__API_KEY"
        )
    return SecretStr(found)
