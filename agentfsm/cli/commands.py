"""The `agentfsm` command: its dispatch, and `run` a task on a model, `resume` a checkpoint, the
offline `demo` and `diagram`. The commands of their own concepts have their own modules:
`flow_command` (`run --flow`), `replay_command`, `serve_command` (`mcp-serve`), `durable`,
`sandbox`; what they share is `building` (an agent from the configuration and the flags) and
`driving` (a run on the terminal to its exit status).

Why it is built this way:
- stdout carries only the command's output (the answer, `--json`'s one
  object, the demo's transitions); the summary line, logs and errors go to
  stderr, and while the agent runs anything a dependency prints is
  redirected to stderr too.
- Configuration errors come first: the file and environment are checked
  before argparse looks at the other options, so a wrong `--config` is
  reported even when other flags are wrong too.
- The exit status says how the run ended (0 done, 3 stopped by a limit,
  1 error, 2 bad usage or configuration, 4 paused for approval, 130
  interrupted), so scripts need not parse the output.
- What is printed and the exit codes live in `output`, which the debugger
  and every command module share.
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
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..agent.approval import with_approval
from ..agent.awaiting_input import with_input
from ..agent.base import BaseAgent
from ..errors import (
    CheckpointError,
    ConfigError,
    RecordingError,
    TraceError,
)
from ..fsm.diagram import path_of, render
from .building import (
    agent_class_named,
    build_agent,
    check_model_credentials,
    command_agent,
    flags_given,
    mcp_server_settings,
    options_class_named,
    own_agent,
    recorded_build,
    recorded_kind,
    resumed_sandbox,
)
from .driving import drive, log_level, log_stream, terminal_view
from .flow_command import drive_flow, run_flow_command
from .output import (
    EXIT_USAGE,
    exit_interrupted,
    format_transition,
    usage_error,
)
from .parser import DURABLE_COMMANDS, PROG, build_parser
from .replay_command import replay_command
from .serve_command import mcp_serve_command

if TYPE_CHECKING:
    pass

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default: `sys.argv[1:]`); return the exit status. However the
    command ends (a return, Ctrl-C, an exception), the terminal keeps the modes it had
    (`terminal_modes.kept`: a prompt interrupted mid-line leaves readline's behind otherwise)."""
    from . import terminal_modes

    with terminal_modes.kept():
        return _command(argv)


