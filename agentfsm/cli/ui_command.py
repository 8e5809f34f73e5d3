"""`agentfsm ui PATHS... [--db URL]`: the inspector over the traces and checkpoints under PATHS and the
runs of a durable database, until Ctrl-C; and `agentfsm run TASK --ui`: one run watched and steered
on the page while it goes."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import shutil
import sys
import tempfile
import webbrowser
from pathlib import Path
from typing import TYPE_CHECKING

from ..agent.toolcall import ToolCallAgent
from ..errors import ConfigError, InspectorError
from ..run.result import RunResult
from ..runs.manager import TRACE_FILE
from ..runs.spec import AgentSpec, RunsFactory
from .output import EXIT_OK, EXIT_USAGE, usage_error

if TYPE_CHECKING:
    from ..flow.flow import PlanningFlow


def ui_command(args: argparse.Namespace) -> int:
    from ..runs.manager import Runs
    from ..ui.managed import Managed, app_runs, database, shown_url
    from ..ui.reader import Reader
    from ..ui.server import Inspector, needs_token

    paths = [Path(p) for p in args.paths] or ([] if args.db else [Path.cwd()])
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        return usage_error(
            f"no such file or folder: {missing[0]}; give traces, checkpoints or folders holding them"
        )
    if args.runs is not None and args.agent is None:
        return usage_error("--runs holds the runs --agent starts from the page: give --agent too")
    factories: dict[str, RunsFactory] = {}
    if args.agent is not None:
        try:
            factories = {args.agent: _page_agent(args)}
        except ValueError as exc:  # ConfigError: the model, the factory
            return usage_error(str(exc))
    token = secrets.token_urlsafe(24) if needs_token(args.host) else None

    async def serve() -> None:
        with contextlib.ExitStack() as folders:
            folder = args.runs
            if factories and folder is None:
                folder = folders.enter_context(tempfile.TemporaryDirectory(prefix="agentfsm-ui-"))
            async with contextlib.AsyncExitStack() as stack:
                managed: list[Managed] = []
                if factories:
                    runs = await stack.enter_async_context(Runs(folder, agents=factories))
                    managed.append(app_runs(runs))
                if args.db:
                    managed.append(database(args.db))
                inspector = Inspector(
                    Reader(paths, managed=managed), host=args.host, port=args.port, token=token
                )
                url = await inspector.start()
                try:
                    given = f"{len(paths)} path(s)" + (f" and {shown_url(args.db)}" if args.db else "")
                    runs_by = f"; runs started on the page by {args.agent}" if factories else ""
                    print(f"agentfsm ui: {given} at {url}{runs_by} (Ctrl-C stops)", flush=True)
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


def _page_agent(args: argparse.Namespace) -> RunsFactory:
    """The factory of the runs the page starts (`--agent`): the command line's agent on the configured
    model (one model, built here, for all of them), as `run` builds it; decisions are the page's."""
    from ..flow.flow import PlanningFlow
    from .building import build_agent, check_model_credentials, check_own_agent, flags_given, own_agent
    from .config import LLMSettings, Settings, build_llm

    name = args.agent
    overrides = {"llm": {name: flags_given(args, LLMSettings.model_fields)}}
    settings = Settings.load(args.config, overrides)
    llm = build_llm(settings.llm_for(name))
    check_model_credentials(llm)
    if ":" in name:
        check_own_agent(name, args, settings)
        built = own_agent(name, llm, terminal=False)  # refused now, not at the page's first run
        if not isinstance(built, ToolCallAgent | PlanningFlow):
            raise ConfigError(
                f"--agent {name} builds neither a tool-calling agent nor a PlanningFlow; the page's "
                "runs are one of those"
            )

    def build(spec: AgentSpec) -> ToolCallAgent | PlanningFlow:
        if ":" in name:
            made = own_agent(name, llm, terminal=False)
            assert isinstance(made, ToolCallAgent | PlanningFlow)  # checked above
            return made
        options = settings.agent.agent_kwargs()
        return build_agent(name, settings, llm, options, terminal=False, tools=settings.agent.tools or [])

    return build


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
