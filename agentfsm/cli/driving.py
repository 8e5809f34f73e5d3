"""A command's run on the terminal: driven to its end with the live view and the logs sharing
one console, its result printed, its end mapped to the exit status; Ctrl-C ends it cancelled."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Coroutine, Iterable
from typing import Any, TextIO, TypeVar

from ..agent.base import BaseAgent
from ..errors import CheckpointLeasedError
from ..run.result import AgentState, RunResult
from .live import LiveView, Watched
from .output import (
    EXIT_ERROR,
    exit_code,
    exit_interrupted,
    print_result,
    usage_error,
)
from .parser import PROG

T = TypeVar("T")


def drive(
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
            result: RunResult | None = run_async(run_then_close(agent, task, trace, checkpoint))
        except KeyboardInterrupt:
            interrupted, result = True, agent.last_result
        except CheckpointLeasedError as exc:
            refused, result = str(exc), None
    if refused:
        return usage_error(refused)
    if result is not None and printer is not None:
        printer.finish(result, error_line=not interrupted)
    elif result is not None:
        print_result(result, as_json, out, error_line=not interrupted)  # `interrupted` says it
    if interrupted:
        return exit_interrupted()
    assert result is not None
    if result.error is not None and result.state is not AgentState.ERROR:
        # only a failed write on the edge into a final state does this: the run ended, unrecorded
        print(f"{PROG}: the run ended, but its last record was not written: {result.error}", file=sys.stderr)
        return EXIT_ERROR
    return exit_code(result)


def terminal_view(agent: Watched, as_json: bool, steps: Iterable[Watched] = ()) -> LiveView | None:
    """Progress on the terminal (stderr), or None: not a terminal, `--json`, or rich (the `live`
    extra) missing. Made before the logs are set up, which then go through its console."""
    if as_json or not sys.stderr.isatty():
        return None
    try:
        return LiveView(agent, steps=steps)
    except ImportError:
        return None


def log_stream(view: LiveView | None) -> TextIO | None:
    """Where log lines go: through the live view's console while there is one (else stderr)."""
    return view.log_stream if view is not None else None


def log_level(args: argparse.Namespace, default: int = logging.INFO) -> int:
    """The engine's log level from `-q` / `-v` (see `log_setup.level_of`).

    Where a person reads (stderr is a terminal) the default is WARNING: a line per transition
    would drown the live view and the answer, so `-v` brings those lines (INFO) and `-vv` the
    debug events. Logs written to a file or a pipe keep `default` (a line per transition), and
    `-q` / `-qq` mean warnings / errors either way.
    """
    from .log_setup import level_of

    quiet, verbose = getattr(args, "quiet", 0), getattr(args, "verbose", 0)
    if not quiet and _isatty(sys.stderr):
        default = max(default, logging.WARNING)
    return level_of(quiet, verbose, default)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # detached or closed
        return False


async def run_then_close(
    agent: BaseAgent, task: str | None, trace: str | None = None, checkpoint: str | None = None
) -> RunResult:
    """One run (or the resumed one), then release what the agent holds (Manus's sandbox, always)."""
    try:
        if task is None:
            assert checkpoint is not None
            return await agent.resume(checkpoint, trace=trace)
        return await agent.run(task, trace=trace, checkpoint=checkpoint)
    finally:
        aclose = getattr(agent, "aclose", None)  # agents with resources (Manus) have one
        if aclose is not None:
            await aclose()


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run`, with asyncio imported by the commands that run something (not `--help`)."""
    import asyncio

    return asyncio.run(main)
