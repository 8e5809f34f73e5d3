"""The `agentfsm` command: `run` a task on a model, `resume` a checkpoint, the offline `demo`,
`diagram`, `replay` a trace.

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
- Importing this module does not import litellm (seconds): `LLM` loads it
  on the first model call. The configuration and logging modules (pydantic-
  settings, structlog with rich: a third of a second) are imported by the
  commands that use them, so `agentfsm --help` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from ..errors import ConfigError
from ..run.result import AgentState, RunResult, StopReason
from .parser import PROG, build_parser

if TYPE_CHECKING:
    from ..agent import BaseAgent
    from ..model.base import ChatModel
    from .config import Settings

__all__ = ["exit_code", "format_result", "main"]

T = TypeVar("T")

EXIT_OK, EXIT_ERROR, EXIT_LIMIT, EXIT_PAUSED = 0, 1, 3, 4
LIMITS = frozenset({StopReason.MAX_STEPS, StopReason.TOKEN_LIMIT, StopReason.STUCK})
"""Stop reasons of runs finished by a limit rather than by the model's choice."""


def exit_code(result: RunResult) -> int:
    """The status a run exits with, from its role: 1 for a run that ended in an error state, 4 for
    a paused one (a replayed trace that ends at a pause), 3 for one finished by a limit, else 0
    (finished by the model, or by a user's final state)."""
    if result.state is AgentState.ERROR:
        return EXIT_ERROR
    if result.paused:
        return EXIT_PAUSED
    return EXIT_LIMIT if result.stop_reason in LIMITS else EXIT_OK


EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


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
    return _run(args)


def _check_configuration_first(args_list: list[str]) -> None:
    """For `run`: load the file and environment before argparse checks anything else."""
    if not args_list or args_list[0] not in ("run", "debug", "resume") or {"-h", "--help"} & set(args_list):
        return
    from .config import Settings

    pre = argparse.ArgumentParser(prog=f"{PROG} run", add_help=False)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(args_list[1:])
    Settings.load(known.config)


