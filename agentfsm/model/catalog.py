"""What is known about a model without importing litellm: its input window, prices, images, reasoning.

litellm ships its model map as a JSON file inside its package. Importing
litellm takes seconds; reading that file takes ~40 ms, and finding it
(`importlib.util.find_spec`) executes nothing of the package. So a model that
does not go through litellm (`OpenAICompatible`) still knows the same window
and prices as `LLM`, and computes the same cost. (The `genai-prices` package
was measured too: ~150 ms to import, and it knows prices only, not windows or
image support.) Without litellm installed, or for a model the map does not
know, nothing is known: no check before sending, no cost, no images.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

__all__ = ["ModelCard", "card_for", "is_reasoning_name", "map_provider"]

_MAP_FILE = "model_prices_and_context_window_backup.json"

# Names like these are reasoning models even when the map doesn't know them (an `openai/o3-mini`
# served by a proxy, say): they reject `max_tokens` and any temperature but the default.
_REASONING_NAME = re.compile(r"^(o[134]|gpt-5)([-.:_]|$)")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCard:
    """One model's entry in the map, the parts an adapter uses."""

    max_input_tokens: int | None = None
    """The input window, or None when the map gives none."""
    input_cost: float | None = None
    """Dollars per prompt token (None: unpriced)."""
    output_cost: float | None = None
    """Dollars per completion token (None: unpriced)."""
    cached_input_cost: float | None = None
    """Dollars per prompt token read from the provider's cache (None: billed as `input_cost`)."""
    vision: bool = False
    reasoning: bool = False

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float | None:
        """The dollars of one call, as litellm computes them; None when the model is unpriced."""
        if self.input_cost is None or self.output_cost is None:
            return None
        cached = min(max(cached_tokens, 0), prompt_tokens) if self.cached_input_cost is not None else 0
        total = (prompt_tokens - cached) * self.input_cost + completion_tokens * self.output_cost
        total += cached * (self.cached_input_cost or 0.0)
        return total if math.isfinite(total) else None


def is_reasoning_name(model: str) -> bool:
    """The model's name (without its provider prefix) is one of a reasoning family (o1, o3, gpt-5...)."""
    return bool(_REASONING_NAME.match(model.rsplit("/", 1)[-1].lower()))


def card_for(*names: str, provider: str = "openai") -> ModelCard | None:
    """The card of the first of `names` the map knows as a `provider` model, else None.

    A name is looked up as given (``openai/gpt-4o-mini``) and without its
    ``<provider>/`` prefix (``gpt-4o-mini``, how the map keys OpenAI's models);
    an entry of another provider is not taken for it.
    """
    models = _model_map()
    for name in names:
        for key in (name, name.removeprefix(f"{provider}/")):
            entry = models.get(key)
            if isinstance(entry, Mapping) and entry.get("litellm_provider") == provider:
                return _card(entry)
    return None


def map_provider(name: str) -> str | None:
    """The provider litellm's map files the model `name` under, as it is written (a bare
    ``gpt-4o-mini`` is ``openai``'s), or None when the map does not know the name."""
    entry = _model_map().get(name)
    provider = entry.get("litellm_provider") if isinstance(entry, Mapping) else None
    return provider if isinstance(provider, str) else None


def _card(entry: Mapping[str, Any]) -> ModelCard:
    window = entry.get("max_input_tokens")
    return ModelCard(
        max_input_tokens=window if isinstance(window, int) and window > 0 else None,
        input_cost=_price(entry.get("input_cost_per_token")),
        output_cost=_price(entry.get("output_cost_per_token")),
        cached_input_cost=_price(entry.get("cache_read_input_token_cost")),
        vision=entry.get("supports_vision") is True,
        reasoning=entry.get("supports_reasoning") is True,
    )


def _price(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        return float(value)
    return None


@functools.cache
def _model_map() -> Mapping[str, Any]:
    """litellm's bundled map, read once (the file does not change while the process runs), read-only;
    empty when litellm is not installed or the file is unreadable."""
    return MappingProxyType(_read_map())


def _read_map() -> dict[str, Any]:
    try:
        spec = importlib.util.find_spec("litellm")  # finds the package; runs none of it
    except (ImportError, ValueError):
        return {}
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        try:
            data = json.loads((Path(folder) / _MAP_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return data
    return {}
