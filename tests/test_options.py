"""Options records: each option declared once, and everything that lists options derived from it."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import pytest

import agentfsm
from agentfsm import BaseAgent, ToolCallAgent
from agentfsm.agent.manus import Manus, ManusOptions
from agentfsm.agent.options import AgentOptions
from agentfsm.agent.toolcall import ToolCallOptions
from agentfsm.cli.config import AgentSettings, LLMSettings, Settings
from agentfsm.errors import ConfigError
from agentfsm.model.llm import LLM
from agentfsm.model.options import LLMOptions
from agentfsm.options import Options, Spec, option_fields
from agentfsm.sandbox.settings import SandboxSettings
from agentfsm.testing import ScriptedLLM

LOCAL = SandboxSettings(mode="local")


class Idle(BaseAgent):
    async def think(self) -> None:
        self.run_state.turn.pending_calls = []

    async def act(self) -> None:
        raise AssertionError

    async def observe(self) -> None:
        pass


def names(record: type[Options]) -> set[str]:
    return {option.name for option in option_fields(record)}


# -- the record is what the agent keeps, and what its trace records -----------------------------


def test_trace_config_keys_are_the_options_fields_and_the_agents_parts() -> None:
    assert set(Idle().trace_config()) == names(AgentOptions) | {"max_messages"}
    tool_calling = ToolCallAgent(llm=ScriptedLLM([])).trace_config()
    assert set(tool_calling) == names(ToolCallOptions) | {"max_messages", "llm", "tools"}
    manus = Manus(llm=ScriptedLLM([]), sandbox=LOCAL).trace_config()
    assert set(manus) == names(ManusOptions) | {"max_messages", "llm", "tools", "sandbox"}
    assert manus["sandbox"] == {"kind": "local"}  # where its commands run, for a resume


def test_each_agent_keeps_its_record_and_reads_its_options_from_it() -> None:
    agent = ToolCallAgent(llm=ScriptedLLM([]), max_steps=5, require_approval=["terminate"])
    assert type(agent.options) is ToolCallOptions
    assert agent.options == ToolCallOptions(max_steps=5, require_approval=frozenset({"terminate"}))
    assert (agent.max_steps, agent.require_approval) == (5, frozenset({"terminate"}))
    manus = Manus(llm=ScriptedLLM([]), sandbox=LOCAL)
    assert manus.options == ManusOptions() and manus.max_steps == 20
    assert type(Idle().options) is AgentOptions
    with pytest.raises(AttributeError):
        agent.max_steps = 3  # type: ignore[misc]  # one source: replace `options` to change them
    agent.options = dataclasses.replace(agent.options, max_steps=3)
    assert agent.max_steps == 3 and agent.trace_config()["max_steps"] == 3


def test_manus_records_its_prompt_as_configured() -> None:
    manus = Manus(llm=ScriptedLLM([]), sandbox=LOCAL)
    assert "{directory}" in manus.trace_config()["system_prompt"]


@pytest.mark.parametrize(
    ("agent_class", "record", "parts"),
    [
        (Idle, AgentOptions, {"name", "memory", "options"}),
        (
            ToolCallAgent,
            ToolCallOptions,
            {"llm", "tools", "memory", "approver", "input_handler", "name", "output_type", "options"},
        ),
        (
            Manus,
            ManusOptions,
            {"llm", "sandbox", "ask_human", "extra_tools", "mcp_servers", "browser", "search", "memory"}
            | {"approver", "input_handler", "name", "output_type", "options"},
        ),
    ],
)
def test_constructor_keywords_are_the_records_options_with_its_defaults(
    agent_class: type[BaseAgent], record: type[Options], parts: set[str]
) -> None:
    parameters = dict(inspect.signature(agent_class).parameters)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters.values())
    options = {name: p for name, p in parameters.items() if name not in parts}
    assert set(options) == names(record)
    for option in option_fields(record):
        assert options[option.name].default == option.default, option.name


def test_llm_constructor_is_its_options() -> None:
    parameters = inspect.signature(LLM).parameters
    assert list(parameters) == [option.name for option in option_fields(LLMOptions)]
    assert parameters["model"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    llm = LLM("openai/gpt-4o-mini", timeout=30, max_attempts=4, token_budget=50_000)
    assert (llm.timeout, llm.max_attempts, llm.token_budget) == (30.0, 4, 50_000)
    assert dataclasses.replace(llm, timeout=5).timeout == 5.0


# -- one check, one message ---------------------------------------------------------------------


BAD_OPTIONS = [
    ({"max_steps": 0}, "`max_steps` must be an integer >= 1, got 0"),
    ({"max_steps": True}, "`max_steps` must be an integer >= 1, got True"),
    ({"stuck_limit": 0}, "`stuck_limit` must be an integer >= 1 (or None for no limit), got 0"),
    ({"duplicate_threshold": 0}, "`duplicate_threshold` must be an integer >= 1, got 0"),
    ({"max_observe": 0}, "`max_observe` must be an integer >= 1 (or None for no limit), got 0"),
    (
        {"tool_choice": "sometimes"},
        "`tool_choice` must be one of 'auto', 'required', 'none', got 'sometimes'",
    ),
    ({"finish_on_answer": "yes"}, "`finish_on_answer` must be True or False, got 'yes'"),
    ({"system_prompt": 3}, "`system_prompt` must be a string (or None), got 3"),
]


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS, ids=[next(iter(o)) for o, _ in BAD_OPTIONS])
def test_a_bad_option_is_one_line_naming_it_and_its_bound(options: dict[str, Any], message: str) -> None:
    for build in (
        lambda: ToolCallAgent(llm=ScriptedLLM([]), **options),
        lambda: Manus(llm=ScriptedLLM([]), sandbox=LOCAL, **options),
        lambda: ToolCallOptions(**options),
    ):
        with pytest.raises(ConfigError) as info:
            build()
        assert str(info.value) == message
        assert isinstance(info.value, ValueError)


def test_agents_built_with_the_same_options_share_one_record_checked_once() -> None:
    first = ToolCallAgent(llm=ScriptedLLM([]), max_steps=1, require_approval=("terminate",))
    second = ToolCallAgent(llm=ScriptedLLM([]), require_approval=("terminate",), max_steps=1)
    assert second.options is first.options  # immutable: sharing it changes nothing
    assert ToolCallAgent(llm=ScriptedLLM([]), max_steps=2).options.max_steps == 2
    with pytest.raises(ConfigError, match="got True"):  # equal to 1, but no integer here
        ToolCallAgent(llm=ScriptedLLM([]), max_steps=True)
    assert type(ToolCallAgent(llm=ScriptedLLM([]), max_steps=1).options.max_steps) is int
    listed = ToolCallAgent(llm=ScriptedLLM([]), max_steps=1, require_approval=["terminate"])
    assert listed.options == first.options  # a list is no key: built anew, to the same record


def test_a_secret_is_never_shown() -> None:
    with pytest.raises(ConfigError) as info:
        LLM("openai/x", api_key=123)  # type: ignore[arg-type]
    assert str(info.value) == "`api_key` must be a string (or None), got a int"
    assert "sk-1" not in repr(LLMOptions("openai/x", api_key="sk-1"))
    assert "api_key" not in LLMOptions("openai/x", api_key="sk-1").to_json()


def test_extra_may_not_set_what_an_option_sets() -> None:
    with pytest.raises(ConfigError, match="`extra` may not set 'token_budget'; use `token_budget` instead"):
        LLM("openai/x", extra={"token_budget": 5})
    given = {"top_p": 0.5}
    llm = LLM("openai/x", extra=given)
    given["top_p"] = 1.0
    assert llm.extra == {"top_p": 0.5}  # a copy: the caller's dict may change


def test_a_subclass_changes_defaults_not_types_or_bounds() -> None:
    with pytest.raises(ConfigError, match="`max_steps` must be an integer >= 1"):
        ManusOptions(max_steps=0)  # ToolCallOptions' bound, though ManusOptions only redeclares the default

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Retyped(AgentOptions):
        max_steps: str = "many"  # type: ignore[assignment]

    with pytest.raises(TypeError, match="a subclass may change an option's default only"):
        Retyped()

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Rebounded(AgentOptions):
        max_steps: Annotated[int, Spec(ge=0)] = 0

    with pytest.raises(TypeError, match="a subclass may change an option's default only"):
        Rebounded()


# -- the JSON form: traces, checkpoints, replay, resume -----------------------------------------


def test_json_form_round_trips_and_sets_are_sorted_lists() -> None:
    options = ToolCallOptions(special_tool_names=frozenset({"b", "a"}), stuck_limit=None, max_observe=50)
    data = json.loads(json.dumps(options.to_json()))
    assert data["special_tool_names"] == ["a", "b"]
    assert ToolCallOptions.from_json(data) == options
    assert ToolCallOptions.from_json({"max_steps": 4, "llm": {}, "tools": []}) == ToolCallOptions(max_steps=4)
    assert ManusOptions.from_json({}) == ManusOptions()


def test_llm_description_in_a_trace_is_derived_from_its_options() -> None:
    llm = LLM("openai/x", api_base="http://127.0.0.1:1/v1", api_key="sk-1", timeout=5, extra={"a": 1})
    described = ToolCallAgent(llm=llm).trace_config()["llm"]
    traced = {option.name for option in option_fields(LLMOptions) if option.recorded}
    assert described == {"class": "LLM", **{name: getattr(llm, name) for name in traced}}
    assert {"api_key", "extra", "max_attempts"}.isdisjoint(described)
    scripted = ToolCallAgent(llm=ScriptedLLM([], token_budget=9)).trace_config()["llm"]
    assert scripted == {"class": "ScriptedLLM", **dict.fromkeys(traced), "token_budget": 9}


# -- the configuration's sections are the records -----------------------------------------------


def test_config_sections_have_the_records_options() -> None:
    # [agent] also names the person's factory and tools (`--agent MODULE:FUNCTION`, `--tool`)
    assert list(AgentSettings.model_fields) == [
        *(option.name for option in option_fields(ToolCallOptions)),
        "factory",
        "tools",
    ]
    # [llm] also picks the adapter (`client`), which is no option of one
    assert list(LLMSettings.model_fields) == [
        *(option.name for option in option_fields(LLMOptions)),
        "client",
    ]
    defaults = LLMSettings()
    for option in option_fields(LLMOptions):
        if not option.required and not option.spec.secret:
            assert getattr(defaults, option.name) == option.default, option.name


@pytest.mark.usefixtures("clean_env")
def test_a_file_is_held_to_the_records_bounds(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[agent]\nmax_observe = 0\nspecial_tool_names = ['done']\n[llm]\nbackoff_max = -1\n")
    with pytest.raises(ConfigError) as info:
        Settings.load(config)
    message = str(info.value)
    assert "[agent] max_observe = 0" in message and "[llm] backoff_max = -1" in message
    config.write_text("[agent]\nspecial_tool_names = ['done']\nstuck_limit = 0\n")
    options = Settings.load(config).agent.agent_kwargs()
    assert options == {"special_tool_names": frozenset({"done"}), "stuck_limit": None}
    assert ToolCallAgent(llm=ScriptedLLM([]), **options).special_tool_names == {"done"}


@pytest.mark.usefixtures("clean_env")
def test_max_images_from_a_file_with_minus_one_for_every_image(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    for text, expected in (("max_images = 1", 1), ("max_images = -1", None), ("max_images = 0", 0)):
        config.write_text(f"[agent]\n{text}\n")
        options = Settings.load(config).agent.agent_kwargs()
        assert options == {"max_images": expected}
        assert ToolCallAgent(llm=ScriptedLLM([]), **options).options.max_images == expected
    assert Manus(llm=ScriptedLLM([]), sandbox=SandboxSettings(mode="local")).options.max_images == 3
    assert ToolCallAgent(llm=ScriptedLLM([])).options.max_images is None
    config.write_text("[agent]\nmax_images = -2\n")
    with pytest.raises(ConfigError, match="max_images = -2"):
        Settings.load(config)


def test_building_an_agent_imports_no_pydantic() -> None:
    code = (
        "import sys; from agentfsm import ToolCallAgent; from agentfsm.testing import ScriptedLLM; "
        "ToolCallAgent(llm=ScriptedLLM([])).trace_config(); print('pydantic' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


# -- an option added to its record is everywhere an option is ---------------------------------

ADDED_OPTION = '''
    patience: Annotated[int, Spec(ge=1, flag="how patient the agent is (patience)")] = 3
    """A new option, added by the test below and nowhere else."""
'''

CHECK_ADDED = r"""
import inspect, json, sys
from agentfsm import ToolCallAgent
from agentfsm.agent.browser import BrowserAgent
from agentfsm.agent.manus import Manus
from agentfsm.agent.mcp import MCPAgent
from agentfsm.cli.building import build_agent, flags_given
from agentfsm.cli.config import AgentSettings, Settings
from agentfsm.cli.parser import build_parser
from agentfsm.errors import ConfigError
from agentfsm.sandbox.settings import SandboxSettings
from agentfsm.testing import ScriptedLLM

