"""The command line's agents: each built from the configuration and the flags, its credentials
checked offline and its sandbox's preconditions met before anything runs (`run`, `resume`,
`run --flow`, `mcp-serve` build theirs the same way); or built by the person's own factory
(`--agent MODULE:FUNCTION`, `own_agent`), or given the person's own functions as tools (`--tool`).

Manus's sandbox is decided here, before the run: ``mode = "docker"`` without an engine or the
image is refused; ``auto`` becomes Docker where it can run, else the host, said in one line on
stderr; a resume runs where its checkpoint says (`resumed_sandbox`). The session then never
decides again, so nothing moves to the host after that line."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..agent.base import BaseAgent
from ..agent.toolcall import ToolCallAgent
from ..errors import ConfigError
from ..model.base import ChatModel
from ..toolbox.terminate import Terminate
from ..toolbox.tool import Tool, tool
from .imports import imported
from .output import warning

if TYPE_CHECKING:
    from ..agent.toolcall import ToolCallOptions
    from ..flow.flow import PlanningFlow
    from ..mcp.settings import MCPServerSettings
    from ..sandbox.record import SandboxRecord
    from ..sandbox.settings import SandboxSettings
    from .config import Settings


def check_model_credentials(llm: ChatModel) -> None:
    """Before any run starts: the provider's key is there, else `ConfigError` naming the variable.

    Keyed on the model's name and options (`LLMOptions`, which an adapter for a provider is built
    from; a model without them has no credentials to check). Offline, and before the event loop
    exists: litellm's import (seconds, which the run would spend anyway) freezes nothing here.
    """
    from ..model.credentials import check_credentials
    from ..model.options import LLMOptions

    if isinstance(llm, LLMOptions):
        check_credentials(llm.model, api_key=llm.api_key, api_base=llm.api_base, api_version=llm.api_version)


def flags_given(args: argparse.Namespace, options: Iterable[str]) -> dict[str, Any]:
    """The options set by a flag: a flag is named after the option it sets (``--max-steps``)."""
    return {name: value for name in options if (value := getattr(args, name, None)) is not None}


def mcp_server_settings(
    settings: Settings, args: argparse.Namespace, *, oauth: Iterable[str] = ()
) -> dict[str, MCPServerSettings]:
    """The configured MCP servers, with those of ``--mcp-server NAME=...`` over them; those that
    ``--mcp-oauth NAME`` (or `oauth`) names are behind OAuth with every default (``auth = "oauth"``).
    `ConfigError` for a name that is no ``--mcp-server``, or one that is a command."""
    from ..mcp.settings import MCPAuthSettings, MCPServerSettings

    flags: list[tuple[str, str]] = getattr(args, "mcp_servers", None) or []
    behind = [*(getattr(args, "mcp_oauth", None) or []), *oauth]
    given = dict(flags)
    for name in behind:
        target = given.get(name)
        if target is None:
            raise ConfigError(
                f"--mcp-oauth {name} names no --mcp-server: give the server as --mcp-server "
                f'{name}=https://HOST/mcp (a configured one takes auth = "oauth" in its table)'
            )
        if not target.startswith(("http://", "https://")):
            raise ConfigError(
                f"MCP server {name!r} is behind OAuth, which needs an http(s) URL, but --mcp-server "
                f"gives it the command {target!r}: give its streamable-HTTP URL"
            )
    servers = settings.mcp.server_settings()
    for name, target in flags:
        servers[name] = MCPServerSettings.parse(target, auth=MCPAuthSettings() if name in behind else None)
    return servers


def build_agent(
    name: str,
    settings: Settings,
    llm: ChatModel,
    options: Mapping[str, Any],
    *,
    mcp_servers: Mapping[str, MCPServerSettings] | None = None,
    terminal: bool = True,
    sandbox: SandboxSettings | None = None,
    tools: Sequence[str] = (),
) -> ToolCallAgent:
    """The agent `name` with `options`; calls that need approval are asked about on the terminal
    (unless `terminal` is off: a server's agents ask their client). `mcp_servers` connect on the
    first think (mcp and manus agents). Manus and the browser agent browse by the `[browser]`
    settings, and search with the `[search]` backends (none configured: no search).
    `sandbox`: Manus's, decided already (`resumed_sandbox`, or an earlier agent's),
    used as it is; None: `command_sandbox` decides the configured one. `tools`: the person's own
    functions (``MODULE:FUNCTION``), joining the agent's toolbox (recorded: `built_by`)."""
    from ..agent.manus import Manus
    from ..browser.engines.configured import build_search
    from .terminal import TerminalApprover, TerminalInputHandler, ask_on_terminal, terminal_available

    agent: ToolCallAgent
    servers = dict(mcp_servers or {})
    own = own_tools(tools)
    if name == "manus":
        # A question is asked on the terminal only when someone can answer it there.
        ask = ask_on_terminal if terminal and terminal_available() else None
        agent = Manus(
            llm=llm,
            sandbox=sandbox or command_sandbox(settings.sandbox),
            browser=settings.browser,
            search=build_search(settings.search),
            ask_human=ask,
            mcp_servers=servers,
            extra_tools=own,
            name=name,
            **options,
        )
    elif name == "mcp":
        from ..agent.mcp import MCPAgent

        if not servers:
            raise ConfigError(
                "the mcp agent needs an MCP server: pass --mcp-server NAME=COMMAND_OR_URL, "
                "or configure [mcp.servers.<id>]"
            )
        agent = MCPAgent(llm=llm, servers=servers, tools=own, name=name, **options)
    elif servers:
        raise ConfigError(
            f"the {name} agent takes no MCP servers (got {', '.join(servers)}): "
            "use --agent mcp or --agent manus"
        )
    elif name == "browser":
        from ..agent.browser import BrowserAgent

        agent = BrowserAgent(
            llm=llm,
            browser=settings.browser,
            search=build_search(settings.search),
            extra_tools=own,
            name=name,
            **options,
        )
    else:
        agent = ToolCallAgent(llm=llm, tools=[*own, Terminate()], name=name, **options)
    if tools:
        agent.built_by = {"tools": list(tools)}
    # An MCP server's tools are known once it connects: approvals may name them.
    unknown = sorted(agent.require_approval - set(agent.tools.names)) if not servers else []
    if unknown:
        raise ConfigError(
            f"require_approval names tools the {name} agent does not have: {', '.join(unknown)}; "
            f"its tools: {', '.join(agent.tools.names)}"
        )
    if agent.approval_names and terminal:
        agent.approver = TerminalApprover()
    if servers:  # an MCP server may ask for input: the person at the terminal answers
        agent.input_handler = TerminalInputHandler()
    return agent


