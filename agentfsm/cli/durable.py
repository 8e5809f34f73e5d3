"""The durable runs' commands: `worker`, `submit`, `status`, `result`, `cancel`, `approve`, `answer`.

Each is a thin layer over `agentfsm.durable` (`Worker`, `DurableRuns`): the
same operations a Python program calls. A worker's agents are the command
line's own (toolcall, manus, browser), built from its configuration (``--config``, the
``AGENTFSM_...`` variables) with what a run's spec sets laid over it, plus the
factories ``--agent-factory`` names. The ``durable`` extra is imported only
here, when one of these commands runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..agent.toolcall import ToolCallAgent
from ..errors import AgentfsmError, ConfigError, WrongValueError
from ..forms import form_fields
from ..questions import AnswerAction, Question
from .imports import imported
from .output import EXIT_OK, EXIT_PAUSED, EXIT_USAGE, exit_code, print_result
from .parser import PROG

if TYPE_CHECKING:
    from ..durable import AgentFactory, AgentSpec, DurableRuns, RunStatus
    from ..model.base import ChatModel

__all__ = ["durable_command"]


def durable_command(args: argparse.Namespace) -> int:
    """Run the durable command `args.command`; its exit status."""
    try:
        if args.command == "worker":
            return _worker(args)
        return asyncio.run(_with_runs(args))
    except AgentfsmError as exc:  # a missing extra, a bad URL, an unknown id, a run not paused
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


async def _with_runs(args: argparse.Namespace) -> int:
    from ..durable import DurableRuns

    runs = DurableRuns(args.db)
    try:
        if args.command == "submit":
            return await _submit(runs, args)
        if args.command == "status":
            return _report(await runs.status(args.run_id), args.json)
        if args.command == "result":
            return await _result(runs, args)
        if args.command == "cancel":
            await runs.cancel(args.run_id)
            print(f"{args.run_id}: cancel requested", file=sys.stderr)
            return EXIT_OK
        if args.command == "answer":
            return await _answer(runs, args)
        if args.reject is not None:
            await runs.reject(args.run_id, args.call_id, args.reject, pause=args.pause)
        else:
            await runs.approve(args.run_id, args.call_id, pause=args.pause)
        return EXIT_OK
    finally:
        runs.close()


async def _submit(runs: DurableRuns, args: argparse.Namespace) -> int:
    from ..agent.toolcall import ToolCallOptions
    from ..durable import AgentSpec
    from ..options import option_fields

    flagged = [option.name for option in option_fields(ToolCallOptions) if option.spec.flag is not None]
    options = {
        name: value for name in ("model", "api_base", *flagged) if (value := getattr(args, name)) is not None
    }
    spec = AgentSpec(agent=args.agent, options=options)
    run_id = await runs.submit(args.task, spec, queue=args.queue, run_id=args.run_id)
    print(run_id, flush=True)
    return EXIT_OK


def _report(status: RunStatus, as_json: bool) -> int:
    if as_json:
        print(json.dumps(status.model_dump(mode="json"), ensure_ascii=False), flush=True)
    else:
        where = f" on {status.worker}" if status.worker and not status.ended else ""
        parked = ", parked" if status.parked else ""
        at = f" (pause {status.pause}{parked})" if status.pause is not None else ""
        print(f"{status.run_id}: {status.state}{at}{where}", flush=True)
        for call in status.pending_approval:
            print(f"  waits for approval: {call.id} {call.name}({call.arguments})", flush=True)
        for call, question in status.pending_input:
            print(f"  waits for input: {call.id} {call.name} [{question.key}] {question.message}", flush=True)
            if question.url is not None:
                print(f"    open {question.url}, then answer with no --field", flush=True)
            for line in _fields(question):
                print(f"    --field {line}", flush=True)
        if status.result is not None:
            print_result(status.result, False, sys.stdout)
    return exit_code(status.result) if status.result is not None else EXIT_PAUSED


async def _answer(runs: DurableRuns, args: argparse.Namespace) -> int:
    """`answer`: the fields typed as the question's schema says (as the terminal types them), checked
    against it here, so a mistake is told now rather than dropped by the run."""
    action: AnswerAction = "decline" if args.decline else "cancel" if args.cancel else "accept"
    if action != "accept":
        if args.fields:
            raise WrongValueError(
                f"--{action} takes no --field; give the fields to accept, or --{action} alone"
            )
        await runs.answer(args.run_id, args.call_id, action=action, key=args.question, pause=args.pause)
        return EXIT_OK
    status = await runs.status(args.run_id)
    asked = [q for call, q in status.pending_input if call.id == args.call_id]
    if args.question is not None:
        asked = [q for q in asked if q.key == args.question]
    content: dict[str, Any] | None = dict(args.fields)
    if len(asked) == 1:  # else there is no such question, or --question must say which: refused below
        url_opened = asked[0].url is not None and not args.fields
        content = None if url_opened else _content(asked[0], args.fields)
    # refuses the rest by name
    await runs.answer(args.run_id, args.call_id, content, key=args.question, pause=args.pause)
    return EXIT_OK


def _fields(question: Question) -> list[str]:
    """The fields of `question`'s answer, one a line: ``NAME=<type>``, its choices and default,
    optional or not."""
    lines = []
    for field in form_fields(question.schema):
        kind = "a,b,..." if field.multiple else field.kind
        notes = []
        if field.choices:
            notes.append("one of " + ", ".join(repr(value) for value, _ in field.choices))
        if field.has_default:
            notes.append(f"default {field.default!r}")
        if not field.required:
            notes.append("optional")
        lines.append(f"{field.name}=<{kind}>" + (f" ({'; '.join(notes)})" if notes else ""))
    return lines


def _content(question: Question, fields: list[tuple[str, str]]) -> dict[str, Any]:
    """The answer's content from ``--field`` pairs, read as the terminal reads a typed answer (a
    choice by its value or label, a multiple choice as a comma-separated list, checked against
    the field's schema); `WrongValueError` naming an unknown field, a value that does not fit,
    or a required field left out that has no default."""
    by_name = {field.name: field for field in form_fields(question.schema)}
    content: dict[str, Any] = {}
    for name, text in fields:
        field = by_name.get(name)
        if field is None:
            if by_name:
                raise WrongValueError(
                    f"question {question.key!r} has no field {name!r}; its fields: {', '.join(by_name)}"
                )
            content[name] = text
            continue
        try:
            content[name] = field.read(text)
        except WrongValueError as exc:
            raise WrongValueError(f"--field {name}={text!r}: {exc}") from None
    left_out = [f for f in by_name.values() if f.name not in content]
    # A required field with a default may be left out: the MCP client fills it in (SEP-1034).
    missing = sorted(f.name for f in left_out if f.required and not f.has_default)
    if missing:
        raise WrongValueError(
            f"question {question.key!r} needs --field {', '.join(f'{m}=...' for m in missing)} "
            "(or --decline, --cancel)"
        )
    return content


async def _result(runs: DurableRuns, args: argparse.Namespace) -> int:
    result = await runs.result(args.run_id, wait=args.wait, timeout=args.timeout)
    if result is None:
        status = await runs.status(args.run_id)
        print(
            f"{PROG}: run {args.run_id} has not ended (it is {status.state}); wait with --wait",
            file=sys.stderr,
        )
        return EXIT_PAUSED
    if args.trace is not None:
        trace = await runs.trace(args.run_id)
        with open(args.trace, "w", encoding="utf-8") as out:
            out.write(trace or "")
    print_result(result, args.json, sys.stdout)
    return exit_code(result)


# -- the worker ------------------------------------------------------------------------------------


def _worker(args: argparse.Namespace) -> int:
    from ..durable import Worker
    from . import log_setup

    agents: dict[str, AgentFactory] = {"toolcall": _configured("toolcall", args.config)}
    agents["manus"] = _configured("manus", args.config)
    agents["browser"] = _configured("browser", args.config)
    for name, target in args.factories:
        agents[name] = _imported(target)
    from .config import Settings

    configured = Settings.load(args.config).agent.factory  # a ConfigError is reported as usage, above
    for target in dict.fromkeys([*args.own_agents, *([configured] if configured else [])]):
        agents[target] = _own(target, args.config)
    worker = Worker(
        args.db,
        agents=agents,
        queue=args.queue,
        concurrency=args.concurrency,
        global_concurrency=args.global_concurrency,
        rate_limit=args.rate_limit,
        worker_id=args.worker_id,
        app_version=args.app_version,
        polling_s=args.poll_interval,
        park_after_s=args.park_after,
    )
    level = log_setup.level_of(args.quiet, args.verbose)

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        async with worker:
            if not args.quiet:  # -q: warnings and errors only, as `run -q`
                print(
                    f"{PROG}: worker {worker.worker_id} runs queue {worker.queue!r} "
                    f"(version {worker.app_version}, {args.concurrency} at a time, polling every "
                    f"{args.poll_interval:g} s); Ctrl-C stops it",
                    file=sys.stderr,
                    flush=True,
                )
            await stop.wait()

    with log_setup.configured(args.log_format, level=level):
        asyncio.run(serve())
    return EXIT_OK


def _imported(target: str) -> AgentFactory:
    """The factory ``MODULE:FUNCTION`` names; `ConfigError` when it is not there."""
    found = imported(target, "--agent-factory")
    if not callable(found):
        raise ConfigError(f"--agent-factory {target!r} is not a function; give MODULE:FUNCTION")
    factory: AgentFactory = found
    return factory


def _own(target: str, config: str | None) -> Callable[[AgentSpec], ToolCallAgent]:
    """The factory of runs submitted with ``--agent MODULE:FUNCTION``: the person's function called
    with ``llm=``, the model the worker's configuration gives (``[llm.<target>]`` over ``[llm]``), the
    spec's model options laid over it; the agent's own options are the function's."""
    from .building import own_agent
    from .config import LLMSettings, Settings, build_llm

    if not callable(imported(target, "--agent")):  # a factory not there stops the worker at once
        raise ConfigError(f"--agent {target!r} is not a function; give MODULE:FUNCTION")
    models: dict[str, ChatModel] = {}

    def build(spec: AgentSpec) -> ToolCallAgent:
        llm_keys = set(LLMSettings.model_fields)
        unknown = sorted(set(spec.options) - llm_keys)
        if unknown:
            raise ConfigError(
                f"the agent {target} builds sets its own options; a run of it takes model options only, "
                f"not {', '.join(unknown)}"
            )
        settings = Settings.load(config, {"llm": {target: dict(spec.options)}})
        llm_settings = settings.llm_for(target)
        key = json.dumps(
            {**llm_settings.llm_kwargs(), "client": llm_settings.client}, sort_keys=True, default=str
        )
        if key not in models:
            models[key] = build_llm(llm_settings)
        made = own_agent(target, models[key], terminal=False)
        if not isinstance(made, ToolCallAgent):
            raise ConfigError(
                f"--agent {target} built a {type(made).__name__}; a durable run is a tool-calling agent's"
            )
        return made

    return build


