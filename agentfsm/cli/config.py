"""Settings: the TOML file, then `AGENTFSM_*` environment variables, then flags.

Why pydantic-settings: it merges the three layers key by key (an environment
variable replaces one key of the file, not its whole section) and validates
the result once, so a wrong value is reported with its section and key
whichever layer it came from. `Settings.load` turns pydantic's errors into a
one-line `ConfigError` that names the key, the bad value, where it came from
and what is allowed.

`[llm.<agent name>]` tables override `[llm]` for that agent only; an agent's
LLM is built from `Settings.llm_for(name)`. Agent options left unset stay
`None`, so each agent class keeps its own defaults (Manus: 20 steps, the
tool-calling agent: 30). `[sandbox]` is validated as `SandboxSettings`;
`[mcp.servers.<id>]` tables are kept as plain tables for the MCP client.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from ..errors import ConfigError
from ..sandbox.settings import SandboxSettings

if TYPE_CHECKING:
    from ..model.llm import LLM

__all__ = [
    "DEFAULT_CONFIG_FILE",
    "ENV_PREFIX",
    "NO_MODEL_MESSAGE",
    "AgentSettings",
    "LLMSettings",
    "Settings",
    "build_llm",
]

DEFAULT_CONFIG_FILE = "agentfsm.toml"
ENV_PREFIX = "AGENTFSM_"
NO_MODEL_MESSAGE = (
    "no model configured: pass --model, set [llm] model in agentfsm.toml, or AGENTFSM_LLM__MODEL"
)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LLMSettings(_Section):
    """One agent's LLM connection; the defaults are those of `LLM`'s constructor."""

    model: str | None = None
    """Any litellm model name, e.g. ``openai/gpt-4o-mini``. No default: a run needs one."""
    api_base: str | None = None
    api_key: SecretStr | None = None
    """Kept as a `SecretStr`: its repr and every dump show ``**********``."""
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=4096, ge=1)
    max_input_tokens: int | None = Field(default=None, ge=1)
    token_budget: int | None = Field(default=None, ge=1)
    timeout: float = Field(default=60.0, gt=0)
    max_attempts: int = Field(default=6, ge=1)


class _LLMOverride(_Section):
    """An `[llm.<agent name>]` table: only the keys it sets replace `[llm]`'s."""

    model: str | None = None
    api_base: str | None = None
    api_key: SecretStr | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    max_tokens: int | None = Field(default=None, ge=1)
    max_input_tokens: int | None = Field(default=None, ge=1)
    token_budget: int | None = Field(default=None, ge=1)
    timeout: float | None = Field(default=None, gt=0)
    max_attempts: int | None = Field(default=None, ge=1)


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


class AgentSettings(_Section):
    """`[agent]`: options of the agent's constructor. Unset (None) keeps the agent's default."""

    max_steps: int | None = Field(default=None, ge=1)
    tool_choice: Literal["auto", "required", "none"] | None = None
    max_observe: int | None = Field(default=None, ge=1)
    stuck_limit: int | None = Field(default=None, ge=0)
    """0 turns stuck detection off."""
    duplicate_threshold: int | None = Field(default=None, ge=1)
    finish_on_answer: bool | None = None
    system_prompt: str | None = None
    next_step_prompt: str | None = None
    parallel_tool_calls: bool | None = None
    require_approval: list[str] | None = None
    """Tools whose calls a person approves first (the command line asks on the terminal)."""

    def agent_kwargs(self) -> dict[str, Any]:
        """The keyword arguments to pass to the agent: only what was configured."""
        kwargs = self.model_dump(exclude_none=True)
        if kwargs.get("stuck_limit") == 0:
            kwargs["stuck_limit"] = None
        return kwargs


class _MCPSection(_Section):
    servers: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """``[mcp.servers.<id>]`` tables, read by the MCP client when it exists."""


class Settings(BaseSettings):
    """The whole configuration. Use `Settings.load(...)` for errors as `ConfigError`."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", frozen=True
    )

    llm: _LLMSection = Field(default_factory=_LLMSection)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    mcp: _MCPSection = Field(default_factory=_MCPSection)

    def __init__(self, _config_file: str | os.PathLike[str] | None = None, **values: Any) -> None:
        """`_config_file`: the TOML file (must exist); default `agentfsm.toml` here, if present."""
        token = _NEXT_FILE.set(_resolve_path(_config_file))
        try:
            super().__init__(**values)
        finally:
            _NEXT_FILE.reset(token)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # First wins: flags (init arguments), then the environment, then the file.
        return init_settings, env_settings, _TomlFile(settings_cls)

    @classmethod
    def load(
        cls,
        config_file: str | os.PathLike[str] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> Settings:
        """File < environment < `overrides` (nested like the file); raise `ConfigError`."""
        path = _resolve_path(config_file)
        _check_environment_names()
        try:
            return cls(path, **dict(overrides or {}))
        except ValidationError as exc:
            raise ConfigError(_describe(exc, path, overrides or {})) from None

    def llm_for(self, agent_name: str) -> LLMSettings:
        """`[llm]` with `[llm.<agent_name>]` laid over it (only the keys it sets)."""
        merged = {name: getattr(self.llm, name) for name in LLMSettings.model_fields}
        override = self.llm.per_agent.get(agent_name)
        if override is not None:
            merged.update(override.model_dump(exclude_none=True))
        return LLMSettings.model_validate(merged)


def build_llm(settings: LLMSettings) -> LLM:
    """The `LLM` for `settings`; `ConfigError` when no model is configured."""
    if not settings.model:
        raise ConfigError(NO_MODEL_MESSAGE)
    from ..model.llm import LLM  # litellm is loaded by the LLM on first use, never by the CLI's import

    return LLM(
        settings.model,
        api_base=settings.api_base,
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        temperature=settings.temperature,
        max_tokens=settings.max_tokens,
        max_input_tokens=settings.max_input_tokens,
        token_budget=settings.token_budget,
        timeout=settings.timeout,
        max_attempts=settings.max_attempts,
    )


# -- the file layer ---------------------------------------------------------------

_NEXT_FILE: ContextVar[Path | None] = ContextVar("agentfsm_config_file", default=None)


class _TomlFile(PydanticBaseSettingsSource):
    """The TOML layer, reading the file `Settings.__init__` chose (sources are built per class)."""

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        super().__init__(settings_cls)
        self.path = _NEXT_FILE.get()
        self.data = _read_toml(self.path) if self.path is not None else {}

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return self.data


def _resolve_path(config_file: str | os.PathLike[str] | None) -> Path | None:
    """The named file (which must exist), else `agentfsm.toml` in the working directory, if any."""
    if config_file is not None:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        return path
    default = Path(DEFAULT_CONFIG_FILE)
    return default if default.is_file() else None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc}") from None


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
            shown = "<hidden>" if key == "api_key" else repr(value)
            problems.append(f"{where} = {shown} ({origin}): {error['msg']}")
    return "invalid configuration: " + "; ".join(problems)


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
    if section == ["mcp"]:
        return ["servers"]
    return []