def command_agent(args: argparse.Namespace) -> tuple[str, BaseAgent | PlanningFlow, Settings]:
    """The agent a command's flags and configuration name (`run`, `debug`, `chat`): its name (a
    built-in one, or the person's ``MODULE:FUNCTION``: `--agent`, else ``[agent] factory``, else
    toolcall), the agent (or the flow a factory built), and the settings it was built from.
    `ConfigError` (a `ValueError`) for what cannot be built."""
    from .config import AgentSettings, LLMSettings, Settings, build_llm

    name = args.agent or Settings.load(args.config).agent.factory or "toolcall"
    overrides = {
        "llm": {name: flags_given(args, LLMSettings.model_fields)},
        "agent": flags_given(args, AgentSettings.model_fields),
    }
    settings = Settings.load(args.config, overrides)
    llm = build_llm(settings.llm_for(name))
    check_model_credentials(llm)
    if ":" in name:  # the person's own factory
        check_own_agent(name, args, settings)
        return name, own_agent(name, llm), settings
    servers = mcp_server_settings(settings, args)
    options, tools = settings.agent.agent_kwargs(), settings.agent.tools or []
    return name, build_agent(name, settings, llm, options, mcp_servers=servers, tools=tools), settings


def own_tools(targets: Sequence[str]) -> list[Tool]:
    """The tools `--tool MODULE:FUNCTION` names: a `Tool` as it is, a function made one (`tool`)."""
    found: list[Tool] = []
    for target in targets:
        made = imported(target, "--tool")
        if isinstance(made, Tool):
            found.append(made)
        elif callable(made):
            try:
                found.append(tool(made))
            except (TypeError, ValueError) as exc:
                raise ConfigError(
                    f"--tool {target!r} cannot be a tool: {' '.join(str(exc).split())}"
                ) from None
        else:
            raise ConfigError(f"--tool {target!r} is a {type(made).__name__}, not a function or a Tool")
    return found


