"""`agentfsm replay`: a trace re-driven offline, an agent's or a flow's, whole or step by step."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING

from ..errors import (
    ConfigError,
    ReplayError,
    TraceError,
)
from ..run.result import AgentState
from .building import recorded_build
from .driving import log_level, run_async
from .imports import imported
from .output import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_LIMIT,
    exit_code,
    format_transition,
    print_result,
    usage_error,
)
from .parser import PROG

if TYPE_CHECKING:
    from ..agent.toolcall import ToolCallAgent


def replay_command(args: argparse.Namespace) -> int:
    """Print the replayed transitions (as `demo` does) and the result; a trace cut short is exit 1."""
    from ..agent.replay import replay
    from . import log_setup

    if is_flow_trace(args.trace):
        for flag, given in (("--step", args.step), ("--agent-class", args.agent_class)):
            if given:
                return usage_error(f"{args.trace} is a flow's trace; {flag} replays an agent's: drop {flag}")
        return replay_flow(args)
    try:
        agent_class = recorded_class(args.agent_class) or factory_class(args.trace)
    except ConfigError as exc:
        return usage_error(str(exc))
    if args.step:
        return replay_step(args, agent_class)
    with (
        log_setup.configured(args.log_format, level=log_level(args)),
        contextlib.redirect_stdout(sys.stderr),
    ):
        try:
            replayed = run_async(replay(args.trace, agent_class=agent_class))
        except ReplayError as exc:
            return usage_error(_about(args.trace, exc))
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


def _about(path: str, exc: ReplayError) -> str:
    """`exc`'s message naming the trace at `path` (a divergence names where, not which file)."""
    message = str(exc)
    return message if path in message else f"{path}: {message}"


def is_flow_trace(path: str) -> bool:
    """Whether the trace at `path` is a flow's (one that cannot be read is the agent replay's to refuse)."""
    from ..recording.trace import read_header

    try:
        header = read_header(path)
    except TraceError:
        return False
    return str(header.get("agent_class", "")).endswith(".PlanningFlow")


def replay_flow(args: argparse.Namespace) -> int:
    """`replay` of a flow's trace: the flow's replayed transitions, its plan and its result, as
    `run --flow` prints them; exit status as `run --flow`'s."""
    from ..flow.replay import replay_flow
    from . import log_setup

    with (
        log_setup.configured(args.log_format, level=log_level(args)),
        contextlib.redirect_stdout(sys.stderr),
    ):
        try:
            replayed = run_async(replay_flow(args.trace))
        except ReplayError as exc:
            return usage_error(_about(args.trace, exc))
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
        out.flush()  # the summary line after what stdout holds, as `print_result` writes it
        print(f"{result.state}  stop_reason={result.stop_reason}  replans={result.replans}", file=sys.stderr)
    out.flush()
    if result.state is AgentState.ERROR:
        return EXIT_ERROR
    return 0 if result.ok or result.paused else EXIT_LIMIT


def recorded_class(target: str | None) -> type[ToolCallAgent] | None:
    """The class ``--agent-class MODULE:CLASS`` names, imported (the person named it); None without
    the flag. `ConfigError` when it is not there or is no tool-calling agent."""
    if target is None:
        return None
    from ..agent.toolcall import ToolCallAgent

    found = imported(target, "--agent-class", kind="CLASS")
    if not (isinstance(found, type) and issubclass(found, ToolCallAgent)):
        raise ConfigError(f"--agent-class {target!r} is not a tool-calling agent class (a ToolCallAgent's)")
    return found


def factory_class(trace: str) -> type[ToolCallAgent] | None:
    """The class of the agent the person's factory built (the trace's ``built_by``), when it is not
    one of agentfsm's: its module is imported by importing the factory's, as `run --agent` did, so
    that the replay drives that class's table; None when the trace names no factory or agentfsm's
    class is the one. `ConfigError` when the factory is not there any more."""
    from ..agent.replay import recorded_agent_class
    from ..recording.trace import read_header

    try:
        header = read_header(trace)
    except TraceError:
        return None  # the replay says what is wrong with the file
    factory, _ = recorded_build(header.get("config"))
    if not isinstance(factory, str) or recorded_agent_class(header.get("agent_class")) is not None:
        return None
    imported(factory, "the trace's --agent")
    return recorded_agent_class(header.get("agent_class"))


def replay_step(args: argparse.Namespace, agent_class: type[ToolCallAgent] | None = None) -> int:
    """`replay --step`: the replayed run under the debugger (recorded replies, nothing executed)."""
    from ..agent.replay import Replayer
    from . import log_setup
    from .debugger import debug_command

    try:
        replayer = Replayer(args.trace, agent_class=agent_class)
        with log_setup.configured(args.log_format, level=log_level(args)):
            status = debug_command(
                replayer.agent, replayer.request, args.breaks, transitions=replayer.transitions()
            )
    except ReplayError as exc:
        return usage_error(_about(args.trace, exc))
    if status == EXIT_INTERRUPTED:  # Ctrl-C or `quit`: the person ended it, wherever the trace was
        return status
    if replayer.ended_early is not None:
        print(
            f"{PROG}: {replayer.ended_early} (replayed {len(replayer.replayed)} transitions)", file=sys.stderr
        )
        return EXIT_ERROR
    return status
