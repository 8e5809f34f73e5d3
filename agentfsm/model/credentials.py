"""`check_credentials`: is there a key for the model's provider, before anything is sent?

A missing key found by the first request costs an import, a connection and an error
message in the provider's words; found here, offline, it is one line naming the variable to
set, and the command line exits 2 before any run starts. The check is keyed on the model's
name and the options only, so any adapter (litellm's `LLM`, or another speaking the same
wire) can be checked the same way.

The model's name is checked first (`agentfsm.model.providers`): a bare name that addresses no
provider, or a prefix that is none, is a `ConfigError` saying what to write instead.

What counts as a credential:
- ``openai/<name>`` with `api_base` needs none: a local vLLM or llama.cpp server usually takes
  no key, and `LLM` then sends a placeholder (a server that wants a key answers 401, which
  is never retried and says to set it). Without `api_base`, or with OpenAI's own
  (``https://api.openai.com/v1``), it needs ``OPENAI_API_KEY`` or `api_key`. This case is
  decided without litellm, whose import takes seconds, by `check_openai_key`, which
  `OpenAICompatible` also calls before each request: both say the same line.
- The providers that take one key variable (`KEY_VARIABLES`: Anthropic, Gemini, Mistral,
  DeepSeek, Groq, Cohere) are decided without litellm too, so a missing key is reported in
  milliseconds rather than after litellm's import; a test holds the table to what
  ``litellm.validate_environment`` says of each.
- Every other provider: what ``litellm.validate_environment`` reports missing, less what the
  options supply (`api_key` for a key, `api_base` for a base URL, `api_version` for a
  version) and less what litellm does not need after all: Ollama's base URL (it defaults to
  localhost) and Azure's API version (litellm has a default). Providers whose credentials
  come from a chain of files and roles (Bedrock, Vertex AI, SageMaker) are not checked:
  the environment is only one place their SDKs look.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from ..errors import ConfigError
from .providers import provider_of

__all__ = ["OPENAI_API_BASE", "check_credentials", "check_openai_key", "is_openai_base"]

OPENAI_API_BASE = "https://api.openai.com/v1"
"""OpenAI's own API, where an ``openai/`` model goes without `api_base`."""

_CHAINED = frozenset(
    {"bedrock", "bedrock_converse", "sagemaker", "sagemaker_chat", "vertex_ai", "vertex_ai_beta"}
)
_NOT_NEEDED = frozenset({"OLLAMA_API_BASE", "AZURE_API_VERSION"})
KEY_VARIABLES: dict[str, tuple[str, ...]] = {
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "mistral": ("MISTRAL_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "groq": ("GROQ_API_KEY",),
    "cohere": ("COHERE_API_KEY",),
}
"""The variables litellm reads a key from, by provider prefix (any one of them will do)."""


def check_credentials(
    model: str, *, api_key: str | None = None, api_base: str | None = None, api_version: str | None = None
) -> None:
    """Raise `ConfigError` naming the environment variable to set when the provider of `model`
    has no credentials; return when it has, or when it cannot be told offline."""
    provider, slash, _ = model.partition("/")
    if not slash:  # a bare name: the provider litellm routes it to, or a `ConfigError` saying what to write
        provider = provider_of(model, api_base=api_base)
    if provider == "openai":
        check_openai_key(model, api_key=api_key, api_base=api_base)
        return
    if provider in _CHAINED:
        return
    variables = KEY_VARIABLES.get(provider)
    if variables is not None:
        if api_key or any(os.environ.get(name) for name in variables):
            return
        raise ConfigError(_message(model, list(variables), "api-key"))
    if slash:
        provider_of(model, api_base=api_base)  # a prefix litellm knows, else a `ConfigError` naming it
    from .llm import load_litellm

    litellm = load_litellm()
    try:
        _, resolved, _, _ = litellm.get_llm_provider(model, api_base=api_base)
        report = litellm.validate_environment(model=model, api_key=api_key, api_base=api_base)
    except Exception:  # an unknown provider: the request will say so, in its words
        return
    if resolved in _CHAINED:
        return
    missing = [name for name in report.get("missing_keys") or [] if name not in _NOT_NEEDED]
    keys = [name for name in missing if _is_key(name)]
    if keys and api_key:
        keys = []
    bases = [name for name in missing if name.endswith(("_API_BASE", "_BASE_URL")) and not api_base]
    versions = [name for name in missing if name.endswith("_API_VERSION") and not api_version]
    if keys:  # several key variables are alternatives (Gemini: GEMINI_API_KEY or GOOGLE_API_KEY)
        keys.sort(key=lambda name: not name.startswith(resolved.upper()))
        raise ConfigError(_message(model, keys, "api-key"))
    if bases:
        raise ConfigError(_message(model, bases[:1], "api-base"))
    if versions:
        raise ConfigError(_message(model, versions[:1], "api-version"))


def is_openai_base(api_base: str | None) -> bool:
    """Whether requests go to OpenAI's own servers: no `api_base`, or one on OpenAI's host."""
    return api_base is None or urlsplit(api_base).hostname == urlsplit(OPENAI_API_BASE).hostname


def check_openai_key(model: str, *, api_key: str | None = None, api_base: str | None = None) -> None:
    """Raise `ConfigError` naming ``OPENAI_API_KEY`` when `model` would be sent to OpenAI's own
    servers (`is_openai_base`) with no key: neither `api_key` nor the variable. Another server
    (vLLM, llama.cpp) usually takes none, and says so with a 401 if it does."""
    if api_key or not is_openai_base(api_base) or os.environ.get("OPENAI_API_KEY"):
        return
    raise ConfigError(_message(model, ["OPENAI_API_KEY"], "api-key"))


def _is_key(name: str) -> bool:
    return name.endswith(("_KEY", "_TOKEN", "_SECRET"))


def _message(model: str, names: list[str], flag: str) -> str:
    """``ANTHROPIC_API_KEY is not set (model 'anthropic/...'): export it or pass --api-key``."""
    named = names[0] + (f" (or {' or '.join(names[1:])})" if len(names) > 1 else "")
    return f"{named} is not set (model {model!r}): export it or pass --{flag}"
