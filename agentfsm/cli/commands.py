"""The `agentfsm` command: `run` a task on a model, `resume` a checkpoint, the offline `demo`,
`diagram`, `replay` a trace, `mcp-serve` agents to MCP clients.

Why it is built this way:
- stdout carries only the command's output (the result, `--json`'s one
  object, the demo's transitions); logs go to stderr, and while the agent
  runs anything a dependency prints is redirected to stderr too.
- Configuration errors come first: the file and environment are checked
  before argparse looks at the other options, so a wrong `--config` is
  reported even when other flags are wrong too.
- The exit status says how the run ended (0 done, 3 stopped by a limit,
  1 error, 2 bad usage or configuration, 4 paused for approval, 130
  interrupted), so scripts need not parse the output.
- What is printed and the exit codes live in `output`, which the debugger
  shares, so neither command module imports the other.
- Importing this module does not import litellm (seconds): `LLM` loads it
  on the first model call. What costs a noticeable share of `agentfsm --help`
  is imported by the commands that use it: the configuration and logging
  modules (pydantic-settings, structlog with rich: a third of a second),
  Manus and its toolbox, the debugger and the terminal prompt (asyncio), and
  the trace reader and checkpoint (pathlib, tempfile: a quarter of the
  module's own import time). The rest is imported here.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from ..agent.approval import with_approval
from ..agent.awaiting_input import with_input
from ..agent.base import BaseAgent
from ..agent.toolcall import ToolCallAgent
from ..errors import (
    CheckpointError,
    CheckpointLeasedError,
    ConfigError,
    RecordingError,
    ReplayError,
    TraceError,
)
from ..fsm.diagram import path_of, render
from ..model.base import ChatModel
from ..run.result import AgentState, RunResult
from ..toolbox.terminate import Terminate
from .live import LiveView, Watched
from .output import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_LIMIT,
    EXIT_USAGE,
    exit_code,
    format_transition,
    print_result,
)
from .parser import DURABLE_COMMANDS, PROG, build_parser

if TYPE_CHECKING:
    from ..agent.toolcall import ToolCallOptions
    from ..flow.flow import PlanningFlow
    from ..flow.result import FlowResult
    from ..mcp.settings import MCPServerSettings
    from .config import Settings

__all__ = ["main"]

T = TypeVar("T")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default: `sys.argv[1:]`); return the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        _check_configuration_first(args_list)
        args = build_parser().parse_args(args_list)
    except ConfigError as exc:
        return _usage_error(str(exc))
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.command == "demo":
        return _demo(args)
    if args.command == "debug":
        args.json = False
    if args.command == "diagram":
        return _diagram(args)
    if args.command == "replay":
        return _replay(args)
    if args.command == "resume":
        return _resume(args)
    if args.command == "mcp-serve":
        return _mcp_serve(args)
    if args.command == "sandbox":
        from .sandbox import sandbox_command

        return sandbox_command(args)
    if args.command in DURABLE_COMMANDS:
        from .durable import durable_command

        return durable_command(args)
    return _run(args)


def _check_configuration_first(args_list: list[str]) -> None:
    """For `run`: load the file and environment before argparse checks anything else."""
    commands = ("run", "debug", "resume", "mcp-serve", "worker")
    if not args_list or args_list[0] not in commands or {"-h", "--help"} & set(args_list):
        return
    from .config import Settings

    pre = argparse.ArgumentParser(prog=f"{PROG} run", add_help=False)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(args_list[1:])
    Settings.load(known.config)


def _interrupted() -> int:
    print(f"{PROG}: interrupted", file=sys.stderr)
    return EXIT_INTERRUPTED


def _usage_error(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


# -- the commands -------------------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    from ..recording.files import check_writable
    from . import log_setup
    from .config import AgentSettings, LLMSettings, Settings, build_llm
    from .otel import exporting

    if not args.task.strip():  # nothing to ask: refused before a model is called
        return _usage_error(
            f"TASK is empty: say what the agent should do, e.g. {PROG} {args.command} "
            '"list the files in this folder"'
        )
    try:  # a path a recorder cannot write is bad usage, refused before the run
        for what, path in (("trace", args.trace), ("checkpoint", getattr(args, "checkpoint", None))):
            if path is not None:
                check_writable(path, what)
    except RecordingError as exc:
        return _usage_error(str(exc))
    if getattr(args, "stream", None) and getattr(args, "flow", None) is not None:
        return _usage_error("--stream prints one agent's text; a flow's runs are not streamed: drop --stream")
    if getattr(args, "flow", None) is not None:
        return _run_flow(args)
    if getattr(args, "review", False):
        return _usage_error("--review reviews a flow's plans; use it with --flow planning")
    if getattr(args, "stream", None) and args.json:
        return _usage_error("--stream prints the model's text on stdout, --json the result: choose one")
    overrides = {
        "llm": {args.agent: _flagged(args, LLMSettings.model_fields)},
        "agent": _flagged(args, AgentSettings.model_fields),
    }
    try:
        settings = Settings.load(args.config, overrides)
        llm_settings = settings.llm_for(args.agent)
        llm = build_llm(llm_settings)
        _check_credentials(llm)
        servers = _mcp_servers(settings, getattr(args, "mcp_servers", []))
        agent = _build_agent(args.agent, settings, llm, settings.agent.agent_kwargs(), mcp_servers=servers)
        spans = exporting(settings.telemetry, getattr(args, "otel", False))
    except ValueError as exc:  # ConfigError, or an option the agent refuses
        return _usage_error(str(exc))
    except KeyboardInterrupt:  # Ctrl-C while the check loads litellm: no run started
        return _interrupted()
    stream = bool(getattr(args, "stream", None))
    # Streamed text is the progress: no live view beside it (nor in the debugger, which prints its own).
    view = None if args.command == "debug" or stream else _terminal_view(agent, args.json)
    with (
        log_setup.configured(
            args.log_format, stream=_log_stream(view), secrets=llm_settings.secrets(), level=_log_level(args)
        ),
        spans,
    ):
        if args.command == "debug":
            from .debugger import debug_command

            return debug_command(agent, args.task, args.breaks, trace=args.trace)
        return _drive(
            agent,
            args.task,
            as_json=args.json,
            trace=args.trace,
            checkpoint=args.checkpoint,
            stream=stream,
            view=view,
        )


FLOW_EXECUTORS = ("toolcall", "manus")
"""The agents a flow run from the command line gives its steps to (a step's ``[name]`` tag picks one)."""


def _run_flow(args: argparse.Namespace, resumed: dict[str, Any] | None = None) -> int:
    """`run --flow planning TASK`: the configured model plans (``[llm.planning]`` over ``[llm]``), the
    CLI's agents run the steps (each with its own ``[llm.<name>]``); the flow's result is printed as
    `run` prints a run's, after the plan with its statuses. `--review` asks on the terminal about
    each plan; `--trace` and `--checkpoint` write the flow's (see `agentfsm.flow`). `resumed`: the
    flow checkpoint `agentfsm resume` was given, continued by a flow built as the one that wrote it."""
    from ..recording.files import check_writable
    from . import log_setup
    from .config import AgentSettings, LLMSettings, Settings, build_llm
    from .otel import exporting

    task: str | None = getattr(args, "task", None)
    trace: str | None = getattr(args, "trace", None)
    flow_name = str(resumed["flow"]) if resumed is not None else args.flow
    review = bool(resumed["reviewing"]) if resumed is not None else args.review
    try:
        for what, path in (("trace", trace), ("checkpoint", args.checkpoint)):
            if path is not None and resumed is None:
                check_writable(path, what)
    except RecordingError as exc:
        return _usage_error(str(exc))
    flagged = _flagged(args, LLMSettings.model_fields)
    llm_flags = dict.fromkeys((*FLOW_EXECUTORS, flow_name), flagged)
    recorded: dict[str, Any] = resumed["config"] if resumed is not None else {}
    if resumed is not None and "model" not in flagged:  # each model as recorded, as `resume` of an agent
        models = {flow_name: recorded.get("llm") or {}} | {
            name: (agent.get("config") or {}).get("llm") or {}
            for name, agent in (recorded.get("agents") or {}).items()
        }
        for name, model in models.items():
            if name in llm_flags and model.get("model"):
                llm_flags[name] = {**flagged, "model": model["model"]}
    overrides = {"llm": llm_flags, "agent": _flagged(args, AgentSettings.model_fields)}
    try:
        settings = Settings.load(args.config, overrides)
        planner = build_llm(settings.llm_for(flow_name))
        _check_credentials(planner)
        agents: dict[str, BaseAgent] = {}
        for name in FLOW_EXECUTORS:
            llm = build_llm(settings.llm_for(name))
            _check_credentials(llm)
            options = settings.agent.agent_kwargs()
            saved = (recorded.get("agents") or {}).get(name)
            if saved is not None:  # the options the checkpoint records, not the file's `[agent]`
                options = _options_class(name).from_json(saved.get("config") or {}).to_dict()
            agents[name] = _build_agent(name, settings, llm, options)
        spans = exporting(settings.telemetry, getattr(args, "otel", False))
    except (ValueError, TypeError) as exc:
        return _usage_error(str(exc))
    except KeyboardInterrupt:
        return _interrupted()
    from ..flow.flow import PlanningFlow  # the flow wing, loaded by the command that runs one
    from .terminal import TerminalPlanReviewer

    reviewer = TerminalPlanReviewer() if review else None
    # The terminal's approver and input handler ask for the flow, in AWAITING_AGENT: a step's
    # agent pauses, so the wait is the flow's state (and its checkpoint's), as a plan review is.
    approver: Any = None
    input_handler: Any = None
    for agent in agents.values():
        if isinstance(agent, ToolCallAgent):
            approver, agent.approver = approver or agent.approver, None
            input_handler, agent.input_handler = input_handler or agent.input_handler, None
    flow = PlanningFlow(
        agents=agents,
        planner_llm=planner,
        reviewer=reviewer,
        approver=approver,
        input_handler=input_handler,
        name=flow_name,
    )
    recorded_state = flow.table.by_name.get(str(resumed["run_state"].get("state"))) if resumed else None
    if recorded_state is not None and recorded_state.final is not None:  # as `resume` of an agent's
        print(f"{PROG}: the flow already finished; its result:", file=sys.stderr)
    view = _terminal_view(flow, args.json, steps=agents.values())
    live: contextlib.AbstractContextManager[object] = view if view is not None else contextlib.nullcontext()
    for asker in (reviewer, approver, input_handler):
        if asker is not None and view is not None and hasattr(asker, "quiet"):
            asker.quiet = view.suspended  # the questions are not drawn over
    secrets = [s for name in (*FLOW_EXECUTORS, flow_name) for s in settings.llm_for(name).secrets()]
    out = sys.stdout
    logs = log_setup.configured(
        args.log_format, stream=_log_stream(view), secrets=secrets, level=_log_level(args)
    )
    with logs, contextlib.redirect_stdout(sys.stderr), live, spans:
        try:
            result = _run_async(_flow_then_close(flow, task, trace, args.checkpoint))
        except KeyboardInterrupt:
            return _interrupted()
        except (CheckpointLeasedError, CheckpointError) as exc:  # CheckpointError: not built as recorded
            return _usage_error(str(exc))
    if args.json:
        out.write(result.model_dump_json() + "\n")
        out.flush()
        if result.error:
            print(f"{PROG}: error: {result.error}", file=sys.stderr, flush=True)
    else:
        if result.plan is not None:
            print(result.plan.render() + "\n", file=out)
        assert flow.last_result is not None
        print_result(flow.last_result, False, out)
    if result.state is AgentState.ERROR:
        return EXIT_ERROR
    return 0 if result.ok else EXIT_LIMIT


async def _flow_then_close(
    flow: PlanningFlow, task: str | None, trace: str | None, checkpoint: str | None
) -> FlowResult:
    """The flow's run (`task` None: the one saved in `checkpoint`), then release what its agents
    hold (Manus's sandbox and browser)."""
    try:
        if task is None:
            assert checkpoint is not None
            return await flow.resume(checkpoint=checkpoint)
        return await flow.execute(task, trace=trace, checkpoint=checkpoint)
    finally:
        for agent in flow.agents.values():
            aclose = getattr(agent, "aclose", None)
            if aclose is not None:
                await aclose()


def _mcp_serve(args: argparse.Namespace) -> int:
    """Serve `run_agent` to MCP clients: each call builds its agent as `run` would, from the
    same configuration and flags (the model flags apply to every agent's `[llm]`)."""
    from . import log_setup
    from .config import AgentSettings, LLMSettings, Settings, build_llm
    from .parser import AGENTS, package_version

    http = args.http
    if http is not None and not args.allow_remote and not _is_loopback(http[0]):
        return _usage_error(
            f"--http {http[0]}:{http[1]} serves beyond this machine, where anyone who reaches it runs "
            "agents: bind a loopback address (127.0.0.1), or pass --allow-remote"
        )
    llm_flags = _flagged(args, LLMSettings.model_fields)
    overrides = {"llm": dict.fromkeys(AGENTS, llm_flags), "agent": _flagged(args, AgentSettings.model_fields)}
    try:
        settings = Settings.load(args.config, overrides)
        flagged_servers = _mcp_servers(settings, args.mcp_servers)
    except ValueError as exc:
        return _usage_error(str(exc))
    models: dict[str, ChatModel] = {}

    def build(name: str, max_steps: int | None) -> ToolCallAgent:
        """A new agent for one call; the model of each agent name is built once and shared."""
        if name not in models:
            llm = build_llm(settings.llm_for(name))
            _check_credentials(llm)
            models[name] = llm
        options = settings.agent.agent_kwargs() | ({"max_steps": max_steps} if max_steps else {})
        servers = flagged_servers if name != "toolcall" else None
        return _build_agent(name, settings, models[name], options, mcp_servers=servers, terminal=False)

    try:
        build(args.agent, None)  # the default agent is buildable: its errors are reported now, not per call
    except ValueError as exc:
        return _usage_error(str(exc))
    except KeyboardInterrupt:
        return _interrupted()
    from ..mcp.serve import AgentServer  # the MCP SDK's server side, loaded by this command only

    try:
        server = AgentServer(build, agents=AGENTS, default_agent=args.agent, version=package_version())
    except ImportError as exc:  # MissingExtraError: the SDK is not installed
        return _usage_error(str(exc))
    secrets = [secret for name in AGENTS for secret in settings.llm_for(name).secrets()]
    with log_setup.configured(args.log_format, secrets=secrets, level=_log_level(args)):
        try:
            if http is None:
                _run_async(server.serve_stdio())
            else:

                def ready(url: str) -> None:
                    print(f"{PROG}: serving MCP on {url}", file=sys.stderr, flush=True)

                with contextlib.redirect_stdout(sys.stderr):  # stdout is no output of a server
                    _run_async(server.serve_http(*http, ready=ready))
        except ConfigError as exc:  # the address cannot be listened on
            return _usage_error(str(exc))
        except KeyboardInterrupt:
            return _interrupted()
    return 0


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name other than localhost: it may resolve anywhere
        return False


def _check_credentials(llm: ChatModel) -> None:
    """Before any run starts: the provider's key is there, else `ConfigError` naming the variable.

    Keyed on the model's name and options (`LLMOptions`, which an adapter for a provider is built
    from; a model without them has no credentials to check). Offline, and before the event loop
    exists: litellm's import (seconds, which the run would spend anyway) freezes nothing here.
    """
    from ..model.credentials import check_credentials
    from ..model.options import LLMOptions

    if isinstance(llm, LLMOptions):
        check_credentials(llm.model, api_key=llm.api_key, api_base=llm.api_base, api_version=llm.api_version)


def _flagged(args: argparse.Namespace, options: Iterable[str]) -> dict[str, Any]:
    """The options set by a flag: a flag is named after the option it sets (``--max-steps``)."""
    return {name: value for name in options if (value := getattr(args, name, None)) is not None}


def _resume(args: argparse.Namespace) -> int:
    """Rebuild the agent that wrote the checkpoint, then resume it: its recorded options (the file's
    `[agent]` does not apply: the run's options are the checkpoint's) and, unless flagged, model."""
    from ..flow.checkpoint import read_flow_checkpoint
    from ..recording.checkpoint import read_checkpoint
    from . import log_setup
    from .config import LLMSettings, Settings, build_llm
    from .otel import exporting

    flow_data: dict[str, Any] | None = None
    with contextlib.suppress(CheckpointError):  # not a flow's: an agent's journal (or nothing)
        flow_data = read_flow_checkpoint(args.checkpoint, resuming=True)  # a cancelled flow: before it
    if flow_data is not None:
        return _run_flow(args, flow_data)
    try:
        data = read_checkpoint(args.checkpoint, resuming=True)
        kind = _recorded_kind(data["agent_class"])
        options = _options_class(kind).from_json(data["config"])
    except (ValueError, TypeError) as exc:  # CheckpointError, or recorded options that are not valid
        return _usage_error(_about(args.checkpoint, exc))
    flags_llm = _flagged(args, LLMSettings.model_fields)
    recorded_model = (data["config"].get("llm") or {}).get("model")
    if "model" not in flags_llm and recorded_model:
        flags_llm["model"] = recorded_model
    try:
        settings = Settings.load(args.config, {"llm": {kind: flags_llm}})
        llm_settings = settings.llm_for(kind)
        llm = build_llm(llm_settings)
        _check_credentials(llm)
        servers = _mcp_servers(settings, args.mcp_servers) if kind != "toolcall" else None
        agent = _build_agent(kind, settings, llm, options.to_dict(), mcp_servers=servers)
        spans = exporting(settings.telemetry, False)  # [telemetry] enabled: the resumed run's spans
    except ValueError as exc:
        return _usage_error(str(exc))
    except KeyboardInterrupt:
        return _interrupted()
    agent.name = str(data.get("agent") or agent.name)
    recorded_state = agent.table.by_name.get(str(data["run_state"].get("state")))
    if recorded_state is not None and recorded_state.final is not None:
        print(f"{PROG}: the run already finished; its result:", file=sys.stderr)
    view = _terminal_view(agent, args.json)
    with (
        log_setup.configured(
            args.log_format, stream=_log_stream(view), secrets=llm_settings.secrets(), level=_log_level(args)
        ),
        spans,
    ):
        try:
            return _drive(agent, None, as_json=args.json, checkpoint=args.checkpoint, view=view)
        except CheckpointError as exc:  # the agent rebuilt is not the one that wrote it (`restore`)
            return _usage_error(_about(args.checkpoint, exc))


def _about(path: str, exc: BaseException) -> str:
    """`exc`'s message, on one line, naming the checkpoint `path` (most do already)."""
    message = " ".join(str(exc).split())
    return message if path in message else f"{path}: {message}"


def _mcp_servers(settings: Settings, flags: list[tuple[str, str]]) -> dict[str, MCPServerSettings]:
    """The configured MCP servers, with those of ``--mcp-server NAME=...`` over them."""
    from ..mcp.settings import MCPServerSettings

    servers = settings.mcp.server_settings()
    for name, target in flags:
        servers[name] = MCPServerSettings.parse(target)
    return servers


def _build_agent(
    name: str,
    settings: Settings,
    llm: ChatModel,
    options: Mapping[str, Any],
    *,
    mcp_servers: Mapping[str, MCPServerSettings] | None = None,
    terminal: bool = True,
) -> ToolCallAgent:
    """The agent `name` with `options`; calls that need approval are asked about on the terminal
    (unless `terminal` is off: a server's agents ask their client). `mcp_servers` connect on the
    first think (mcp and manus agents)."""
    from ..agent.manus import Manus
    from .terminal import TerminalApprover, TerminalInputHandler, ask_on_terminal, terminal_available

    agent: ToolCallAgent
    servers = dict(mcp_servers or {})
    if name == "manus":
        # A question is asked on the terminal only when someone can answer it there.
        ask = ask_on_terminal if terminal and terminal_available() else None
        agent = Manus(
            llm=llm,
            sandbox=settings.sandbox,
            browser=settings.browser,
            ask_human=ask,
            mcp_servers=servers,
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
        agent = MCPAgent(llm=llm, servers=servers, name=name, **options)
    else:
        if servers:
            raise ConfigError(
                f"the {name} agent takes no MCP servers (got {', '.join(servers)}): "
                "use --agent mcp or --agent manus"
            )
        agent = ToolCallAgent(llm=llm, tools=[Terminate()], name=name, **options)
    # An MCP server's tools are known once it connects: approvals may name them.
    unknown = sorted(agent.require_approval - set(agent.tools.names)) if not servers else []
    if unknown:
        raise ConfigError(
            f"require_approval names tools the {name} agent does not have: {', '.join(unknown)}; "
            f"its tools: {', '.join(agent.tools.names)}"
        )
    if name == "manus" and settings.sandbox.mode == "docker":
        _check_docker_sandbox(settings.sandbox.image)
    if agent.approval_names and terminal:
        agent.approver = TerminalApprover()
    if servers:  # an MCP server may ask for input: the person at the terminal answers
        agent.input_handler = TerminalInputHandler()
    return agent


def _check_docker_sandbox(image: str) -> None:
    """`[sandbox] mode = "docker"` asks for the Docker sandbox: without an engine or the image the
    run is refused before it starts (`ConfigError`), rather than run with every tool failing."""
    from ..sandbox.session import docker_unavailable

    problem = docker_unavailable(image)
    if problem is not None:
        raise ConfigError(f'[sandbox] mode = "docker", but {problem}')


BINARY_FORMATS = ("png",)
"""Diagram formats that are not text: written to a file or a pipe, never to a terminal."""


def _diagram(args: argparse.Namespace) -> int:
    if args.format in BINARY_FORMATS and not args.output and sys.stdout.isatty():
        return _usage_error(
            f"--format {args.format} is binary and stdout is a terminal: write it to a file with "
            f"-o diagram.{args.format}, or redirect stdout"
        )
    table = _agent_class(args.agent).table
    flow = args.agent == "planning"
    if flow and args.approvals:
        return _usage_error("the planning flow runs no tools itself, so it has no approvals; try --review")
    if args.review and not flow:
        return _usage_error("--review draws the planning flow's plan review; use it with --agent planning")
    if flow:
        from ..flow.review import with_review
        from ..flow.table import FLOW_TABLE

        table = with_review(FLOW_TABLE) if args.review else FLOW_TABLE
    path = None
    if args.trace is not None:
        from ..recording.trace import read_trace

        try:
            header, records = read_trace(args.trace)
        except TraceError as exc:
            return _usage_error(str(exc))
        kind = _recorded_kind(header.get("agent_class"))
        table = _agent_class(kind).table
        config = header.get("config")
        if not isinstance(config, dict):
            return _usage_error(f"{args.trace}: the header's config is not a table; re-record the run")
        if kind == "planning":
            from ..flow.review import with_review
            from ..flow.table import FLOW_TABLE

            table = with_review(FLOW_TABLE) if config.get("reviewing") else FLOW_TABLE
        elif config.get("awaiting_input"):
            table = with_input(table)
        if config.get("require_approval"):
            table = with_approval(table)
        if config.get("output"):  # the agent had `output_type`: its edge out of OBSERVING
            from ..agent.output import with_output

            table = with_output(table)
        try:
            own = [
                r for r in records if r["kind"] == "transition" and "agent" not in r
            ]  # a flow's agents' are theirs
            path = path_of(table, own)
        except ValueError as exc:
            return _usage_error(f"{args.trace}: {exc}")
    elif args.approvals:
        table = with_approval(table)
    try:
        data = render(table, args.format, highlight=args.highlight, path=path)
    except (ValueError, ImportError) as exc:
        return _usage_error(str(exc))
    if args.output:
        try:
            with open(args.output, "wb") as out:
                out.write(data)
        except OSError as exc:
            return _usage_error(
                f"cannot write the diagram {args.output}: {exc.strerror or exc}; "
                "name a file in an existing folder you may write"
            )
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    return 0


def _recorded_kind(agent_class: object) -> str:
    """The `--agent` name of the class a trace or checkpoint recorded (``module.QualName``)."""
    kind = str(agent_class)
    if kind.endswith(".PlanningFlow"):
        return "planning"
    return "manus" if kind.endswith(".Manus") else "mcp" if kind.endswith(".MCPAgent") else "toolcall"


def _agent_class(name: str) -> type[BaseAgent]:
    if name == "manus":
        from ..agent.manus import Manus

        return Manus
    if name == "mcp":
        from ..agent.mcp import MCPAgent

        return MCPAgent
    return ToolCallAgent


def _options_class(name: str) -> type[ToolCallOptions]:
    """The options record of the agent `name` (its defaults fill what a checkpoint lacks)."""
    if name == "manus":
        from ..agent.manus import ManusOptions

        return ManusOptions
    from ..agent.toolcall import ToolCallOptions

    return ToolCallOptions


def _demo(args: argparse.Namespace) -> int:
    from . import log_setup
    from .demo import TASK, build_demo_agent, demo_sandbox

    sandbox, described = demo_sandbox()
    agent = build_demo_agent(sandbox)
    out = sys.stdout
    if not args.json:
        print(f"task: {TASK}\nsandbox: {described}\n", file=out)
        # A blank line after the last edge (the only ones with a stop reason) sets the result apart.
        agent.on_transition(lambda t: print(format_transition(t) + "\n" * bool(t.stop_reason), file=out))
    # Each transition is shown once: printed above, so not logged too (unless -v), and no live view.
    default = logging.INFO if args.json else logging.WARNING
    with log_setup.configured(args.log_format, level=_log_level(args, default)):
        return _drive(agent, TASK, as_json=args.json, view=None)


def _replay(args: argparse.Namespace) -> int:
    """Print the replayed transitions (as `demo` does) and the result; a trace cut short is exit 1."""
    from ..agent.replay import replay
    from . import log_setup

    if _is_flow_trace(args.trace):
        if args.step:
            return _usage_error(f"{args.trace} is a flow's trace; --step replays an agent's: drop --step")
        return _replay_flow(args)
    if args.step:
        return _replay_step(args)
    with (
        log_setup.configured(args.log_format, level=_log_level(args)),
        contextlib.redirect_stdout(sys.stderr),
    ):
        try:
            replayed = _run_async(replay(args.trace))
        except ReplayError as exc:
            return _usage_error(str(exc))
    out = sys.stdout
    if not args.json:
        for t in replayed.transitions:
            print(format_transition(t) + "\n" * bool(t.stop_reason), file=out)
    if replayed.result is None:
        out.flush()
        print(
            f"{PROG}: {replayed.ended_early} (replayed {len(replayed.transitions)} transitions)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    print_result(replayed.result, args.json, out)
    return exit_code(replayed.result)


def _is_flow_trace(path: str) -> bool:
    """Whether the trace at `path` is a flow's (one that cannot be read is the agent replay's to refuse)."""
    from ..recording.trace import read_header

    try:
        header = read_header(path)
    except TraceError:
        return False
    return str(header.get("agent_class", "")).endswith(".PlanningFlow")


def _replay_flow(args: argparse.Namespace) -> int:
    """`replay` of a flow's trace: the flow's replayed transitions, its plan and its result, as
    `run --flow` prints them; exit status as `run --flow`'s."""
    from ..flow.replay import replay_flow
    from . import log_setup

    with log_setup.configured(args.log_format), contextlib.redirect_stdout(sys.stderr):
        try:
            replayed = _run_async(replay_flow(args.trace))
        except ReplayError as exc:
            return _usage_error(str(exc))
    out = sys.stdout
    result = replayed.result
    if not args.json:
        for t in replayed.transitions:
            print(format_transition(t) + "\n" * bool(t.stop_reason), file=out)
    if result is None:
        out.flush()
        print(
            f"{PROG}: {replayed.ended_early} (replayed {len(replayed.transitions)} transitions)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    if args.json:
        out.write(result.model_dump_json() + "\n")
    else:
        if result.plan is not None:
            print(result.plan.render() + "\n", file=out)
        if result.summary:
            print(result.summary, file=out)
        print(f"{result.state}  stop_reason={result.stop_reason}  replans={result.replans}", file=out)
    out.flush()
    if result.state is AgentState.ERROR:
        return EXIT_ERROR
    return 0 if result.ok or result.paused else EXIT_LIMIT


def _replay_step(args: argparse.Namespace) -> int:
    """`replay --step`: the replayed run under the debugger (recorded replies, nothing executed)."""
    from ..agent.replay import Replayer
    from . import log_setup
    from .debugger import debug_command

    try:
        replayer = Replayer(args.trace)
        with log_setup.configured(args.log_format, level=_log_level(args)):
            status = debug_command(
                replayer.agent, replayer.request, args.breaks, transitions=replayer.transitions()
            )
    except ReplayError as exc:
        return _usage_error(str(exc))
    if replayer.ended_early is not None:
        print(
            f"{PROG}: {replayer.ended_early} (replayed {len(replayer.replayed)} transitions)", file=sys.stderr
        )
        return EXIT_ERROR
    return status


def _drive(
    agent: BaseAgent,
    task: str | None,
    *,
    as_json: bool,
    trace: str | None = None,
    checkpoint: str | None = None,
    stream: bool = False,
    view: LiveView | None = None,
) -> int:
    """Run to the end (`task` None: resume `checkpoint`); print the result; map it to the exit status.

    Ctrl-C cancels the run's task (asyncio.run does that), so the agent ends
    in ERROR with `cancelled`; the result is still printed, and the status is 130.
    A checkpoint another run holds is refused before anything runs: its one line, status 2.
    `stream` (``--stream``): the model's text goes to stdout as it comes, and the result's
    summary to stderr (see `agentfsm.cli.stream`); the text is the progress, so no live view.
    """
    out = sys.stdout
    interrupted, refused = False, ""
    printer = None
    if stream:
        from .stream import TokenPrinter

        printer = TokenPrinter(out, sys.stderr)
        agent.on_event(printer)
    live: contextlib.AbstractContextManager[object] = view if view is not None else contextlib.nullcontext()
    for asker in (getattr(agent, "approver", None), getattr(agent, "input_handler", None)):
        if asker is not None and view is not None and hasattr(asker, "quiet"):
            asker.quiet = view.suspended  # the questions are not drawn over
    with contextlib.redirect_stdout(sys.stderr), live:  # what a dependency prints is not our output
        try:
            result: RunResult | None = _run_async(_run_then_close(agent, task, trace, checkpoint))
        except KeyboardInterrupt:
            interrupted, result = True, agent.last_result
        except CheckpointLeasedError as exc:
            refused, result = str(exc), None
    if refused:
        return _usage_error(refused)
    if result is not None and printer is not None:
        printer.finish(result, error_line=not interrupted)
    elif result is not None:
        print_result(result, as_json, out, error_line=not interrupted)  # `interrupted` says it
    if interrupted:
        return _interrupted()
    assert result is not None
    if result.error is not None and result.state is not AgentState.ERROR:
        # only a failed write on the edge into a final state does this: the run ended, unrecorded
        print(f"{PROG}: the run ended, but its last record was not written: {result.error}", file=sys.stderr)
        return EXIT_ERROR
    return exit_code(result)


def _terminal_view(agent: Watched, as_json: bool, steps: Iterable[Watched] = ()) -> LiveView | None:
    """Progress on the terminal (stderr), or None: not a terminal, `--json`, or rich (the `live`
    extra) missing. Made before the logs are set up, which then go through its console."""
    if as_json or not sys.stderr.isatty():
        return None
    try:
        return LiveView(agent, steps=steps)
    except ImportError:
        return None


def _log_stream(view: LiveView | None) -> TextIO | None:
    """Where log lines go: through the live view's console while there is one (else stderr)."""
    return view.log_stream if view is not None else None


def _log_level(args: argparse.Namespace, default: int = logging.INFO) -> int:
    """The engine's log level from `-q` / `-v` (see `log_setup.level_of`)."""
    from .log_setup import level_of

    return level_of(getattr(args, "quiet", 0), getattr(args, "verbose", 0), default)


async def _run_then_close(
    agent: BaseAgent, task: str | None, trace: str | None = None, checkpoint: str | None = None
) -> RunResult:
    """One run (or the resumed one), then release what the agent holds (Manus's sandbox, always)."""
    try:
        if task is None:
            assert checkpoint is not None
            return await agent.resume(checkpoint)
        return await agent.run(task, trace=trace, checkpoint=checkpoint)
    finally:
        aclose = getattr(agent, "aclose", None)  # agents with resources (Manus) have one
        if aclose is not None:
            await aclose()


def _run_async(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run`, with asyncio imported by the commands that run something (not `--help`)."""
    import asyncio

    return asyncio.run(main)


if __name__ == "__main__":
    sys.exit(main())