llm = ScriptedLLM([])
parts = {ToolCallAgent: {}, Manus: {"sandbox": SandboxSettings(mode="local")}, MCPAgent: {"servers": {}},
         BrowserAgent: {}}
seen = {}
for cls, needs in parts.items():
    parameter = inspect.signature(cls).parameters["patience"]
    given = cls(llm=llm, patience=5, **needs)
    seen[cls.__name__] = [parameter.default, cls(llm=llm, **needs).options.patience, given.options.patience,
                          given.trace_config()["patience"]]
    try:
        cls(llm=llm, patience=0, **needs)
    except ConfigError as exc:
        seen[cls.__name__].append(str(exc))
with open("agentfsm.toml", "w") as file:
    file.write("[agent]\npatience = 7\n")
for argv in (["run", "t"], ["run", "t", "--patience", "4"]):
    args = build_parser().parse_args(argv)
    settings = Settings.load(None, {"agent": flags_given(args, AgentSettings.model_fields)})
    agent = build_agent("toolcall", settings, llm, settings.agent.agent_kwargs(), terminal=False)
    seen[" ".join(argv)] = agent.options.patience


class Runs:  # what `agentfsm submit` puts in the database: the run's spec
    async def submit(self, task, spec, *, queue, run_id):
        seen["submit t --patience 6"] = spec.options.get("patience")
        return "run-1"


