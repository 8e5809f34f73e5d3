"""What litellm knows of a model: its input window, vision, reasoning, and whether it takes a
temperature, looked up with the adapter's `api_base`, key and provider.

Kept apart from `llm.py` (which calls it with the litellm module, so nothing here imports
litellm) because the lookup has rules of its own:

- litellm's `supports_vision`/`supports_reasoning` take no `api_base`; one `get_model_info`
  with it answers all of them, and for Ollama it is a request to ``{api_base}/api/show``;
- litellm's own lookups on every request (its cost calculation, its pre-call checks) ask
  ``localhost:11434`` for an Ollama model whatever `api_base` is, on the event loop; the
  answer is put in litellm's model map (keyed by the model's name, so the first server asked
  is the one whose window counts), where those lookups find it;
- whether a temperature is sent is litellm's rule (`get_optional_params` with
  ``drop_params`` drops what OpenAI's o-series and gpt-5 refuse), for models in its map; for
  a name it has not mapped (its answers for any ``o3-*`` name are guesses), the name decides.

What the user declared (`LLMOptions`' `max_input_tokens`, `vision`, `reasoning`,
`takes_temperature`) is laid over what was looked up (`declared`), fact by fact: a model
served as ``openai/<name>`` is unknown to every catalogue, and only its user can say it
sees images. `OpenAICompatible`, which never imports litellm, starts from the bundled map
instead (`card_facts`); both adapters then ask the same record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .catalog import ModelCard, is_reasoning_name
from .options import LLMOptions

__all__ = ["ModelFacts", "card_facts", "declared", "look_up_facts", "stand_in", "unknown_facts"]


@dataclass(frozen=True)
class ModelFacts:
    """What the engine asks of a model: looked up once per adapter, with the user's declared
    values laid over (`declared`)."""

    vision: bool
    reasoning: bool
    temperature: bool
    """Whether a temperature other than the default is accepted."""
    input_window: int | None


def unknown_facts(model: str) -> ModelFacts:
    """The facts of a model litellm doesn't know: its name alone tells a reasoning model
    (`is_reasoning_name`); for a model litellm knows, litellm decides."""
    named = is_reasoning_name(model)
    return ModelFacts(vision=False, reasoning=named, temperature=not named, input_window=None)


def card_facts(model: str, card: ModelCard | None) -> ModelFacts:
    """The facts of `model` by litellm's bundled map (its `card`, None when the map does not know
    it), read without litellm: a reasoning model, by the map or its name, takes no temperature."""
    reasoning = is_reasoning_name(model) or (card is not None and card.reasoning)
    return ModelFacts(
        vision=card is not None and card.vision,
        reasoning=reasoning,
        temperature=not reasoning,
        input_window=card.max_input_tokens if card is not None else None,
    )


def declared(facts: ModelFacts, llm: LLMOptions) -> ModelFacts:
    """`facts` with each fact the user declared in `llm` in place of the catalogue's: each on its
    own (declaring `reasoning` leaves whether a temperature is sent to `takes_temperature`)."""
    return ModelFacts(
        vision=facts.vision if llm.vision is None else llm.vision,
        reasoning=facts.reasoning if llm.reasoning is None else llm.reasoning,
        temperature=facts.temperature if llm.takes_temperature is None else llm.takes_temperature,
        input_window=facts.input_window if llm.max_input_tokens is None else llm.max_input_tokens,
    )


def look_up_facts(litellm: Any, llm: LLMOptions) -> ModelFacts:
    """Ask litellm, with the adapter's `api_base` and key (one lookup: for Ollama it is a
    request to ``{api_base}/api/show``, never to localhost unless that is the server)."""
    unknown = unknown_facts(llm.model)
    try:
        name, provider, _, _ = litellm.get_llm_provider(llm.model, api_base=llm.api_base)
    except Exception:
        return unknown
    try:  # raises for models litellm has not mapped (any `openai/<your-name>`)
        info = litellm.get_model_info(
            name, custom_llm_provider=provider, api_base=llm.api_base, api_key=llm.api_key
        )
    except Exception:
        return unknown
    window = info.get("max_input_tokens")
    if provider in _LOOKS_UP_OVER_HTTP:
        _remember(litellm, f"{provider}/{name}", provider, window)
    known = name in litellm.model_cost or f"{provider}/{name}" in litellm.model_cost
    return ModelFacts(
        vision=bool(info.get("supports_vision")),
        reasoning=unknown.reasoning or bool(info.get("supports_reasoning")),
        temperature=_takes_temperature(litellm, llm, name, provider, info) if known else unknown.temperature,
        input_window=window if isinstance(window, int) and window > 0 else None,
    )


def _takes_temperature(litellm: Any, llm: LLMOptions, name: str, provider: str, info: Any) -> bool:
    """litellm's rule: `get_optional_params` with ``drop_params`` drops a temperature the model
    refuses (o-series and gpt-5 take only the default; gpt-5.1 any, unless reasoning is on)."""
    probe: dict[str, Any] = {"temperature": llm.temperature if llm.temperature is not None else 0.0}
    if llm.extra and "reasoning_effort" in llm.extra:
        probe["reasoning_effort"] = llm.extra["reasoning_effort"]
    try:
        mapped = litellm.get_optional_params(
            model=name, custom_llm_provider=provider, drop_params=True, model_info=info, **probe
        )
    except Exception:
        return not is_reasoning_name(name)
    return mapped.get("temperature") is not None


_LOOKS_UP_OVER_HTTP = frozenset({"ollama", "ollama_chat"})
"""Providers whose model info litellm fetches from the server (``/api/show``) when it is not in its map."""


def _remember(litellm: Any, key: str, provider: str, window: object) -> None:
    """Put what the server said of the model in litellm's map, so that litellm's own lookups on
    every request (its cost calculation, its pre-call checks) find it there instead of asking
    ``localhost:11434``, which they do, without `api_base`, on the event loop."""
    if key in litellm.model_cost:
        return
    limit = window if isinstance(window, int) and window > 0 else None
    # Set in the map directly: `litellm.register_model` first looks the model up, without api_base.
    litellm.model_cost[key] = {
        "litellm_provider": provider,
        "mode": "chat",
        "max_input_tokens": limit,
        "max_tokens": limit,
        "input_cost_per_token": 0.0,
        "output_cost_per_token": 0.0,
    }


def stand_in(litellm: Any, llm: LLMOptions) -> None:
    """The lookup is late: keep litellm's own lookups from asking ``localhost:11434`` meanwhile."""
    try:
        name, provider, _, _ = litellm.get_llm_provider(llm.model, api_base=llm.api_base)
    except Exception:
        return
    if provider in _LOOKS_UP_OVER_HTTP:
        _remember(litellm, f"{provider}/{name}", provider, None)
