"""`agentfsm ui PATHS... [--db URL]`: the inspector over the traces and checkpoints under PATHS and the
runs of a durable database, until Ctrl-C; and `agentfsm run TASK --ui`: one run watched and steered
on the page while it goes."""

from __future__ import annotations

import argparse
import asyncio
import secrets
import shutil
import sys
import tempfile
import webbrowser
from pathlib import Path

from ..agent.toolcall import ToolCallAgent
from ..errors import InspectorError
from ..run.result import RunResult
from ..runs.manager import TRACE_FILE
from .output import EXIT_OK, EXIT_USAGE, usage_error


def ui_command(args: argparse.Namespace) -> int:
    from ..ui.managed import database, shown_url
    from ..ui.reader import Reader
    from ..ui.server import Inspector, needs_token

    paths = [Path(p) for p in args.paths] or ([] if args.db else [Path.cwd()])
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        return usage_error(
            f"no such file or folder: {missing[0]}; give traces, checkpoints or folders holding them"
        )
    token = secrets.token_urlsafe(24) if needs_token(args.host) else None
    inspector = Inspector(
        Reader(paths, managed=[database(args.db)] if args.db else []),
        host=args.host,
        port=args.port,
        token=token,
    )

    async def serve() -> None:
        url = await inspector.start()
        try:
            given = f"{len(paths)} path(s)" + (f" and {shown_url(args.db)}" if args.db else "")
            print(f"agentfsm ui: {given} at {url} (Ctrl-C stops)", flush=True)
            if args.open:
                webbrowser.open(url)
            await asyncio.Event().wait()
        finally:
            await inspector.stop()

    try:
        asyncio.run(serve())
    except InspectorError as exc:
        print(f"agentfsm ui: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def run_with_ui(agent: ToolCallAgent, task: str, *, as_json: bool, trace: str | None) -> int:
    """Run `task` with `agent` as an app's run (`Runs`, in a temporary folder) with the inspector
    serving it: its URL on stderr, the run followed on the page, and what it pauses for (approvals,
    questions) decided there, not on the terminal. The result is printed as `run` prints it, and
    the run's trace copied to `trace`, if given. Ctrl-C stops the run and the page."""
    from ..runs.manager import Runs
    from ..ui import serve
    from .output import exit_code, exit_interrupted, print_result

    for asker in ("approver", "input_handler"):  # the page decides: the run pauses for it
        if getattr(agent, asker, None) is not None:
            setattr(agent, asker, None)

    async def go() -> RunResult | None:
        with tempfile.TemporaryDirectory(prefix="agentfsm-run-") as folder:
            async with Runs(folder, agents={"cli": lambda spec: agent}) as runs:
                run_id = await runs.submit(task, "cli")
                inspector = await serve(runs)
                try:
                    print(
                        f"agentfsm: the run on the page at {inspector.url}#/run/app%2F{run_id}",
                        file=sys.stderr,
                        flush=True,
                    )
                    result = await runs.result(run_id, wait=True)
                    if trace is not None:
                        shutil.copyfile(Path(folder, run_id, TRACE_FILE), trace)
                    return result
                finally:
                    await inspector.stop()

    try:
        result = asyncio.run(go())
    except KeyboardInterrupt:
        return exit_interrupted()
    assert result is not None
    print_result(result, as_json, sys.stdout, sys.stderr)
    return exit_code(result)