def _configured(name: str, config: str | None) -> Callable[[AgentSpec], ToolCallAgent]:
    """The factory of the command line's agent `name`: the worker's configuration, with the spec's
    options laid over it (model options over ``[llm.<name>]``, agent options over ``[agent]``)."""
    from ..browser.engines.configured import build_search
    from .building import build_agent, own_tools
    from .config import AgentSettings, LLMSettings, Settings, build_llm

    loaded = Settings.load(config)
    own_tools(loaded.agent.tools or [])  # a bad configuration or tool stops the worker at once
    build_search(loaded.search)  # and so does a search backend without its key
    models: dict[str, ChatModel] = {}

    def build(spec: AgentSpec) -> ToolCallAgent:
        """A new agent for one run, on the model of its settings: one model a set of settings,
        made here on first use and shared by the worker's runs (a run's end closes nothing of it;
        the worker's event loop's end closes its connections)."""
        llm_keys, agent_keys = set(LLMSettings.model_fields), set(AgentSettings.model_fields)
        unknown = sorted(set(spec.options) - llm_keys - agent_keys)
        if unknown:
            raise ConfigError(
                f"the {name} agent takes no option {', '.join(unknown)}; "
                f"its options: {', '.join(sorted(llm_keys | agent_keys))}"
            )
        overrides = {
            "llm": {name: {k: v for k, v in spec.options.items() if k in llm_keys}},
            "agent": {k: v for k, v in spec.options.items() if k in agent_keys},
        }
        settings = Settings.load(config, overrides)
        llm_settings = settings.llm_for(name)
        key = json.dumps(
            {**llm_settings.llm_kwargs(), "client": llm_settings.client}, sort_keys=True, default=str
        )
        llm = models.get(key)
        if llm is None:
            llm = models[key] = build_llm(llm_settings)
        # A worker has no terminal: its calls wait for `agentfsm approve --db`, its questions for
        # `answer`; the sandbox is as configured (each run's Manus decides ``auto`` for itself).
        return build_agent(
            name,
            settings,
            llm,
            settings.agent.agent_kwargs(),
            terminal=False,
            sandbox=settings.sandbox,
            tools=settings.agent.tools or [],
        )

    return build
