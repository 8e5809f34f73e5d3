"""`agentfsm run --flow planning`: a PlanningFlow over the command line's agents, with the
terminal's plan reviewer, approver and input handler, and its resume from a checkpoint; and
`drive_flow`, which runs any flow so (one the person's `--agent` factory built, too)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING, Any

from ..agent.base import BaseAgent
from ..agent.toolcall import ToolCallAgent
from ..errors import (
    CheckpointError,
    CheckpointLeasedError,
    RecordingError,
)
from ..run.result import AgentState
from .output import (
    EXIT_ERROR,
    EXIT_LIMIT,
    print_result,
)
from .parser import PROG

if TYPE_CHECKING:
    from ..flow.flow import PlanningFlow
    from ..flow.result import FlowResult
from .building import build_agent, check_model_credentials, flags_given, options_class_named, resumed_sandbox
from .driving import log_level, log_stream, run_async, terminal_view
from .output import exit_interrupted, usage_error

FLOW_EXECUTORS = ("toolcall", "manus")
"""The agents a flow run from the command line gives its steps to (a step's ``[name]`` tag picks one)."""


def run_flow_command(args: argparse.Namespace, resumed: dict[str, Any] | None = None) -> int:
    """`run --flow planning TASK`: the configured model plans (``[llm.planning]`` over ``[llm]``), the
    CLI's agents run the steps (each with its own ``[llm.<name>]``); the flow's result is printed as
    `run` prints a run's, after the plan with its statuses. `--review` asks on the terminal about
    each plan; `--trace` and `--checkpoint` write the flow's (see `agentfsm.flow`). `resumed`: the
    flow checkpoint `agentfsm resume` was given, continued by a flow built as the one that wrote it."""
    from ..recording.files import check_writable
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
        return usage_error(str(exc))
    flagged = flags_given(args, LLMSettings.model_fields)
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
    overrides = {"llm": llm_flags, "agent": flags_given(args, AgentSettings.model_fields)}
    try:
        settings = Settings.load(args.config, overrides)
        planner = build_llm(settings.llm_for(flow_name))
        check_model_credentials(planner)
        agents: dict[str, BaseAgent] = {}
        for name in FLOW_EXECUTORS:
            llm = build_llm(settings.llm_for(name))
            check_model_credentials(llm)
            options = settings.agent.agent_kwargs()
            saved = (recorded.get("agents") or {}).get(name)
            if saved is not None:  # the options the checkpoint records, not the file's `[agent]`
                options = options_class_named(name).from_json(saved.get("config") or {}).to_dict()
            sandbox = None
            if name == "manus" and resumed is not None:  # where its commands ran, as `resume` of an agent
                from ..sandbox.record import SandboxRecord

                record = SandboxRecord.from_config((saved or {}).get("config") or {})
                sandbox = resumed_sandbox(
                    args.checkpoint, settings.sandbox, record, getattr(args, "sandbox", None)
                )
            agents[name] = build_agent(name, settings, llm, options, sandbox=sandbox)
        spans = exporting(settings.telemetry, getattr(args, "otel", False))
    except (ValueError, TypeError) as exc:
        return usage_error(str(exc))
    except KeyboardInterrupt:
        return exit_interrupted()
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
    secrets = [s for name in (*FLOW_EXECUTORS, flow_name) for s in settings.llm_for(name).secrets()]
    return drive_flow(flow, args, task=task, secrets=secrets, spans=spans, resumed=resumed)


def drive_flow(
    flow: PlanningFlow,
    args: argparse.Namespace,
    *,
    task: str | None,
    secrets: list[str],
    spans: contextlib.AbstractContextManager[object],
    resumed: dict[str, Any] | None = None,
) -> int:
    """Run `flow` on `task` (None: on from `args.checkpoint`, whose contents are `resumed`) with the
    live view, `--trace` and `--checkpoint`, and print its result as `run` prints a run's."""
    from . import log_setup

    trace: str | None = getattr(args, "trace", None)
    recorded_state = flow.table.by_name.get(str(resumed["run_state"].get("state"))) if resumed else None
    if recorded_state is not None and recorded_state.final is not None:  # as `resume` of an agent's
        print(f"{PROG}: the flow already finished; its result:", file=sys.stderr)
    view = terminal_view(flow, args.json, steps=flow.agents.values())
    live: contextlib.AbstractContextManager[object] = view if view is not None else contextlib.nullcontext()
    for asker in (flow.reviewer, flow.approver, flow.input_handler):
        if asker is not None and view is not None and hasattr(asker, "quiet"):
            asker.quiet = view.suspended  # the questions are not drawn over
    out = sys.stdout
    logs = log_setup.configured(
        args.log_format, stream=log_stream(view), secrets=secrets, level=log_level(args)
    )
    with logs, contextlib.redirect_stdout(sys.stderr), live, spans:
        try:
            result = run_async(flow_then_close(flow, task, trace, args.checkpoint))
        except KeyboardInterrupt:
            return exit_interrupted()
        except (CheckpointLeasedError, CheckpointError) as exc:  # CheckpointError: not built as recorded
            return usage_error(str(exc))
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


async def flow_then_close(
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
