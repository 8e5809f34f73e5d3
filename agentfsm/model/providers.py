"""`provider_of`: the provider a model's name addresses, told before anything is sent.

Why: litellm routes a request by the ``provider/`` prefix of the model's name, and guesses
the provider of a name without one from its lists of known models. A name it cannot place
is found out only by the first request: after the run started and after litellm's import
(seconds), in litellm's words, exit 1. The two usual mistakes are a served model's bare name
(``--model gpt-oss --api-base http://127.0.0.1:8000/v1``, where ``openai/gpt-oss`` was
meant) and a misspelt prefix (``antropic/...``); each is a `ConfigError` here that names the
fix, so the command line exits 2 before any run.

Decided offline, without litellm: a bare name litellm's bundled model map files under
OpenAI or Anthropic (a bare ``gpt-4o-mini`` is OpenAI's, as litellm routes it), and a bare
name the map does not know, sent to a server on this machine or a private network
(`api_base` on a loopback or private address, or ``localhost``), which no list of litellm's
places: refused in milliseconds. Every other name is litellm's to place (its
`get_llm_provider`, which its requests route by; its import is paid before the run instead
of during it): a bare name it cannot place is refused, and so is a prefix that is none of
its providers (`litellm.provider_list`), with the nearest ones. (`check_credentials` asks
only about the names whose prefix it does not know itself: ``openai/...`` and the other
providers it checks offline never wait for litellm.)

A bare name is not taken to mean ``openai/`` when `api_base` is given: a local base may as
well be Ollama's own API or a proxy of another provider's, and litellm does not guess so
either. The message says what to write instead.
"""

from __future__ import annotations

import difflib
import ipaddress
from urllib.parse import urlsplit

from ..errors import ConfigError
from .catalog import map_provider

__all__ = ["PROVIDERS_URL", "provider_of"]

PROVIDERS_URL = "https://docs.litellm.ai/docs/providers"
"""Where litellm lists its providers and how each is named (the messages point there)."""

_BARE_OFFLINE = frozenset({"openai", "anthropic"})
"""Providers whose bare model names in the map litellm routes to them, every one (measured
against litellm 1.110's `get_llm_provider`); other providers' bare names are litellm's to place."""


def provider_of(model: str, *, api_base: str | None = None) -> str:
    """The provider `model` addresses: its prefix, or for a bare name the one litellm routes it
    to; `ConfigError` naming the fix when it addresses none. May import litellm (see above)."""
    prefix, slash, _ = model.partition("/")
    if not slash:
        mapped = map_provider(model)
        if mapped in _BARE_OFFLINE:
            return mapped
        if mapped is None and api_base is not None and _on_this_network(api_base):
            raise ConfigError(_no_provider(model, api_base))
    from .llm import load_litellm

    litellm = load_litellm()
    try:
        _, provider, _, _ = litellm.get_llm_provider(model, api_base=api_base)
    except Exception:  # litellm's BadRequestError: it cannot place the name
        if not slash:
            raise ConfigError(_no_provider(model, api_base)) from None
        known = sorted(str(getattr(item, "value", item)) for item in litellm.provider_list)
        if prefix not in known:
            raise ConfigError(_unknown_provider(model, prefix, known)) from None
        return prefix  # a provider litellm has, refusing this name: the request will say why
    return str(provider)


def _on_this_network(api_base: str) -> bool:
    """`api_base` names this machine or a private network: ``localhost``, a loopback, private,
    link-local or unspecified address."""
    host = urlsplit(api_base).hostname
    if not host:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local or address.is_unspecified


def _no_provider(model: str, api_base: str | None) -> str:
    server = f"the OpenAI-compatible server at {api_base}" if api_base else "an OpenAI-compatible server"
    return (
        f"model {model!r} names no provider: for {server} write it 'openai/{model}'; "
        f"for another provider, PROVIDER/NAME (litellm's providers: {PROVIDERS_URL})"
    )


def _unknown_provider(model: str, prefix: str, known: list[str]) -> str:
    near = difflib.get_close_matches(prefix, known, n=3)
    guess = f" (did you mean {' or '.join(repr(name) for name in near)}?)" if near else ""
    return (
        f"model {model!r}: {prefix!r} is not a provider litellm knows{guess}; "
        f"its providers are listed at {PROVIDERS_URL}, and 'openai/NAME' reaches any "
        "OpenAI-compatible server"
    )
