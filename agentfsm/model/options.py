"""`LLMOptions`: the options of the model adapters, `LLM` (litellm) and `OpenAICompatible`,
which are built from them.

Kept apart from `agentfsm.model.llm` so that what a trace records of a model
(`describe_model`) can be read without loading the adapter: a run on a test
model records the same keys as one on `LLM`.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field, fields
from typing import Annotated, Any

from ..errors import ConfigError
from ..options import Options, Spec, option_fields

__all__ = ["LLMOptions", "describe_model"]

# Keys litellm takes that `extra` may not set, though no option is named after them; an option's
# own name is refused too ("use `timeout`").
_NOT_IN_EXTRA = {
    "messages": "the `messages` of ask_tool",
    "tools": "the `tools` of ask_tool",
    "tool_choice": "the `tool_choice` of ask_tool",
    "request_timeout": "`timeout`",
    "num_retries": "`max_attempts` (retries are LLM's own)",
    "max_retries": "`max_attempts` (retries are LLM's own)",
    "max_completion_tokens": "`max_tokens`",
}


def _named(value: str) -> bool:
    return bool(value.strip())


def _is_url(value: str) -> bool:
    return value.startswith(("http://", "https://"))


@dataclass(frozen=True)
class LLMOptions(Options):
    """How an adapter (`LLM`, `OpenAICompatible`) reaches a model, what a run may spend, how it retries,
    and what the model is where litellm's map does not know it (`max_input_tokens`, `vision`,
    `reasoning`, `takes_temperature`: each declared value is used instead of the map's)."""

    model: Annotated[str, Spec(valid=_named, expected="a litellm model name such as 'openai/gpt-4o-mini'")]
    """Any litellm model name; ``openai/<name>`` with `api_base` reaches any OpenAI-compatible server."""
    _: KW_ONLY
    api_base: Annotated[
        str | None,
        Spec(
            valid=_is_url,
            expected="a URL starting with http:// or https:// (e.g. 'http://127.0.0.1:8000/v1')",
        ),
    ] = None
    """The server's base URL (None: the provider's own); docs/guides/models.md shows it per provider."""
    api_version: Annotated[str | None, Spec(valid=_named, expected="a version such as '2024-10-21'")] = None
    """The API version some providers take (Azure's ``api-version``; None: litellm's default)."""
    api_key: Annotated[str | None, Spec(secret=True)] = field(default=None, repr=False)
    """The provider's key (None: litellm reads the provider's environment variable)."""
    temperature: Annotated[float | None, Spec(ge=0, le=2)] = 0.0
    """Sampling temperature (None: the provider's default). Sent to every model that accepts it;
    models that take only the default (OpenAI's o-series and gpt-5, per litellm) are sent none,
    and so is a model declared not to take one (`takes_temperature`)."""
    max_tokens: Annotated[int | None, Spec(ge=1, none="no limit")] = 4096
    """Tokens one reply may have (sent as `max_completion_tokens` to reasoning models)."""
    max_input_tokens: Annotated[int | None, Spec(ge=1, none="the model's own window")] = None
    """The model's input window, checked before sending: a request over it is not sent and the run
    ends with `token_limit` (None: litellm's map says, and for a model it does not know, such as
    ``openai/<your-name>``, nothing is checked)."""
    vision: bool | None = None
    """Whether the model accepts images: images (a browser's screenshots) are sent as image parts,
    else each is replaced by a note (None: litellm's map says, and a model it does not know gets
    the note). Declare it for a vision model on your own server (Qwen2.5-VL on vLLM, say)."""
    reasoning: bool | None = None
    """Whether the model is a reasoning model, sent `max_tokens` as ``max_completion_tokens``
    (None: litellm's map, else the name: o1, o3, o4, gpt-5). It does not decide the temperature:
    that is `takes_temperature`."""
    takes_temperature: bool | None = None
    """Whether the model takes a temperature: False sends none, True sends `temperature` (None:
    litellm's rule, else the name: OpenAI's o-series and gpt-5 take only the default)."""
    token_budget: Annotated[int | None, Spec(ge=1, none="no limit")] = None
    """Tokens one agent run may spend, input and output; then it ends with `token_limit`."""
    timeout: Annotated[float, Spec(gt=0)] = 60.0
    """Seconds one request may take, whole (a stream that trickles is cut at it too)."""
    max_attempts: Annotated[int, Spec(ge=1, traced=False)] = 6
    """Tries of a request that fails transiently (rate limit, timeout, connection, 5xx)."""
    backoff_base: Annotated[float, Spec(ge=0, traced=False)] = 1.0
    """Seconds before the first retry, doubled for each next one (a Retry-After is honoured)."""
    backoff_max: Annotated[float, Spec(ge=0, traced=False)] = 60.0
    """The longest wait between two tries; a longer Retry-After is cut to it (the retry's warning says so)."""
    retry_timeout: Annotated[float | None, Spec(gt=0, none="no bound", traced=False)] = 300.0
    """Seconds one call may spend in all, from its first request, retries and waits included: no
    retry starts and no attempt goes on past it (a reply still coming is cut), and a Retry-After
    longer than what is left ends the retries (the error says so)."""
    stream: Annotated[bool, Spec(traced=False)] = False
    """Stream each reply: its text and tool-call arguments reach the run's events (`TextDelta`,
    `ToolCallDelta`) as they arrive. The assembled reply is the one a request without streaming
    gets, so memory, traces, checkpoints and replay are the same either way (and it is not traced)."""
    extra: Annotated[dict[str, Any] | None, Spec(traced=False)] = None
    """Passed to ``litellm.acompletion`` as is (headers, provider options); `OpenAICompatible` reads it
    the same way (``extra_headers`` as headers, ``extra_body`` and the rest into the body). Never traced."""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "model", self.model.strip())
        if self.extra is not None:
            object.__setattr__(self, "extra", dict(self.extra))  # the caller's dict may change later
        for key in self.extra or {}:
            instead = f"`{key}`" if key in _OPTION_NAMES else _NOT_IN_EXTRA.get(key)
            if instead is not None:
                raise ConfigError(f"`extra` may not set {key!r}; use {instead} instead")


_OPTION_NAMES = frozenset(f.name for f in fields(LLMOptions))


def describe_model(model: object) -> dict[str, Any]:
    """What a trace records of a chat model: its class, and each traced `LLMOptions` it has.

    Any `ChatModel` may have some (every one has `token_budget`); an option it lacks is None.
    Options that are secret or untraced (`api_key`, `extra`, ...) are never read. A model that
    wraps another to add something around its calls (a durable run's) names it as
    ``__wrapped__``, Python's convention for wrappers: the trace describes the wrapped model,
    the one configured.
    """
    while (inner := getattr(model, "__wrapped__", None)) is not None:
        model = inner
    described: dict[str, Any] = {"class": type(model).__name__}
    for option in option_fields(LLMOptions):
        if option.recorded:
            value = getattr(model, option.name, None)
            if value is None or isinstance(value, str | int | float):
                described[option.name] = value
    return described