def _usage_error(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


# -- the commands -------------------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    from . import log_setup
    from .config import Settings, build_llm

    if args.trace is not None:
        try:
            open(args.trace, "w").close()  # a path we cannot write is bad usage, before the run
        except OSError as exc:
            return _usage_error(f"cannot write the trace {args.trace}: {exc.strerror}")
    flags_llm = {"model": args.model, "api_base": args.api_base, "api_key": args.api_key}
    approvals = [n.strip() for f in args.require_approval or () for n in f.split(",") if n.strip()]
    flags_agent = {
        "max_steps": args.max_steps,
        "tool_choice": args.tool_choice,
        "require_approval": approvals or None,
    }
    overrides = {
        "llm": {args.agent: {k: v for k, v in flags_llm.items() if v is not None}},
        "agent": {k: v for k, v in flags_agent.items() if v is not None},
    }
    try:
        settings = Settings.load(args.config, overrides)
        llm_settings = settings.llm_for(args.agent)
        agent = _build_agent(args.agent, settings, build_llm(llm_settings))
    except ValueError as exc:  # ConfigError, or an option the agent refuses
        return _usage_error(str(exc))
    secret = llm_settings.api_key.get_secret_value() if llm_settings.api_key else None
    with log_setup.configured(args.log_format, secrets=[secret] if secret else []):
        if args.command == "debug":
            from .debugger import debug_command

            return debug_command(agent, args.task, args.breaks, trace=args.trace)
        return _drive(agent, args.task, as_json=args.json, trace=args.trace, checkpoint=args.checkpoint)


def _resume(args: argparse.Namespace) -> int:
    """Rebuild the agent that wrote the checkpoint (its recorded options and model), then resume it."""
    from ..recording.checkpoint import read_checkpoint
    from . import log_setup
    from .config import Settings, build_llm

    try:
        data = read_checkpoint(args.checkpoint)
    except ValueError as exc:
        return _usage_error(str(exc))
    kind = _recorded_kind(data["agent_class"])
    config = data["config"]
    llm = config.get("llm") or {}
    flags_llm = {"model": args.model or llm.get("model"), "api_base": args.api_base, "api_key": args.api_key}
    recorded_agent = {
        "max_steps": config.get("max_steps"),
        "tool_choice": config.get("tool_choice"),
        "require_approval": config.get("require_approval") or None,
    }
    overrides = {
        "llm": {kind: {k: v for k, v in flags_llm.items() if v is not None}},
        "agent": {k: v for k, v in recorded_agent.items() if v is not None},
    }
    try:
        settings = Settings.load(args.config, overrides)
        llm_settings = settings.llm_for(kind)
        agent = _build_agent(kind, settings, build_llm(llm_settings))
    except ValueError as exc:
        return _usage_error(str(exc))
    agent.name = str(data.get("agent") or agent.name)
    recorded_state = agent.table.by_name.get(str(data["run_state"].get("state")))
    if recorded_state is not None and recorded_state.final is not None:
        print(f"{PROG}: the run already finished; its result:", file=sys.stderr)
    secret = llm_settings.api_key.get_secret_value() if llm_settings.api_key else None
    with log_setup.configured(args.log_format, secrets=[secret] if secret else []):
        return _drive(agent, None, as_json=args.json, checkpoint=args.checkpoint)


def _build_agent(name: str, settings: Settings, llm: ChatModel) -> BaseAgent:
    """The agent `name` as configured; calls that need approval are asked about on the terminal."""
    from ..agent import Manus, ToolCallAgent
    from ..toolbox import Terminate
    from .terminal import TerminalApprover, ask_on_terminal

    options = settings.agent.agent_kwargs()
    agent: ToolCallAgent
    if name == "manus":
        # A question is asked on the terminal only when someone can answer it there.
        ask = ask_on_terminal if sys.stdin.isatty() else None
        agent = Manus(llm=llm, sandbox=settings.sandbox, ask_human=ask, name=name, **options)
    else:
        agent = ToolCallAgent(llm=llm, tools=[Terminate()], name=name, **options)
    unknown = sorted(agent.require_approval - set(agent.tools.names))
    if unknown:
        raise ConfigError(
            f"require_approval names tools the {name} agent does not have: {', '.join(unknown)}; "
            f"its tools: {', '.join(agent.tools.names)}"
        )
    if agent.approval_names:
        agent.approver = TerminalApprover()
    return agent


def _diagram(args: argparse.Namespace) -> int:
    from ..agent.approval import with_approval
    from ..fsm.diagram import path_of, render

    table = _agent_class(args.agent).table
    path = None
    if args.trace is not None:
        from ..recording.trace import TraceError, read_trace

        try:
            header, records = read_trace(args.trace)
        except TraceError as exc:
            return _usage_error(str(exc))
        table = _agent_class(_recorded_kind(header.get("agent_class"))).table
        if header.get("config", {}).get("require_approval"):
            table = with_approval(table)
        try:
            path = path_of(table, [r for r in records if r["kind"] == "transition"])
        except ValueError as exc:
            return _usage_error(f"{args.trace}: {exc}")
    elif args.approvals:
        table = with_approval(table)
    try:
        data = render(table, args.format, highlight=args.highlight, path=path)
    except (ValueError, ImportError) as exc:
        return _usage_error(str(exc))
    if args.output:
        with open(args.output, "wb") as out:
            out.write(data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    return 0


def _recorded_kind(agent_class: object) -> str:
    """The `--agent` name of the class a trace or checkpoint recorded (``module.QualName``)."""
    return "manus" if str(agent_class).endswith(".Manus") else "toolcall"


def _agent_class(name: str) -> type[BaseAgent]:
    if name == "manus":
        from ..agent.manus import Manus

        return Manus
    from ..agent.toolcall import ToolCallAgent

    return ToolCallAgent


def _demo(args: argparse.Namespace) -> int:
    from . import log_setup
    from .demo import TASK, build_demo_agent, demo_sandbox, format_transition

    sandbox, described = demo_sandbox()
    agent = build_demo_agent(sandbox)
    out = sys.stdout
    if not args.json:
        print(f"task: {TASK}\nsandbox: {described}\n", file=out)
        # A blank line after the last edge (the only ones with a stop reason) sets the result apart.
        agent.on_transition(lambda t: print(format_transition(t) + "\n" * bool(t.stop_reason), file=out))
    with log_setup.configured(args.log_format):
        return _drive(agent, TASK, as_json=args.json)


def _replay(args: argparse.Namespace) -> int:
    """Print the replayed transitions (as `demo` does) and the result; a trace cut short is exit 1."""
    from ..agent.replay import ReplayError, replay
    from . import log_setup
    from .demo import format_transition

    if args.step:
        return _replay_step(args)
    with log_setup.configured(args.log_format), contextlib.redirect_stdout(sys.stderr):
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
    _print_result(replayed.result, args.json, out)
    return exit_code(replayed.result)


def _replay_step(args: argparse.Namespace) -> int:
    """`replay --step`: the replayed run under the debugger (recorded replies, nothing executed)."""
    from ..agent.replay import Replayer, ReplayError
    from . import log_setup
    from .debugger import debug_command

    try:
        replayer = Replayer(args.trace)
        with log_setup.configured(args.log_format):
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
) -> int:
    """Run to the end (`task` None: resume `checkpoint`); print the result; map it to the exit status.

    Ctrl-C cancels the run's task (asyncio.run does that), so the agent ends
    in ERROR with `cancelled`; the result is still printed, and the status is 130.
    """
    out = sys.stdout
    interrupted = False
    live = _live_view(agent) if not as_json and sys.stderr.isatty() else contextlib.nullcontext()
    approver = getattr(agent, "approver", None)
    if approver is not None and hasattr(live, "suspended"):
        approver.quiet = live.suspended  # the questions are not drawn over
    with contextlib.redirect_stdout(sys.stderr), live:  # what a dependency prints is not our output
        try:
            result: RunResult | None = _run_async(_run_then_close(agent, task, trace, checkpoint))
        except KeyboardInterrupt:
            interrupted, result = True, agent.last_result
    if result is not None:
        _print_result(result, as_json, out)
    if interrupted:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    assert result is not None
    return exit_code(result)


def _live_view(agent: BaseAgent) -> contextlib.AbstractContextManager[object]:
    """Progress on the terminal (stderr), or nothing when rich (the `live` extra) is missing."""
    try:
        from .live import LiveView

        return LiveView(agent)
    except ImportError:
        return contextlib.nullcontext()


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


def _print_result(result: RunResult, as_json: bool, out: TextIO) -> None:
    if as_json:
        out.write(json.dumps(result.model_dump(mode="json"), ensure_ascii=False) + "\n")
    else:
        out.write(format_result(result) + "\n")
    out.flush()


def format_result(result: RunResult) -> str:
    """The output text, then one summary line: state, stop_reason, steps, tokens, cost."""
    usage = result.usage
    cost = "n/a" if usage.cost_usd is None else f"${usage.cost_usd:.6f}"
    summary = (
        f"{result.state}  stop_reason={result.stop_reason}  steps={result.steps}  "
        f"tokens={usage.total_tokens} ({usage.input_tokens} in, {usage.output_tokens} out)  "
        f"llm_calls={usage.llm_calls}  tool_calls={usage.tool_calls}  cost={cost}"
    )
    lines = [result.output or "(no output)"]
    if result.error:
        lines.append(f"error: {result.error}")
    return "\n".join([*lines, summary])


if __name__ == "__main__":
    sys.exit(main())
