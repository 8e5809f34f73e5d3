"""Configuration: file < environment < flags, per-agent LLM tables, clear errors, hidden secrets."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from agentfsm import ToolCallAgent
from agentfsm.cli.config import NO_MODEL_MESSAGE, LLMSettings, Settings, build_llm
from agentfsm.errors import ConfigError
from agentfsm.mcp.settings import MCPServerSettings
from agentfsm.sandbox.settings import SandboxSettings

SECRET = "sk-very-secret-123"


pytestmark = pytest.mark.usefixtures("clean_env")


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


FULL = """
[llm]
model = "openai/general"
temperature = 0.2
api_key = "sk-very-secret-123"

[llm.toolcall]
model = "openai/for-toolcall"
timeout = 5

[llm.manus]
model = "openai/for-manus"
max_tokens = 100

[agent]
max_steps = 7
tool_choice = "required"
stuck_limit = 0

[sandbox]
image = "python:3.12"

[mcp.servers.time]
command = "mcp-server-time"
"""


def test_missing_sections_mean_defaults(tmp_path: Path) -> None:
    settings = Settings.load(write(tmp_path / "empty.toml", ""))
    assert settings == Settings.load()  # and no file at all: the same
    llm = settings.llm_for("toolcall")
    assert llm.model is None and llm.api_key is None
    assert (llm.temperature, llm.max_tokens, llm.timeout, llm.max_attempts) == (0.0, 4096, 60.0, 6)
    assert settings.agent.agent_kwargs() == {}  # each agent class keeps its own defaults
    assert settings.sandbox == SandboxSettings() and settings.mcp.servers == {}
    sandbox = settings.sandbox
    assert (sandbox.mode, sandbox.network, sandbox.keep_alive) == ("auto", False, True)


def test_llm_settings_defaults_are_the_llm_constructor_defaults() -> None:
    from agentfsm.model.llm import LLM

    params = inspect.signature(LLM).parameters
    for name, field in LLMSettings.model_fields.items():
        if name in ("model", "api_key", "client"):  # client picks the adapter: not an option of one
            continue
        assert params[name].default == field.default, name


def test_reads_agentfsm_toml_in_the_working_directory(tmp_path: Path) -> None:
    write(tmp_path / "agentfsm.toml", FULL)
    settings = Settings.load()
    assert settings.llm.model == "openai/general"
    assert settings.agent.agent_kwargs() == {"max_steps": 7, "tool_choice": "required", "stuck_limit": None}
    assert settings.sandbox == SandboxSettings(image="python:3.12")
    assert settings.mcp.server_settings() == {"time": MCPServerSettings(command="mcp-server-time")}


def test_agent_table_overrides_reach_only_that_agent(tmp_path: Path) -> None:
    settings = Settings.load(write(tmp_path / "c.toml", FULL))
    toolcall = settings.llm_for("toolcall")
    assert (toolcall.model, toolcall.timeout, toolcall.max_tokens) == ("openai/for-toolcall", 5.0, 4096)
    assert toolcall.temperature == 0.2  # inherited from [llm]
    assert toolcall.api_key is not None and toolcall.api_key.get_secret_value() == SECRET
    manus = settings.llm_for("manus")
    assert (manus.model, manus.max_tokens, manus.timeout) == ("openai/for-manus", 100, 60.0)
    other = settings.llm_for("someone-else")
    assert (other.model, other.timeout, other.max_tokens) == ("openai/general", 60.0, 4096)


def test_agent_table_override_reaches_the_built_llm(tmp_path: Path) -> None:
    settings = Settings.load(write(tmp_path / "c.toml", FULL))
    llm = build_llm(settings.llm_for("toolcall"))
    assert (llm.model, llm.timeout, llm.temperature, llm.api_key) == ("openai/for-toolcall", 5.0, 0.2, SECRET)
    agent = ToolCallAgent(llm=llm, **settings.agent.agent_kwargs())
    assert (agent.max_steps, agent.tool_choice, agent.stuck_limit) == (7, "required", None)


def test_environment_overrides_the_file_key_by_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = write(tmp_path / "c.toml", FULL)
    monkeypatch.setenv("AGENTFSM_LLM__MODEL", "openai/from-env")
    monkeypatch.setenv("AGENTFSM_LLM__TOOLCALL__TIMEOUT", "9.5")
    monkeypatch.setenv("AGENTFSM_AGENT__MAX_STEPS", "11")
    settings = Settings.load(config)
    assert settings.llm.model == "openai/from-env"
    assert settings.llm.temperature == 0.2  # the rest of [llm] still comes from the file
    assert settings.llm_for("toolcall").timeout == 9.5
    assert settings.llm_for("toolcall").model == "openai/for-toolcall"
    assert settings.agent.max_steps == 11 and settings.agent.tool_choice == "required"


def test_flags_override_environment_and_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = write(tmp_path / "c.toml", FULL)
    monkeypatch.setenv("AGENTFSM_AGENT__MAX_STEPS", "11")
    monkeypatch.setenv("AGENTFSM_LLM__TOOLCALL__MODEL", "openai/env-toolcall")
    flags = {"llm": {"toolcall": {"model": "openai/flag"}}, "agent": {"max_steps": 2}}
    settings = Settings.load(config, flags)
    assert settings.llm_for("toolcall").model == "openai/flag"
    assert settings.llm_for("toolcall").timeout == 5.0  # the file's table keeps its other keys
    assert settings.llm_for("manus").model == "openai/for-manus"  # a flag for toolcall is not for manus
    assert settings.agent.max_steps == 2


def test_no_model_anywhere_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        build_llm(Settings.load().llm_for("toolcall"))
    assert str(info.value) == NO_MODEL_MESSAGE


def test_missing_named_file_is_an_error_naming_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "missing.toml"
    with pytest.raises(ConfigError, match="config file not found") as info:
        Settings.load(missing)
    assert str(missing) in str(info.value)


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    broken = write(tmp_path / "broken.toml", "[llm\nmodel = 1\n")
    with pytest.raises(ConfigError, match="invalid TOML") as info:
        Settings.load(broken)
    assert str(broken) in str(info.value)


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ('[agent]\nmax_steps = "x"', ["[agent] max_steps = 'x'", "valid integer"]),
        ("[agent]\nmax_steps = 0", ["[agent] max_steps = 0", "greater than or equal to 1"]),
        (
            '[agent]\ntool_choice = "sometimes"',
            ["[agent] tool_choice = 'sometimes'", "'auto', 'required' or 'none'"],
        ),
        ('[llm]\ntemperature = "hot"', ["[llm] temperature = 'hot'", "valid number"]),
        ("[llm.toolcall]\nmax_tokens = -5", ["[llm.toolcall] max_tokens = -5", "greater than or equal to 1"]),
        ("[llm]\nmax_input_tokens = 0", ["[llm] max_input_tokens = 0", "greater than or equal to 1"]),
        ('[llm.manus]\nvision = "maybe"', ["[llm.manus] vision = 'maybe'", "valid boolean"]),
        ("[agent]\nmax_step = 3", ["unknown key 'max_step' in [agent]", "allowed: max_steps"]),
        ("[llm]\nmodle = 'x'", ["unknown key 'modle' in [llm]", "allowed: model"]),
        ("[mcp]\nserver = {}", ["unknown key 'server' in [mcp]", "allowed: servers"]),
        ("[mcp.servers.t]\ncmd = 'x'", ["unknown key 'cmd' in [mcp.servers.t]", "allowed: type, command"]),
        ("[mcp.servers.t]\nurl = 'ftp://h'", ["[mcp.servers] t = ", "needs a `url` starting with http://"]),
        ("[mcp.servers.t]\ncommand = 'x'\ntimeout = 0", ["[mcp.servers.t] timeout = 0", "greater than 0"]),
        ("[tools]\na = 1", ["unknown section [tools]", "allowed: agent, browser, llm, mcp, sandbox"]),
        ('[sandbox]\nmode = "vm"', ["[sandbox] mode = 'vm'", "'docker', 'local' or 'auto'"]),
        ('[sandbox]\nmemory = "lots"', ["[sandbox] memory = 'lots'", "use a number with b, k, m or g"]),
        ('[sandbox]\nuser = "0:0"', ["[sandbox] user = '0:0'", "never runs as root"]),
        ('[sandbox]\nshell_user = "0:1"', ["[sandbox] shell_user = '0:1'", "never runs as root"]),
        (
            '[sandbox]\nuser = "1000:1000"\nshell_user = "1000:1001"',
            ["[sandbox]", "shell_user '1000:1001' has the uid of user '1000:1000'", "another uid"],
        ),
        ("[sandbox]\npids_limit = 2", ["[sandbox] pids_limit = 2", "greater than or equal to 8"]),
        ("[sandbox]\nimage_name = 'x'", ["unknown key 'image_name' in [sandbox]", "allowed: mode, image"]),
    ],
)
def test_bad_values_name_section_key_value_and_what_is_allowed(
    tmp_path: Path, toml: str, expected: list[str]
) -> None:
    config = write(tmp_path / "bad.toml", toml)
    with pytest.raises(ConfigError) as info:
        Settings.load(config)
    message = str(info.value)
    assert "\n" not in message
    assert f"in {config}" in message
    for part in expected:
        assert part in message


def test_bad_environment_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFSM_AGENT__TOOL_CHOICE", "sometimes")
    with pytest.raises(
        ConfigError, match=r"\[agent\] tool_choice = 'sometimes' \(from AGENTFSM_AGENT__TOOL_CHOICE\)"
    ):
        Settings.load()


def test_misspelt_environment_variable_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFSM_SOMETHING_ELSE", "1")  # not configuration: none of our business
    assert Settings.load().llm.model is None
    monkeypatch.setenv("AGENTFSM_LLM_MODEL", "openai/x")  # one underscore: would be ignored
    with pytest.raises(ConfigError, match="unknown environment variable AGENTFSM_LLM_MODEL: use AGENTFSM_"):
        Settings.load()
    monkeypatch.delenv("AGENTFSM_LLM_MODEL")
    monkeypatch.setenv("AGENTFSM_AGENT__MAX_STEP", "3")
    with pytest.raises(
        ConfigError, match=r"unknown key 'max_step' in \[agent\] \(from AGENTFSM_AGENT__MAX_STEP\)"
    ):
        Settings.load()


def test_bad_flag_value_says_command_line() -> None:
    with pytest.raises(ConfigError, match=r"\[agent\] max_steps = 0 \(from the command line\)"):
        Settings.load(overrides={"agent": {"max_steps": 0}})


def test_secrets_never_appear_in_dumps_reprs_or_errors(tmp_path: Path) -> None:
    settings = Settings.load(write(tmp_path / "c.toml", FULL))
    llm = settings.llm_for("toolcall")
    shown = [
        repr(settings),
        str(settings),
        settings.model_dump_json(),
        repr(settings.model_dump()),
        repr(settings.model_dump(mode="json")),
        repr(llm),
        llm.model_dump_json(),
        repr(build_llm(llm)),
    ]
    for text in shown:
        assert SECRET not in text
    assert "**********" in settings.model_dump_json()

    bad = write(tmp_path / "bad.toml", '[llm]\napi_key = ["sk-very-secret-123"]')
    with pytest.raises(ConfigError) as info:
        Settings.load(bad)
    assert SECRET not in str(info.value) and "[llm] api_key = <hidden>" in str(info.value)


def test_sandbox_settings_from_file_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = write(tmp_path / "c.toml", '[sandbox]\nmode = "docker"\nmemory = "1G"\ntimeout = 5\n')
    monkeypatch.setenv("AGENTFSM_SANDBOX__NETWORK", "true")
    sandbox = Settings.load(config).sandbox
    assert (sandbox.mode, sandbox.memory, sandbox.timeout, sandbox.network) == ("docker", "1g", 5.0, True)
    assert sandbox.pids_limit == 128 and sandbox.user == "65534:65534"  # the rest keeps the defaults
    assert sandbox.shell_identity == "65533:65534"  # the bash tool's shell: another uid, the same group


def test_the_shells_default_user_keeps_apart_from_the_snippets_and_in_their_group() -> None:
    assert SandboxSettings(user="1000:1000").shell_identity == "65533:1000"
    assert SandboxSettings(user="65533:7").shell_identity == "65532:7"
    assert SandboxSettings(shell_user="2000:65534").shell_identity == "2000:65534"


# -- which adapter ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "adapter"),
    [
        ('model = "openai/gpt-4o-mini"', "OpenAICompatible"),  # the default for openai/ models
        ('model = "anthropic/claude-sonnet-4-5"', "LLM"),  # and litellm for every other provider
        ('model = "openai/gpt-4o-mini"\nclient = "litellm"', "LLM"),
        ('model = "openai/gpt-4o-mini"\nclient = "native"', "OpenAICompatible"),
    ],
)
def test_client_picks_the_adapter(tmp_path: Path, table: str, adapter: str) -> None:
    settings = Settings.load(write(tmp_path / "c.toml", f"[llm]\n{table}\ntimeout = 7\n"))
    llm = build_llm(settings.llm_for("toolcall"))
    assert type(llm).__name__ == adapter
    assert (llm.model, llm.timeout) == (settings.llm.model, 7.0)


def test_client_is_set_per_agent_and_by_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write(tmp_path / "c.toml", '[llm]\nmodel = "openai/m"\n[llm.manus]\nclient = "litellm"\n')
    settings = Settings.load(config)
    assert type(build_llm(settings.llm_for("manus"))).__name__ == "LLM"
    assert type(build_llm(settings.llm_for("toolcall"))).__name__ == "OpenAICompatible"
    monkeypatch.setenv("AGENTFSM_LLM__CLIENT", "litellm")
    assert type(build_llm(Settings.load(config).llm_for("toolcall"))).__name__ == "LLM"


def test_native_client_for_another_provider_is_a_config_error(tmp_path: Path) -> None:
    settings = Settings.load(write(tmp_path / "c.toml", '[llm]\nmodel = "anthropic/x"\nclient = "native"\n'))
    with pytest.raises(
        ConfigError, match=r"client = 'native' speaks only the OpenAI wire.*client = 'litellm'"
    ):
        build_llm(settings.llm_for("toolcall"))
    with pytest.raises(ConfigError, match=r"\[llm\] client = 'httpx'.*'native' or 'litellm'"):
        Settings.load(write(tmp_path / "d.toml", '[llm]\nclient = "httpx"\n'))


@pytest.mark.parametrize("client", ["native", "litellm"])
def test_model_facts_declared_in_the_file_and_the_environment_reach_the_adapter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    """A local vision model litellm's map does not know: `[llm]` says what it is, `[llm.<agent>]`
    and ``AGENTFSM_LLM__...`` override it key by key, and the adapter built uses what they say."""
    config = write(
        tmp_path / "c.toml",
        f'[llm]\nmodel = "openai/qwen2.5-vl"\napi_base = "http://127.0.0.1:1/v1"\nclient = "{client}"\n'
        "vision = true\nmax_input_tokens = 32768\n"
        "[llm.manus]\nreasoning = true\nmax_input_tokens = 8192\n",
    )
    monkeypatch.setenv("AGENTFSM_LLM__TAKES_TEMPERATURE", "false")
    settings = Settings.load(config)
    toolcall, manus = build_llm(settings.llm_for("toolcall")), build_llm(settings.llm_for("manus"))
    assert (toolcall.vision, toolcall.reasoning, toolcall.takes_temperature) == (True, None, False)
    assert (toolcall.supports_vision, toolcall.is_reasoning, toolcall.input_limit) == (True, False, 32768)
    assert (manus.supports_vision, manus.is_reasoning, manus.input_limit) == (True, True, 8192)
    assert not toolcall.sends_temperature and not manus.sends_temperature
    monkeypatch.delenv("AGENTFSM_LLM__TAKES_TEMPERATURE")
    unset = build_llm(Settings.load(write(tmp_path / "d.toml", '[llm]\nmodel = "openai/m"\n')).llm_for("x"))
    assert (unset.vision, unset.reasoning, unset.takes_temperature, unset.max_input_tokens) == (None,) * 4