def check_own_agent(name: str, args: argparse.Namespace, settings: Settings) -> None:
    """`ConfigError` for what configures the built-in agents, given with the person's factory
    `name` (which builds its own agent, its options, tools and servers with it)."""
    from ..agent.toolcall import ToolCallOptions
    from ..options import option_fields

    flagged = sorted(
        "--" + option.name.replace("_", "-")
        for option in option_fields(ToolCallOptions)
        if getattr(args, option.name, None) is not None
    )
    if flagged:
        raise ConfigError(
            f"{', '.join(flagged)} configure the built-in agents; --agent {name} builds its own: "
            "set its options in your factory"
        )
    if settings.agent.tools:
        raise ConfigError(
            f"--tool ([agent] tools) adds tools to the built-in agents; --agent {name} builds its own: "
            "give it its tools in your factory"
        )
    if getattr(args, "mcp_servers", None) or getattr(args, "mcp_oauth", None):
        raise ConfigError(
            f"--mcp-server connects the built-in agents; --agent {name} builds its own: give it its "
            "MCP servers in your factory"
        )


def own_agent(target: str, llm: ChatModel, *, terminal: bool = True) -> BaseAgent | PlanningFlow:
    """The agent (or flow) the person's factory `target` (``MODULE:FUNCTION``) builds, called with
    ``llm=`` (the model the command line configured); recorded as built by it (`built_by`), so that
    `resume` and `replay` build it again. Its calls that need approval are asked about on the
    terminal, as a built-in agent's are, unless it has an approver of its own. `ConfigError` in one
    line when the factory is not there, raises, or builds neither an agent nor a flow."""
    from ..flow.flow import PlanningFlow
    from .terminal import TerminalApprover

    factory = imported(target, "--agent")
    if not callable(factory):
        raise ConfigError(
            f"--agent {target!r} is a {type(factory).__name__}, not a function: give MODULE:FUNCTION"
        )
    try:
        made = factory(llm=llm)
    except Exception as exc:
        message = " ".join(str(exc).split())
        raise ConfigError(f"--agent {target!r} raised {type(exc).__name__}: {message}") from None
    if not isinstance(made, BaseAgent | PlanningFlow):
        raise ConfigError(
            f"--agent {target!r} returned a {type(made).__name__}, not an agent or a flow: return a "
            "ToolCallAgent (or another BaseAgent), or a PlanningFlow"
        )
    built: BaseAgent | PlanningFlow = made
    built.built_by = {"factory": target}
    if isinstance(built, ToolCallAgent) and built.approval_names and terminal and built.approver is None:
        built.approver = TerminalApprover()
    return built


def check_docker_sandbox(image: str) -> None:
    """`[sandbox] mode = "docker"` asks for the Docker sandbox: without an engine or the image the
    run is refused before it starts (`ConfigError`), rather than run with every tool failing."""
    from ..sandbox.session import docker_unavailable

    problem = docker_unavailable(image)
    if problem is not None:
        raise ConfigError(f'[sandbox] mode = "docker", but {problem}')


def command_sandbox(sandbox: SandboxSettings) -> SandboxSettings:
    """The sandbox a command's Manus runs in, decided before its first command: ``docker`` as
    checked by `check_docker_sandbox`; ``auto`` made ``docker`` where that can run, else
    ``local`` with one line on stderr saying so and how to require Docker. Blocking (it asks the
    engine): before the event loop starts."""
    from ..sandbox.session import docker_unavailable

    if sandbox.mode == "local":
        return sandbox
    if sandbox.mode == "docker":
        check_docker_sandbox(sandbox.image)
        return sandbox
    problem = docker_unavailable(sandbox.image)
    if problem is None:
        return sandbox.model_copy(update={"mode": "docker"})
    warning(
        f"no Docker sandbox ({problem.rstrip('.')}); Manus's commands run on this machine, without "
        'memory, process or network limits: set [sandbox] mode = "docker" to require Docker'
    )
    return sandbox.model_copy(update={"mode": "local"})


