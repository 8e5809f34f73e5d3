"""Settings: the TOML file, then `AGENTFSM_*` environment variables, then flags.

Why pydantic-settings: its sources read the file and the environment (an
``AGENTFSM_LLM__MODEL`` becomes ``[llm] model``), the layers are merged key by
key (an environment variable replaces one key of the file, not its whole
section), and the result is validated once, so a wrong value is reported with
its section and key whichever layer it came from. `Settings.load` turns
pydantic's errors into a one-line `ConfigError` that names the key, the bad
value, where it came from and what is allowed.

The `[agent]` and `[llm]` sections are made from the options records
(`ToolCallOptions`, `LLMOptions`): the keys, types, defaults and bounds are the
ones the agent and the LLM check when built, declared there once.
`[llm.<agent name>]` tables override `[llm]` for that agent only; an agent's
LLM is built from `Settings.llm_for(name)`. Agent options left unset stay
`None`, so each agent class keeps its own defaults (Manus: 20 steps, the
tool-calling agent: 30). `[sandbox]` is validated as `SandboxSettings`,
`[browser]` as `BrowserSettings`, `[search]` (and its `[search.<backend>]` tables) as
`SearchSettings`; each `[mcp.servers.<id>]` table is checked as `MCPServerSettings`;
`[telemetry]` as `TelemetrySettings`.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, create_model, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from ..agent.toolcall import ToolCallOptions
from ..browser.engines.settings import BACKEND_TABLES, SearchSettings
from ..browser.settings import BrowserSettings
from ..errors import ConfigError
from ..mcp.settings import (
    DEFAULT_REFRESH_EVERY,
    DEFAULT_TIMEOUT,
    MCPServerSettings,
    TransportType,
)
from ..model.options import LLMOptions
from ..options import Options, option_fields
from ..sandbox.settings import SandboxSettings

if TYPE_CHECKING:
    from ..model.llm import LLM
    from ..model.openai_compatible import OpenAICompatible

__all__ = [
    "DEFAULT_CONFIG_FILE",
    "ENV_PREFIX",
    "NO_MODEL_MESSAGE",
    "AgentSettings",
    "LLMClient",
    "LLMSettings",
    "MCPServerTable",
    "Settings",
    "TelemetrySettings",
    "build_llm",
]

DEFAULT_CONFIG_FILE = "agentfsm.toml"
ENV_PREFIX = "AGENTFSM_"
NO_MODEL_MESSAGE = (
    "no model configured: pass --model, set [llm] model in agentfsm.toml, or AGENTFSM_LLM__MODEL"
)
_SECRET_KEYS = frozenset(f.name for f in option_fields(LLMOptions) if f.spec.secret)

LLMClient = Literal["native", "litellm"]
"""Which adapter talks to the model: `OpenAICompatible` (aiohttp) or `LLM` (litellm)."""
_CLIENT_FIELD: Any = (
    LLMClient | None,
    Field(
        default=None,
        description="which adapter talks to the model: native (`OpenAICompatible`, `openai/` models only) "
        "or litellm (`LLM`); unset: native for `openai/` models, litellm for every other provider",
    ),
)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


_S = TypeVar("_S", bound=_Section)


def _section_of(
    name: str,
    record: type[Options],
    base: type[_S],
    *,
    unset_is_none: bool,
    doc: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> type[_S]:
    """A config section with the options of `record`, held to the same bounds.

    `unset_is_none`: every key defaults to None, "not configured" (the agent's own default
    then applies, or the table below's); otherwise the record's defaults, and None for an
    option the record requires (the model: `build_llm` reports it missing). A secret is a
    `SecretStr`; an option with a `file_none` accepts that value too (TOML has no null).
    """
    fields: dict[str, Any] = {}
    for option in option_fields(record):
        spec = option.spec
        ge = spec.ge if spec.file_none is None or spec.ge is None else min(spec.ge, spec.file_none)
        kind = SecretStr if spec.secret else option.type
        annotation: Any = Annotated[kind, Field(ge=ge, gt=spec.gt, le=spec.le)]
        default = None if unset_is_none or option.required else option.default
        if default is None:
            annotation = annotation | None
        fields[option.name] = (annotation, default)
    fields.update(extra or {})  # keys of the section that are not options of the record
    return create_model(name, __base__=base, __module__=__name__, __doc__=doc or base.__doc__, **fields)


class _AgentSection(_Section):
    """`[agent]`: the agent's options, those of `ToolCallOptions` (which documents them). Unset
    (None) keeps the agent's own default (Manus: 20 steps, the tool-calling agent: 30). Beside them,
    ``factory`` (``"MODULE:FUNCTION"``: the agent `run` builds when `--agent` names none) and
    ``tools`` (``["MODULE:FUNCTION", ...]``: functions the built-in agents take as tools)."""

    if TYPE_CHECKING:  # fields made with the record's (see `_section_of`'s `extra`), declared for the checker
        factory: str | None = None
        tools: list[str] | None = None

    def agent_kwargs(self) -> dict[str, Any]:
        """The keyword arguments to pass to the agent: only what was configured."""
        kwargs = {}
        for option in option_fields(ToolCallOptions):
            value = getattr(self, option.name)
            if value is not None:
                kwargs[option.name] = None if value == option.spec.file_none else value
        return kwargs


class _LLMOptionsSection(_Section):
    """One agent's LLM connection: the options of `LLMOptions` (which documents them), with its
    defaults. `api_key` is a `SecretStr`: its repr and every dump show ``**********``."""

    if TYPE_CHECKING:  # a field made with the records' (see `_CLIENT_FIELD`), declared for the checker
        client: LLMClient | None = None

    def llm_kwargs(self) -> dict[str, Any]:
        """`LLM`'s keyword arguments (every key but `client`), the secrets revealed."""
        return {key: _revealed(value) for key, value in self if key != "client"}

    def secrets(self) -> list[str]:
        """The secrets configured, for the log to hide."""
        return [value.get_secret_value() for _, value in self if isinstance(value, SecretStr)]


def _revealed(value: Any) -> Any:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


if TYPE_CHECKING:  # the fields are made from the records, which a type checker cannot follow
    AgentSettings = _AgentSection
    LLMSettings = _LLMOptionsSection
    _LLMOverride = _Section
else:
    AgentSettings = _section_of(
        "AgentSettings",
        ToolCallOptions,
        _AgentSection,
        unset_is_none=True,
        extra={
            "factory": (
                str | None,
                Field(
                    default=None,
                    description="``MODULE:FUNCTION``: your agent factory, the agent `run` builds when "
                    "`--agent` names none (called with the configured model as ``llm=``)",
                ),
            ),
            "tools": (
                list[str] | None,
                Field(
                    default=None,
                    description='``["MODULE:FUNCTION", ...]``: your functions (or `Tool`s), added as tools '
                    "of the built-in agents, as `--tool` adds one",
                ),
            ),
        },
    )
    LLMSettings = _section_of(
        "LLMSettings",
        LLMOptions,
        _LLMOptionsSection,
        unset_is_none=False,
        extra={"client": _CLIENT_FIELD},
    )
    _LLMOverride = _section_of(
        "_LLMOverride",
        LLMOptions,
        _Section,
        unset_is_none=True,
        doc="An `[llm.<agent name>]` table: only the keys it sets replace `[llm]`'s.",
        extra={"client": _CLIENT_FIELD},
    )


class _LLMSection(LLMSettings):
    """`[llm]`: the defaults, plus one override table per agent name."""

    per_agent: dict[str, _LLMOverride] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _split_agent_tables(cls, data: Any) -> Any:
        """Sub-tables of `[llm]` (``[llm.toolcall]``) are per-agent overrides, not keys."""
        if not isinstance(data, Mapping) or "per_agent" in data:
            return data
        own = {k: v for k, v in data.items() if k in LLMSettings.model_fields or not isinstance(v, Mapping)}
        own["per_agent"] = {k: v for k, v in data.items() if k not in own}
        return own


class MCPServerTable(_Section):
    """One ``[mcp.servers.<id>]`` table: the keys of `MCPServerSettings` (which documents them
    and checks how they go together)."""

    type: TransportType | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float = Field(default=DEFAULT_TIMEOUT, gt=0)
    connect_timeout: float = Field(default=DEFAULT_TIMEOUT, gt=0)
    refresh_every: int = Field(default=DEFAULT_REFRESH_EVERY, ge=0)
    instructions: bool = False
    auth: str | dict[str, Any] | None = None
    """``"oauth"``, or an ``[mcp.servers.<id>.auth]`` table (`MCPAuthSettings`)."""

    @model_validator(mode="after")
    def _checked(self) -> MCPServerTable:
        self.settings()  # a ConfigError (a ValueError) is reported with the table's name
        return self

    def settings(self) -> MCPServerSettings:
        return MCPServerSettings(**{**dict(self), "args": tuple(self.args)})


class _MCPSection(_Section):
    servers: dict[str, MCPServerTable] = Field(default_factory=dict)
    """``[mcp.servers.<id>]`` tables, one per MCP server, by id."""

    def server_settings(self) -> dict[str, MCPServerSettings]:
        """Every configured server's settings, by id (what `MCPServers` takes)."""
        return {server_id: table.settings() for server_id, table in self.servers.items()}


class TelemetrySettings(_Section):
    """``[telemetry]``: OpenTelemetry spans of the command line's runs (the `otel` extra), sent over
    OTLP/HTTP where the standard ``OTEL_*`` environment variables say (see `agentfsm.telemetry`)."""

    enabled: bool = False
    """Export the spans of every run, as `--otel` does."""
    include_content: bool = False
    """Also write the messages, tool arguments and results on the spans (they are the user's data)."""


class Settings(BaseSettings):
    """The whole configuration. Use `Settings.load(...)`: it adds the TOML file under the
    environment, and reports errors as `ConfigError` (built directly, `Settings(...)` has no file)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", frozen=True
    )

    llm: _LLMSection = Field(default_factory=_LLMSection)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    browser: BrowserSettings = Field(default_factory=BrowserSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)
    mcp: _MCPSection = Field(default_factory=_MCPSection)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)

    @classmethod
    def load(
        cls,
        config_file: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> Settings:
        """File < environment < `overrides` (nested like the file); raise `ConfigError`.

        The layers are pydantic-settings' own sources (its TOML file and environment sources),
        stacked here rather than in `settings_customise_sources` because the file is chosen per
        call, where a source's file is otherwise fixed per class.
        """
        path = _resolve_path(config_file)
        _check_environment_names()
        data: dict[str, Any] = {}
        for layer in (_read_toml(cls, path), EnvSettingsSource(cls)(), overrides or {}):
            data = _laid_over(data, layer)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(_describe(exc, path, overrides or {})) from None

    def llm_for(self, agent_name: str) -> LLMSettings:
        """`[llm]` with `[llm.<agent_name>]` laid over it (only the keys it sets)."""
        merged = {name: getattr(self.llm, name) for name in LLMSettings.model_fields}
        override = self.llm.per_agent.get(agent_name)
        if override is not None:
            merged.update(override.model_dump(exclude_none=True))
        return LLMSettings.model_validate(merged)


def build_llm(settings: LLMSettings) -> LLM | OpenAICompatible:
    """The model adapter for `settings`; `ConfigError` when no model is configured.

    `client` picks it; unset, ``openai/`` models get `OpenAICompatible` (measured: ~0.3 ms of CPU
    a request against litellm's ~5 ms, and no 3 s import) and every other provider `LLM`.
    """
    kwargs = settings.llm_kwargs()
    model = kwargs.get("model")
    if not model:
        raise ConfigError(NO_MODEL_MESSAGE)
    client = settings.client or ("native" if model.startswith("openai/") else "litellm")
    if client == "native":
        if not model.startswith("openai/"):
            raise ConfigError(
                f"[llm] client = 'native' speaks only the OpenAI wire, so it takes models named "
                f"'openai/<name>', got {model!r}: rename the model or set client = 'litellm'"
            )
        from ..model.openai_compatible import OpenAICompatible  # aiohttp loads with it, not with the CLI

        return OpenAICompatible(**kwargs)
    from ..model.llm import LLM  # litellm is loaded by the LLM on first use, never by the CLI's import

    return LLM(**kwargs)


# -- the file layer ---------------------------------------------------------------


def _resolve_path(config_file: str | os.PathLike[str] | None) -> Path | None:
    """The named file (which must exist), else `agentfsm.toml` in the working directory, if any."""
    if config_file is not None:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        return path
    default = Path(DEFAULT_CONFIG_FILE)
    return default if default.is_file() else None


def _read_toml(settings_cls: type[BaseSettings], path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        return TomlConfigSettingsSource(settings_cls, toml_file=path)()
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc}") from None


def _laid_over(low: Mapping[str, Any], high: Mapping[str, Any]) -> dict[str, Any]:
    """`high` over `low`, table by table: an environment variable replaces one key of the
    file's section, not the section."""
    merged = dict(low)
    for key, value in high.items():
        below = merged.get(key)
        if isinstance(below, Mapping) and isinstance(value, Mapping):
            value = _laid_over(below, value)
        merged[key] = value
    return merged


# -- error messages ---------------------------------------------------------------


def _describe(exc: ValidationError, path: Path | None, overrides: Mapping[str, Any]) -> str:
    """One line per problem, joined: ``[agent] max_steps = 'x' (in FILE): Input should be ...``."""
    problems = []
    for error in exc.errors():
        parts = [str(p) for p in error["loc"] if p != "per_agent"]
        *section, key = parts or ["?"]
        where = f"[{'.'.join(section)}] {key}" if section else f"[{key}]"
        origin = _origin(parts, path, overrides)
        if error["type"] == "extra_forbidden":
            allowed = _allowed_keys(section)
            hint = f"; allowed: {', '.join(allowed)}" if allowed else ""
            what = f"unknown key {key!r} in [{'.'.join(section)}]" if section else f"unknown section {where}"
            problems.append(f"{what} ({origin}){hint}")
        else:
            value = error.get("input")
            shown = "<hidden>" if key in _SECRET_KEYS else repr(_hidden(value))
            problems.append(f"{where} = {shown} ({origin}): {error['msg']}")
    return "invalid configuration: " + "; ".join(problems)


def _hidden(value: Any) -> Any:
    """`value` with the secrets inside its tables (an MCP server's ``client_secret``) hidden."""
    if not isinstance(value, Mapping):
        return value
    secret = _SECRET_KEYS | {"client_secret"}
    return {k: "<hidden>" if k in secret else _hidden(v) for k, v in value.items()}


def _check_environment_names() -> None:
    """`AGENTFSM_LLM_MODEL` (one underscore) would be ignored silently by pydantic-settings.

    Only names that start like a section are refused: other `AGENTFSM_*`
    variables (a test switch, say) are none of this module's business.
    """
    sections = [name.upper() for name in Settings.model_fields]
    for name in os.environ:
        if not name.upper().startswith(ENV_PREFIX):
            continue
        head = name.upper().removeprefix(ENV_PREFIX).split("__")[0]
        if head not in sections and any(head.startswith(f"{section}_") for section in sections):
            raise ConfigError(
                f"unknown environment variable {name}: use {ENV_PREFIX}<SECTION>__<KEY> "
                f"(two underscores), e.g. {ENV_PREFIX}LLM__MODEL"
            )


def _origin(parts: list[str], path: Path | None, overrides: Mapping[str, Any]) -> str:
    node: Any = overrides
    for part in parts:
        node = node.get(part) if isinstance(node, Mapping) else None
    if node is not None:
        return "from the command line"
    env_name = (ENV_PREFIX + "__".join(parts)).upper()
    if any(name.upper() == env_name for name in os.environ):
        return f"from {env_name}"
    return f"in {path}" if path is not None else "in the configuration"


def _allowed_keys(section: list[str]) -> list[str]:
    if not section:
        return sorted(Settings.model_fields)
    if section[0] == "llm":
        tables = ["[llm.<agent name>] tables"] if len(section) == 1 else []
        return [*LLMSettings.model_fields, *tables]
    if section == ["agent"]:
        return list(AgentSettings.model_fields)
    if section == ["sandbox"]:
        return list(SandboxSettings.model_fields)
    if section == ["browser"]:
        return list(BrowserSettings.model_fields)
    if section == ["search"]:
        return list(SearchSettings.model_fields)
    if len(section) == 2 and section[0] == "search" and section[1] in BACKEND_TABLES:
        return list(BACKEND_TABLES[section[1]].model_fields)
    if section == ["mcp"]:
        return ["servers"]
    if section == ["telemetry"]:
        return list(TelemetrySettings.model_fields)
    if section[:2] == ["mcp", "servers"] and len(section) == 3:
        return list(MCPServerTable.model_fields)
    return []
