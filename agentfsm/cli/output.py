"""What the command line prints and how it exits: the exit codes, a result, a transition.

Why one module: `run`, `resume`, `replay`, `demo` and `debug` all end the same
way (print the `RunResult`, map it to the exit status) and show
transitions the same way, so they share these functions instead of borrowing
them from each other. It imports only the run's data, never a command, so
every command module can import it without an import cycle, and it is cheap
enough to import at module level.
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

from ..run.events import Transition
from ..run.result import AgentState, RunResult, StopReason
from ..run.state import Observation
from .parser import PROG

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_LIMIT",
    "EXIT_OK",
    "EXIT_PAUSED",
    "EXIT_USAGE",
    "exit_code",
    "format_result",
    "format_transition",
    "print_result",
    "summary_line",
]

EXIT_OK, EXIT_ERROR, EXIT_LIMIT, EXIT_PAUSED = 0, 1, 3, 4
"""The exit statuses of a run, so scripts need not parse the output (see `exit_code`)."""
LIMITS = frozenset({StopReason.MAX_STEPS, StopReason.TOKEN_LIMIT, StopReason.STUCK})
"""Stop reasons of runs finished by a limit rather than by the model's choice."""
EXIT_USAGE = 2
"""Bad usage or configuration (argparse's own status for a usage error)."""
EXIT_INTERRUPTED = 130
"""Ctrl-C: 128 + SIGINT, as shells report it."""
_WIDTH = 100
"""Where `format_transition` cuts the model's text, a call or an observation, to keep one line each."""


def exit_code(result: RunResult) -> int:
    """The status a run exits with, read from its role: 1 for a run that ended in an error state,
    4 for a paused one (a replayed trace that ends at a pause), 3 for one finished by a limit,
    else 0 (finished by the model, or in a final state of a user's own)."""
    if result.state is AgentState.ERROR:
        return EXIT_ERROR
    if result.paused:
        return EXIT_PAUSED
    return EXIT_LIMIT if result.stop_reason in LIMITS else EXIT_OK


def print_result(
    result: RunResult, as_json: bool, out: TextIO, err: TextIO | None = None, *, error_line: bool = True
) -> None:
    """Write `result`: one JSON object on `out` (`--json`), or its output (the answer) on `out`
    and `summary_line` on `err` (stderr), after ``(no output)`` when there is no answer.

    `out` (stdout) holds the answer alone, so `$(agentfsm run ...)` or a pipe gets the answer and
    nothing else; what a person reads about the run goes to `err`, which on a terminal shows
    beside it. A run's error goes to `err` too, on one line, with or without `--json` (whose
    object keeps it too): an error read by a script as the model's answer is the mistake this
    avoids. `error_line` False: the caller says it its own way (a run the person interrupted
    ends with ``interrupted``, not a second line naming the cancel).
    """
    err = err or sys.stderr
    if as_json:
        out.write(json.dumps(result.model_dump(mode="json"), ensure_ascii=False) + "\n")
    elif result.output:
        out.write(result.output + "\n")
    out.flush()
    if not as_json:
        if not result.output:
            print("(no output)", file=err)
        print(summary_line(result), file=err, flush=True)
    if result.error and error_line:
        print(f"{PROG}: error: {result.error}", file=err, flush=True)


def format_result(result: RunResult) -> str:
    """The output text, then one summary line: state, stop_reason, steps, tokens, cost, as one
    text (the command line writes the two apart: see `print_result`; the error, if any, is
    `print_result`'s to write to stderr)."""
    return "\n".join([result.output or "(no output)", summary_line(result)])


def summary_line(result: RunResult) -> str:
    """The one line that sums a run up: state, stop_reason, steps, tokens, calls, cost."""
    usage = result.usage
    cost = "n/a" if usage.cost_usd is None else f"${usage.cost_usd:.6f}"
    return (
        f"{result.state}  stop_reason={result.stop_reason}  steps={result.steps}  "
        f"tokens={usage.total_tokens} ({usage.input_tokens} in, {usage.output_tokens} out)  "
        f"llm_calls={usage.llm_calls}  tool_calls={usage.tool_calls}  cost={cost}"
    )


def _short(text: str, width: int = _WIDTH) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _unwrapped(observation: Observation) -> str:
    """The tool's own text, without the engine's "Observed output of cmd ..." wrapper."""
    return observation.content.removeprefix(f"Observed output of cmd `{observation.call.name}` executed:\n")


def format_transition(t: Transition) -> str:
    """One edge as a few lines: the edge, then what the phase produced."""
    head = f"{t.source} -> {t.dest}  {t.trigger}  step {t.step}"
    if t.stop_reason is not None:
        head += f"  [{t.stop_reason}]"
    lines = [head]
    if t.guards:
        lines.append("    guards: " + ", ".join(f"{g.name}={'yes' if g.held else 'no'}" for g in t.guards))
    if t.reply is not None and t.reply.content:
        lines.append(f"    model says: {_short(t.reply.content)}")
    lines += [f"    call {_short(f'{c.name}({c.arguments})')}" for c in t.tool_calls]
    for o in t.observations:
        lines.append(f"    {'error' if o.is_error else 'result'} {o.call.name}: {_short(_unwrapped(o))}")
    if t.error:
        lines.append(f"    error: {t.error}")
    return "\n".join(lines)


def exit_interrupted() -> int:
    print(f"{PROG}: interrupted", file=sys.stderr)
    return EXIT_INTERRUPTED


def warning(message: str) -> None:
    """One line on stderr about something the user should know before the run goes on."""
    print(f"{PROG}: warning: {message}", file=sys.stderr, flush=True)


def usage_error(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return EXIT_USAGE