def _command(argv: Sequence[str] | None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        _check_configuration_first(args_list)
        args = build_parser().parse_args(args_list)
    except ConfigError as exc:
        return usage_error(str(exc))
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.command == "demo":
        return _demo(args)
    if args.command == "debug":
        args.json = False
    if args.command == "diagram":
        return _diagram(args)
    if args.command == "replay":
        return replay_command(args)
    if args.command == "resume":
        return _resume(args)
    if args.command == "mcp-serve":
        return mcp_serve_command(args)
    if args.command == "chat":
        from .chat import chat_command

        return chat_command(args)
    if args.command == "ui":
        from .ui_command import ui_command

        return ui_command(args)
    if args.command == "mcp":
        from .mcp_command import mcp_command

        return mcp_command(args)
    if args.command == "sandbox":
        from .sandbox import sandbox_command

        return sandbox_command(args)
    if args.command in DURABLE_COMMANDS:
        from .durable import durable_command

        return durable_command(args)
    return _run(args)


def _check_configuration_first(args_list: list[str]) -> None:
    """For `run`: load the file and environment before argparse checks anything else."""
    commands = ("run", "chat", "debug", "resume", "mcp-serve", "worker")
    if not args_list or args_list[0] not in commands or {"-h", "--help"} & set(args_list):
        return
    from .config import Settings

    pre = argparse.ArgumentParser(prog=f"{PROG} run", add_help=False, allow_abbrev=False)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(args_list[1:])
    Settings.load(known.config)


# -- the commands -------------------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    from ..recording.files import check_writable
    from . import log_setup
    from .otel import exporting

    if not args.task.strip():  # nothing to ask: refused before a model is called
        return usage_error(
            f"TASK is empty: say what the agent should do, e.g. {PROG} {args.command} "
            '"list the files in this folder"'
        )
    try:  # a path a recorder cannot write is bad usage, refused before the run
        for what, path in (("trace", args.trace), ("checkpoint", getattr(args, "checkpoint", None))):
            if path is not None:
                check_writable(path, what)
    except RecordingError as exc:
        return usage_error(str(exc))
    if getattr(args, "stream", None) and getattr(args, "flow", None) is not None:
        return usage_error("--stream prints one agent's text; a flow's runs are not streamed: drop --stream")
    if getattr(args, "flow", None) is not None:
        return run_flow_command(args)
    if getattr(args, "review", False):
        return usage_error("--review reviews a flow's plans; use it with --flow planning")
    if getattr(args, "ui", False) and (args.checkpoint or getattr(args, "stream", None)):
        which = "--checkpoint" if args.checkpoint else "--stream"
        return usage_error(
            f"--ui runs the task in the inspector's own folder and shows it on the page: drop {which}"
        )
    if getattr(args, "stream", None) and args.json:
        return usage_error("--stream prints the model's text on stdout, --json the result: choose one")
    try:
        name, built, settings = command_agent(args)
        llm_settings = settings.llm_for(name)
        spans = exporting(settings.telemetry, getattr(args, "otel", False))
    except ValueError as exc:  # ConfigError, or an option the agent refuses
        return usage_error(str(exc))
    except KeyboardInterrupt:  # Ctrl-C while the check loads litellm: no run started
        return exit_interrupted()
    if not isinstance(built, BaseAgent):  # a flow, from the person's factory
        if args.command == "debug" or getattr(args, "ui", False) or getattr(args, "stream", None):
            what = (
                "debug" if args.command == "debug" else "--ui" if getattr(args, "ui", False) else "--stream"
            )
            return usage_error(f"--agent {name} built a flow; {what} takes an agent: run the flow without it")
        return drive_flow(built, args, task=args.task, secrets=llm_settings.secrets(), spans=spans)
    agent = built
    stream = bool(getattr(args, "stream", None))
    # Streamed text is the progress: no live view beside it (nor in the debugger, which prints its own).
    view = None if args.command == "debug" or stream else terminal_view(agent, args.json)
    with (
        log_setup.configured(
            args.log_format, stream=log_stream(view), secrets=llm_settings.secrets(), level=log_level(args)
        ),
        spans,
    ):
        if args.command == "debug":
            from .debugger import debug_command

            return debug_command(agent, args.task, args.breaks, trace=args.trace)
        if getattr(args, "ui", False):
            from ..agent.toolcall import ToolCallAgent
            from .ui_command import run_with_ui

            if not isinstance(agent, ToolCallAgent):
                return usage_error(
                    f"--ui runs a tool-calling agent; --agent {name} built a {type(agent).__name__}"
                )

            return run_with_ui(agent, args.task, as_json=args.json, trace=args.trace)
        return drive(
            agent,
            args.task,
            as_json=args.json,
            trace=args.trace,
            checkpoint=args.checkpoint,
            stream=stream,
            view=view,
        )


def _resume(args: argparse.Namespace) -> int:
    """Rebuild the agent that wrote the checkpoint, then resume it: its recorded options (the file's
    `[agent]` does not apply: the run's options are the checkpoint's), its recorded sandbox (unless
    ``--sandbox``) and, unless flagged, model; or, when the person's factory built it (its
    ``built_by``), that factory's agent again, with the person's tools when `--tool`s joined it."""
    from ..flow.checkpoint import read_flow_checkpoint
    from ..recording.kinds import file_kind
    from ..recording.restore import read_checkpoint
    from . import log_setup
    from .config import Settings, build_llm
    from .otel import exporting

    if file_kind(args.checkpoint) == "flow checkpoint":
        if args.trace is not None:
            return usage_error(
                f"{args.checkpoint} is a flow's checkpoint: --trace goes on with an agent's trace, and "
                "a flow resumed from its checkpoint has none; drop --trace"
            )
        try:
            flow_data = read_flow_checkpoint(args.checkpoint, resuming=True)  # a cancelled flow: before it
        except CheckpointError as exc:
            return usage_error(_about(args.checkpoint, exc))
        flow_factory, _ = recorded_build(flow_data["config"])
        if flow_factory is not None:
            return _resume_own_flow(args, flow_factory, flow_data)
        return run_flow_command(args, flow_data)
    from ..sandbox.record import SandboxRecord

    try:  # an agent's journal, or a file that says what it is instead
        data = read_checkpoint(args.checkpoint, resuming=True)
        factory, recorded_tools = recorded_build(data["config"])
        kind = factory or recorded_kind(data["agent_class"])
        options = options_class_named(kind).from_json(data["config"])
        record = SandboxRecord.from_config(data["config"])
    except (ValueError, TypeError) as exc:  # CheckpointError, or recorded options that are not valid
        return usage_error(_about(args.checkpoint, exc))
    if args.sandbox is not None and kind != "manus" and factory is None:
        return usage_error(
            f"{args.checkpoint}: --sandbox says where Manus's commands run; this is a {kind} agent's "
            "checkpoint, which runs none: drop --sandbox"
        )
    flags_llm = _model_flags(args, data["config"])
    try:
        settings = Settings.load(args.config, {"llm": {kind: flags_llm}})
        llm_settings = settings.llm_for(kind)
        llm = build_llm(llm_settings)
        check_model_credentials(llm)
        agent: BaseAgent
        if factory is not None:  # the person's factory builds it again: its options are its own
            own = own_agent(factory, llm)
            if not isinstance(own, BaseAgent):
                raise ConfigError(f"--agent {factory} builds a flow now; this checkpoint is an agent's")
            agent = own
        else:
            servers = mcp_server_settings(settings, args) if kind in ("mcp", "manus") else None
            sandbox = None
            if kind == "manus":  # where the run's commands ran: in Docker it goes on in Docker, or stops
                sandbox = resumed_sandbox(args.checkpoint, settings.sandbox, record, args.sandbox)
            tools = recorded_tools
            agent = build_agent(
                kind, settings, llm, options.to_dict(), mcp_servers=servers, sandbox=sandbox, tools=tools
            )
        spans = exporting(settings.telemetry, False)  # [telemetry] enabled: the resumed run's spans
    except ValueError as exc:
        return usage_error(str(exc))
    except KeyboardInterrupt:
        return exit_interrupted()
    agent.name = str(data.get("agent") or agent.name)
    recorded_state = agent.table.by_name.get(str(data["run_state"].get("state")))
    if recorded_state is not None and recorded_state.final is not None:
        print(f"{PROG}: the run already finished; its result:", file=sys.stderr)
    view = terminal_view(agent, args.json)
    with (
        log_setup.configured(
            args.log_format, stream=log_stream(view), secrets=llm_settings.secrets(), level=log_level(args)
        ),
        spans,
    ):
        try:
            return drive(
                agent, None, as_json=args.json, trace=args.trace, checkpoint=args.checkpoint, view=view
            )
        except CheckpointError as exc:  # the agent rebuilt is not the one that wrote it (`restore`)
            return usage_error(_about(args.checkpoint, exc))
        except TraceError as exc:  # not the run's trace, or behind its checkpoint: nothing ran
            return usage_error(" ".join(str(exc).split()))


def _resume_own_flow(args: argparse.Namespace, factory: str, flow_data: dict[str, Any]) -> int:
    """`resume` of a flow the person's factory built: the factory builds it again (its planner on
    the model flagged, else the recorded one), and it goes on from its checkpoint."""
    from .config import Settings, build_llm
    from .otel import exporting

    flags_llm = _model_flags(args, flow_data["config"])
    try:
        settings = Settings.load(args.config, {"llm": {factory: flags_llm}})
        llm_settings = settings.llm_for(factory)
        llm = build_llm(llm_settings)
        check_model_credentials(llm)
        flow = own_agent(factory, llm)
        if isinstance(flow, BaseAgent):
            raise ConfigError(f"--agent {factory} builds an agent now; this checkpoint is a flow's")
        spans = exporting(settings.telemetry, False)
    except ValueError as exc:
        return usage_error(str(exc))
    except KeyboardInterrupt:
        return exit_interrupted()
    return drive_flow(flow, args, task=None, secrets=llm_settings.secrets(), spans=spans, resumed=flow_data)


def _model_flags(args: argparse.Namespace, config: dict[str, Any]) -> dict[str, Any]:
    """The model settings a resume flags, on the recorded run's model unless ``--model`` names one."""
    from .config import LLMSettings

    flags = flags_given(args, LLMSettings.model_fields)
    recorded = (config.get("llm") or {}).get("model")
    if "model" not in flags and recorded:
        flags["model"] = recorded
    return flags


def _about(path: str, exc: BaseException) -> str:
    """`exc`'s message, on one line, naming the checkpoint `path` (most do already)."""
    message = " ".join(str(exc).split())
    return message if path in message else f"{path}: {message}"


BINARY_FORMATS = ("png",)
"""Diagram formats that are not text: written to a file or a pipe, never to a terminal."""


def _diagram(args: argparse.Namespace) -> int:
    if args.format in BINARY_FORMATS and not args.output and sys.stdout.isatty():
        return usage_error(
            f"--format {args.format} is binary and stdout is a terminal: write it to a file with "
            f"-o diagram.{args.format}, or redirect stdout"
        )
    table = agent_class_named(args.agent).table
    flow = args.agent == "planning"
    if flow and args.approvals:
        return usage_error("the planning flow runs no tools itself, so it has no approvals; try --review")
    if args.review and not flow:
        return usage_error("--review draws the planning flow's plan review; use it with --agent planning")
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
            return usage_error(str(exc))
        kind = recorded_kind(header.get("agent_class"))
        table = agent_class_named(kind).table
        config = header.get("config")
        if not isinstance(config, dict):
            return usage_error(f"{args.trace}: the header's config is not a table; re-record the run")
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
            return usage_error(f"{args.trace}: {exc}")
    elif args.approvals:
        table = with_approval(table)
    try:
        data = render(table, args.format, highlight=args.highlight, path=path)
    except (ValueError, ImportError) as exc:
        return usage_error(str(exc))
    if args.output:
        try:
            with open(args.output, "wb") as out:
                out.write(data)
        except OSError as exc:
            return usage_error(
                f"cannot write the diagram {args.output}: {exc.strerror or exc}; "
                "name a file in an existing folder you may write"
            )
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    return 0


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
    with log_setup.configured(args.log_format, level=log_level(args, default)):
        return drive(agent, TASK, as_json=args.json, view=None)


if __name__ == "__main__":
    sys.exit(main())