def resumed_sandbox(
    path: str, sandbox: SandboxSettings, record: SandboxRecord | None, flag: str | None
) -> SandboxSettings:
    """The sandbox `agentfsm resume` runs a Manus checkpoint in: where the checkpoint's `record`
    says (`resumed_settings`), with the configured limits. A run that used Docker goes on in
    Docker with its image, or is refused (`ConfigError`, exit 2) naming the image and the fix;
    only `flag` ``--sandbox local`` moves it to this machine (said on stderr), not a
    configured ``mode = "local"``, which may predate the run. No record: as `run` decides."""
    from ..sandbox.record import resumed_settings
    from ..sandbox.session import docker_unavailable

    if flag is not None:
        sandbox = sandbox.model_copy(update={"mode": flag})
    elif record is not None and record.kind == "docker" and sandbox.mode == "local":
        raise ConfigError(
            f"{path}: the run used {record.describe()}, but [sandbox] mode = 'local': pass --sandbox "
            "docker to resume it there, or --sandbox local to run its commands on this machine"
        )
    resumed = resumed_settings(sandbox, record)
    if record is None:
        return command_sandbox(resumed)
    if record.kind == "docker" and resumed.mode == "docker":
        problem = docker_unavailable(resumed.image)
        if problem is not None:
            for hint in (", or set [sandbox] mode = 'local'", " (or set [sandbox] mode = 'local')"):
                problem = problem.removesuffix(hint)  # a resume takes --sandbox local for that
            raise ConfigError(
                f"{path}: the run used {record.describe()}, but {problem.rstrip('.')}; resume it where "
                "that engine and image are, or pass --sandbox local to run its commands on this machine"
            )
        return resumed
    if resumed.mode == "local":
        how = ", as --sandbox local asks" if flag else ": pass --sandbox docker to resume it in Docker"
        warning(
            f"{path}: the run used {record.describe()}; its commands run on this machine, without "
            f"memory, process or network limits{how}"
        )
        return resumed
    return command_sandbox(resumed)  # a local run resumed with --sandbox docker


def recorded_build(config: object) -> tuple[str | None, list[str]]:
    """What a recording's config says built its agent (`built_by`): the person's factory, or None,
    and the person's tools the built-in agent was given. A config of another shape (a damaged file)
    names neither: its reader says what is wrong with it."""
    built_by = config.get("built_by") if isinstance(config, dict) else None
    if not isinstance(built_by, dict):
        return None, []
    factory, tools = built_by.get("factory"), built_by.get("tools")
    named = factory if isinstance(factory, str) and factory else None
    return named, [t for t in tools if isinstance(t, str)] if isinstance(tools, list) else []


def recorded_kind(agent_class: object) -> str:
    """The `--agent` name of the class a trace or checkpoint recorded (``module.QualName``)."""
    kind = str(agent_class)
    if kind.endswith(".PlanningFlow"):
        return "planning"
    for suffix, name in ((".Manus", "manus"), (".MCPAgent", "mcp"), (".BrowserAgent", "browser")):
        if kind.endswith(suffix):
            return name
    return "toolcall"


def agent_class_named(name: str) -> type[ToolCallAgent]:
    if name == "manus":
        from ..agent.manus import Manus

        return Manus
    if name == "mcp":
        from ..agent.mcp import MCPAgent

        return MCPAgent
    if name == "browser":
        from ..agent.browser import BrowserAgent

        return BrowserAgent
    return ToolCallAgent


def options_class_named(name: str) -> type[ToolCallOptions]:
    """The options record of the agent `name` (its defaults fill what a checkpoint lacks)."""
    return agent_class_named(name).options_class