import asyncio
from agentfsm.cli import durable as durable_command
submit = ["submit", "t", "--db", "sqlite:///x.db", "--patience", "6"]
asyncio.run(durable_command._submit(Runs(), build_parser().parse_args(submit)))
print(json.dumps(seen))
"""


def test_an_option_added_to_its_record_alone_is_an_argument_a_config_key_and_a_flag(tmp_path: Path) -> None:
    """Adding an option to `ToolCallOptions` in `agent/toolcall.py`, and touching nothing else (a
    copy of the package, edited there), makes it a keyword of every agent's constructor (with its
    default in the signature, checked as the record checks it), a key of the config's ``[agent]``,
    and, with a `flag`, a flag of ``run`` and ``submit``."""
    package = Path(agentfsm.__file__).parent
    copy = tmp_path / "package" / "agentfsm"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    source = copy / "agent" / "toolcall.py"
    anchor = "class ToolCallOptions(AgentOptions):\n"
    body = source.read_text()
    docstring_end = body.index('"""\n', body.index(anchor) + len(anchor) + 8) + 4
    source.write_text(body[:docstring_end] + ADDED_OPTION + body[docstring_end:])
    env = {**os.environ, "PYTHONPATH": str(copy.parent)}
    env = {key: value for key, value in env.items() if not key.startswith("AGENTFSM_")}
    done = subprocess.run(
        [sys.executable, "-c", CHECK_ADDED],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])  # after the id `submit` prints
    refused = "`patience` must be an integer >= 1, got 0"
    for name in ("ToolCallAgent", "Manus", "MCPAgent", "BrowserAgent"):
        assert seen[name] == [3, 3, 5, 5, refused], name
    assert (seen["run t"], seen["run t --patience 4"], seen["submit t --patience 6"]) == (7, 4, 6)
    help_text = subprocess.run(
        [sys.executable, "-m", "agentfsm", "run", "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    ).stdout
    assert "--patience PATIENCE" in help_text and "how patient the agent is" in help_text
    bad = subprocess.run(
        [sys.executable, "-m", "agentfsm", "run", "t", "--patience", "0"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and f"argument --patience: {refused}" in bad.stderr, bad.stderr


def test_an_unknown_option_names_the_one_meant() -> None:
    with pytest.raises(
        ConfigError, match=r"ToolCallAgent has no option `max_step` \(did you mean `max_steps`\?\)"
    ):
        ToolCallAgent(llm=ScriptedLLM([]), max_step=3)
    with pytest.raises(ConfigError, match="Manus takes `options` as a ManusOptions, got a ToolCallOptions"):
        Manus(llm=ScriptedLLM([]), sandbox=LOCAL, options=ToolCallOptions())
    record = ManusOptions(max_steps=7)
    manus = Manus(llm=ScriptedLLM([]), sandbox=LOCAL, options=record, max_observe=2_000)
    assert (manus.max_steps, manus.max_observe) == (7, 2_000)
    assert manus.tools.get("bash").max_output == 1_500  # type: ignore[union-attr]  # sized by max_observe
