"""The `agentfsm` command line's parser: the commands and their options, and nothing else.

Kept apart from the commands (`cli.py`) so `agentfsm --help` builds it
without importing what the commands use.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, NoReturn, get_args, get_origin

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..options import OptionField

__all__ = ["AGENTS", "DURABLE_COMMANDS", "FLOWS", "PROG", "build_parser", "package_version"]

PROG = "agentfsm"
AGENTS = ("toolcall", "manus", "mcp", "browser")
FLOWS = ("planning",)
"""The flows `run --flow` runs and `diagram --agent` draws beside the agents."""


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming what is wrong and where the help is, as every
    other refusal of the command line is (argparse prints the whole usage block first).

    Prefix matching is off (``allow_abbrev=False``), here and in every subcommand's parser (they
    are of this class): argparse would otherwise take an option's prefix for the option, so a
    mistyped or missing ``--tool x`` would silently set ``--tool-choice``, and adding an option
    could change what an existing command line means.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog=PROG, description="An LLM tool-calling agent whose whole life is an explicit state machine."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run TASK on a model", description="Run TASK on a model.")
    _run_options(run)
    run.add_argument(
        "--flow",
        choices=FLOWS,
        help="run TASK as a flow: planning has the model plan it, then runs each step with the "
        "agent its [name] tag picks (toolcall, manus), and sums up",
    )
    run.add_argument(
        "--review",
        action="store_true",
        help="with --flow: show each plan (made or revised) on the terminal to approve, edit or cancel",
    )
    run.add_argument(
        "--checkpoint",
        metavar="FILE",
        help="append the run to FILE (a journal) after every transition, for `resume`",
    )
    run.add_argument(
        "--stream",
        action="store_const",
        const=True,
        help="stream the model's replies: their text on stdout as it comes, nothing else there "
        "(the summary goes to stderr); [llm] stream = true streams without printing",
    )
    run.add_argument(
        "--otel",
        action="store_true",
        help="export OpenTelemetry spans over OTLP/HTTP, configured by the OTEL_* environment variables",
    )
    run.add_argument(
        "--ui",
        action="store_true",
        help="watch and steer the run in the browser: the inspector's URL is printed on stderr, and its "
        "approvals and questions are decided on the page (the run's folder is a temporary one)",
    )
    _output_options(run)

    resume = commands.add_parser(
        "resume",
        help="continue a run from its checkpoint",
        description="Continue the run saved by `run --checkpoint FILE` (killed or not) to its end. "
        "The model defaults to the recorded one; the checkpoint keeps being written.",
    )
    resume.add_argument("checkpoint", metavar="CHECKPOINT", help="a file written by `run --checkpoint`")
    resume.add_argument(
        "--trace",
        metavar="FILE",
        help="the trace the run wrote (`run --trace FILE`): cut back to where the checkpoint stands and "
        "written on, so that it replays as the whole run",
    )
    _model_options(resume)
    _mcp_server_option(resume)  # a run's servers are the configuration's: give them again to resume
    resume.add_argument(
        "--sandbox",
        choices=("docker", "local"),
        help="where Manus's commands run from now on (default: where the checkpoint says they ran; "
        "local runs a Docker run's commands on this machine, without its limits)",
    )
    _output_options(resume)

    chat = commands.add_parser(
        "chat",
        help="talk to an agent at the terminal, its memory kept between turns",
        description="A conversation with one agent: each line is a turn, run as `run` runs a task, "
        "its memory going on from the turns before. Commands: /reset, /diagram, /save, /usage, "
        "/quit, /help. Ctrl-C cancels a turn and the conversation goes on; Ctrl-D ends it.",
    )
    _agent_options(chat)
    chat.add_argument(
        "--session",
        metavar="NAME",
        help="keep the conversation in the session NAME (a file in the data folder, or a FILE.json "
        "path), saved after every turn: the next chat with it goes on from it",
    )
    chat.add_argument(
        "--stream",
        action="store_const",
        const=True,
        help="the model's replies on stdout as they come (else the answer once the turn ends); "
        "[llm] stream = true streams without printing",
    )
    chat.add_argument(
        "--db",
        metavar="URL",
        help="keep the --session in this durable database (sqlite:///FILE or postgresql://...) instead "
        "of a file",
    )
    chat.add_argument(
        "--log-format", choices=("console", "json"), default="console", help="log lines on stderr"
    )
    _verbosity_options(chat)

    debug = commands.add_parser(
        "debug",
        help="step through a run of TASK at a prompt",
        description="Run TASK under an interactive prompt (type help there). Pauses before the first "
        "transition; works on a terminal and with piped commands.",
    )
    _run_options(debug)
    _break_option(debug)
    debug.add_argument("--log-format", choices=("console", "json"), default="console", help=argparse.SUPPRESS)
    _verbosity_options(debug)

    serve = commands.add_parser(
        "mcp-serve",
        help="serve agents to MCP clients (a tool, run_agent)",
        description="Serve the tool run_agent to MCP clients, over stdio (default) or streamable HTTP, "
        "to clients of the 2026-07-28 revision and of the 2025 handshake alike. Each call runs an "
        "agent built from these options and the configuration, as `run` builds it; approvals are "
        "asked of the client as elicitations.",
    )
    _agent_options(serve, agent_help="the agent a call that names none runs (default: toolcall)")
    serve.add_argument(
        "--http",
        metavar="[HOST:]PORT",
        type=_http_address,
        help="serve streamable HTTP on http://HOST:PORT/mcp instead of stdio (HOST: 127.0.0.1)",
    )
    serve.add_argument(
        "--pause-timeout",
        type=_positive_float,
        default=600.0,
        metavar="SECONDS",
        help="seconds a run paused for the client's approval or answer waits for it; then it is "
        "cancelled and its agent released (default: 600)",
    )
    serve.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow --http on a HOST other than a loopback address (anyone who reaches it runs agents)",
    )
    serve.add_argument(
        "--otel",
        action="store_true",
        help="export the served runs' OpenTelemetry spans over OTLP/HTTP (OTEL_* environment variables); "
        "a call whose _meta carries a traceparent joins its caller's trace",
    )
    serve.add_argument(
        "--log-format", choices=("console", "json"), default="console", help="log lines on stderr"
    )
    _verbosity_options(serve)

    mcp = commands.add_parser(
        "mcp", help="MCP servers: authorize agentfsm at one behind OAuth", description="MCP servers."
    )
    mcp_actions = mcp.add_subparsers(dest="mcp_action", required=True, metavar="ACTION")
    login = mcp_actions.add_parser(
        "login",
        help="authorize agentfsm at a server behind OAuth, and store its tokens",
        description="Authorize agentfsm at the MCP server SERVER ([mcp.servers.SERVER] with auth, or "
        "--mcp-server SERVER=URL): print the authorization URL, receive the redirect on 127.0.0.1, "
        "store the tokens.",
    )
    login.add_argument(
        "server", metavar="SERVER", help="the id of an [mcp.servers.<id>] table, or of a --mcp-server"
    )
    login.add_argument(
        "--config", metavar="FILE", help="TOML configuration (default: ./agentfsm.toml if present)"
    )
    _mcp_server_option(
        login,
        server_help="the server as runs give it, SERVER=URL, in place of a configured one (it is behind "
        "OAuth with every default: --mcp-oauth is implied)",
    )
    login.add_argument("--open", action="store_true", help="open the URL in a browser too")

    demo = commands.add_parser(
        "demo", help="the whole loop offline, on a scripted model", description="Run the offline demo."
    )
    _output_options(demo)

    replay = commands.add_parser(
        "replay",
        help="replay a trace offline",
        description="Re-drive the machine from a trace: recorded replies and tool results, nothing executed.",
    )
    replay.add_argument("trace", metavar="TRACE", help="a JSON Lines trace written by `run --trace`")
    replay.add_argument("--step", action="store_true", help="replay under the debugger's prompt")
    replay.add_argument(
        "--agent-class",
        metavar="MODULE:CLASS",
        help="the recorded agent's class, imported from MODULE, when it extends its table (its states "
        "are replayed on that table); agentfsm's own classes need none",
    )
    _break_option(replay)
    _output_options(replay)

    sandbox = commands.add_parser(
        "sandbox",
        help="the Docker sandbox's image",
        description='The image the Docker sandbox ([sandbox] mode = "docker") runs tools in.',
    )
    sandbox_actions = sandbox.add_subparsers(dest="sandbox_action", required=True, metavar="ACTION")
    build = sandbox_actions.add_parser(
        "build",
        help="build the sandbox image without a registry (needs root, debootstrap, docker)",
        description="Build agentfsm-sandbox:bookworm, the default [sandbox] image of every command, "
        "without any image registry: a minimal Debian root "
        "with Python, made by debootstrap from the mirror apt uses, imported into Docker (about a "
        "minute; kept, so later runs are instant). Needs root, debootstrap and a Docker engine.",
    )
    build.add_argument("--force", action="store_true", help="build it again even if it exists")
    build.add_argument("--name", action="store_true", help="only print the image's name")

    diagram = commands.add_parser(
        "diagram",
        help="draw an agent's state machine",
        description="Draw an agent's state machine from its table (the one the engine runs).",
    )
    diagram.add_argument(
        "--agent",
        choices=AGENTS + FLOWS,
        default="toolcall",
        help="which agent, or the planning flow (default: toolcall)",
    )
    diagram.add_argument(
        "--format",
        choices=("mermaid", "dot", "svg", "png"),
        default="mermaid",
        help="mermaid (default) and dot need nothing; svg and png need agentfsm[graphviz]",
    )
    diagram.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    diagram.add_argument("--highlight", metavar="STATE", help="mark one state (or the RUNNING group)")
    diagram.add_argument(
        "--approvals",
        action="store_true",
        help="the machine of an agent with tools that need approval (AWAITING_APPROVAL)",
    )
    diagram.add_argument(
        "--trace",
        metavar="FILE",
        help="draw the path of the run in FILE (a `run --trace` file) over its agent's machine",
    )
    diagram.add_argument(
        "--review",
        action="store_true",
        help="with --agent planning: the flow with plan review (AWAITING_PLAN_REVIEW)",
    )
    ui = commands.add_parser(
        "ui",
        help="the inspector: see runs in the browser",
        description="Serve the inspector, a page that lists the runs recorded under PATHS (traces and "
        "checkpoints, folders searched recursively) and shows each: its machine with the path taken, "
        "every transition with its guards, the memory at each one. It prints its URL and runs until "
        "Ctrl-C; nothing is fetched from the network.",
    )
    ui.add_argument(
        "paths", nargs="*", metavar="PATH", help="trace or checkpoint files, or folders (default: .)"
    )
    ui.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to serve on (default 127.0.0.1); any other needs the token the printed URL carries",
    )
    ui.add_argument("--port", type=_port, default=0, help="the port (default 0: any free one)")
    ui.add_argument(
        "--db",
        metavar="URL",
        help="also list the durable runs in this database (sqlite:///FILE or postgresql://...)",
    )
    ui.add_argument("--open", action="store_true", help="open the page in the default browser")
    ui.add_argument(
        "--agent",
        type=_agent_name,
        metavar="AGENT",
        help="the agent that runs what the page starts from a recording (a fork from one of its "
        "transitions): toolcall, manus, mcp, browser, or your MODULE:FUNCTION (an agent or a "
        "PlanningFlow), on the configured model",
    )
    ui.add_argument(
        "--runs",
        metavar="DIR",
        help="with --agent: the folder of the runs the page starts (default: a temporary one, removed "
        "when the inspector stops)",
    )
    _model_options(ui)
    _durable_commands(commands)
    return parser


# -- durable runs (agentfsm.durable; the commands are agentfsm.cli.durable's) --------------------

DURABLE_COMMANDS = ("worker", "submit", "status", "result", "cancel", "approve", "answer")


def _durable_commands(commands: Any) -> None:
    """A queue of runs in a database (``--db``), the workers that run them, and the runs by id."""
    worker = commands.add_parser(
        "worker",
        help="run agents from a queue of durable runs",
        description="Run the runs submitted to a queue, until stopped (Ctrl-C or SIGTERM). A run survives "
        "a dead worker: a new process with the same --worker-id goes on with it at once, any other worker "
        "of the queue once the dead one's heartbeat has stood still.",
    )
    _db_option(worker)
    worker.add_argument("--concurrency", type=_positive_int, default=4, help="runs at a time (default: 4)")
    worker.add_argument(
        "--global-concurrency", type=_positive_int, help="runs at a time on the queue, across all its workers"
    )
    worker.add_argument(
        "--rate-limit",
        metavar="N/SECONDS",
        type=_rate,
        help="at most N runs started per SECONDS on the queue",
    )
    worker.add_argument(
        "--worker-id", help="this worker's name (default: host-pid); reuse it to go on with its runs"
    )
    worker.add_argument("--app-version", help="the version its runs are continued by (default: agentfsm's)")
    worker.add_argument(
        "--agent-factory",
        dest="factories",
        metavar="NAME=MODULE:FUNCTION",
        type=_factory,
        action="append",
        default=[],
        help="one more agent: runs submitted with --agent NAME are built by FUNCTION(spec) (repeatable)",
    )
    worker.add_argument(
        "--agent",
        dest="own_agents",
        metavar="MODULE:FUNCTION",
        type=_own_factory,
        action="append",
        default=[],
        help="one more agent, as `run --agent MODULE:FUNCTION` builds it (FUNCTION(llm=...), on the "
        "configured model): runs submitted with --agent MODULE:FUNCTION (repeatable; [agent] factory too)",
    )
    worker.add_argument(
        "--config", metavar="FILE", help="TOML configuration of its agents' models and options"
    )
    worker.add_argument(
        "--poll-interval",
        metavar="SECONDS",
        type=_positive_float,
        default=0.2,
        help="how often it looks for new runs on the queue (default: 0.2); longer polls the database less",
    )
    worker.add_argument(
        "--park-after",
        metavar="SECONDS",
        type=_park_after,
        default=30.0,
        help="a run paused this long for a decision leaves its place to other runs until a decision "
        "comes (default: 30; 0: at once; never: it keeps its place)",
    )
    worker.add_argument(
        "--log-format", choices=("console", "json"), default="console", help="log lines on stderr"
    )
    _verbosity_options(worker)

    submit = commands.add_parser(
        "submit", help="put a durable run of TASK on a queue", description="Enqueue a run; print its id."
    )
    submit.add_argument("task", metavar="TASK", help="the request for the agent")
    _db_option(submit)
    submit.add_argument(
        "--agent",
        default="toolcall",
        help="the agent a worker builds: toolcall, manus, browser, a --agent-factory NAME, or the "
        "MODULE:FUNCTION of a worker's --agent",
    )
    submit.add_argument("--model", help="the model (else the worker's configured one)")
    submit.add_argument(
        "--api-base", help="base URL of the model's server (never a key: the worker holds it)"
    )
    option_flags(
        submit, require_approval="pause before each call to TOOL until `agentfsm approve` decides it"
    )
    submit.add_argument(
        "--id", dest="run_id", help="the run's id (submitting an id again gives that run back)"
    )

    _run_id_command(commands, "status", "where a durable run is")
    result = _run_id_command(commands, "result", "a durable run's result")
    result.add_argument("--wait", action="store_true", help="wait until the run ends")
    result.add_argument(
        "--timeout", type=_positive_float, metavar="SECONDS", help="with --wait: at most this long"
    )
    result.add_argument("--trace", metavar="FILE", help="write the ended run's JSON Lines trace to FILE")

    cancel = commands.add_parser(
        "cancel", help="cancel a durable run", description="Cancel a run wherever it runs (at its next step)."
    )
    cancel.add_argument("run_id", metavar="ID")
    _db_option(cancel)

    approve = commands.add_parser(
        "approve",
        help="approve (or reject) a paused durable run's call",
        description="Decide a call a paused run waits for; the run goes on once its calls are decided.",
    )
    approve.add_argument("run_id", metavar="ID")
    approve.add_argument("call_id", metavar="CALL", help="the call's id, as `status` lists it")
    _db_option(approve)
    approve.add_argument("--reject", metavar="REASON", help="reject the call instead; the model reads REASON")
    _pause_option(approve)

    answer = commands.add_parser(
        "answer",
        help="answer the question a paused durable run's call asks",
        description="Answer a tool's question a paused run waits for (`status` shows it and its fields); "
        "the run goes on once its questions are answered.",
    )
    answer.add_argument("run_id", metavar="ID")
    answer.add_argument("call_id", metavar="CALL", help="the asking call's id, as `status` lists it")
    _db_option(answer)
    answer.add_argument(
        "--field",
        dest="fields",
        metavar="KEY=VALUE",
        type=_field,
        action="append",
        default=[],
        help="one field of the answer, typed as the question's schema says (repeatable)",
    )
    answer.add_argument("--question", metavar="KEY", help="which question of the call (when it asks several)")
    _pause_option(answer)
    refuse = answer.add_mutually_exclusive_group()
    refuse.add_argument("--decline", action="store_true", help="refuse to answer (the tool is told so)")
    refuse.add_argument("--cancel", action="store_true", help="dismiss the question (the tool is told so)")


def _pause_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--pause",
        metavar="N",
        type=int,
        help="the pause this decides, as `status` numbers it (default: the run's current pause); "
        "refused once that pause is over",
    )


def _run_id_command(commands: Any, name: str, text: str) -> argparse.ArgumentParser:
    command: argparse.ArgumentParser = commands.add_parser(
        name,
        help=text,
        description=f"Print {text}; exit as `run` does once it ended, 4 before (queued, running, paused).",
    )
    command.add_argument("run_id", metavar="ID", help="the id `submit` printed")
    _db_option(command)
    command.add_argument("--json", action="store_true", help="one JSON object on stdout, only")
    return command


def _db_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        required=True,
        metavar="URL",
        help="the runs' database: sqlite:///FILE (one machine) or postgresql://... (tools/postgres-env); "
        "a server that does not answer within 5 s is an error (?connect_timeout=SECONDS sets another)",
    )
    parser.add_argument("--queue", default="agentfsm", help="the queue (default: agentfsm)")


def _rate(text: str) -> tuple[int, float]:
    count, sep, seconds = text.partition("/")
    try:
        value = (int(count), float(seconds))
    except ValueError:
        value = (0, 0.0)
    if not sep or value[0] < 1 or not value[1] > 0:
        raise argparse.ArgumentTypeError(f"expected N/SECONDS (e.g. 10/1.5), got {text!r}")
    return value


def _factory(text: str) -> tuple[str, str]:
    name, sep, target = text.partition("=")
    if not sep or not name.strip() or ":" not in target:
        raise argparse.ArgumentTypeError(
            f"expected NAME=MODULE:FUNCTION (e.g. mine=myapp.agents:build), got {text!r}"
        )
    return name.strip(), target.strip()


def _field(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. name=Ada), got {text!r}")
    return key.strip(), value


def _run_options(run: argparse.ArgumentParser) -> None:
    run.add_argument("task", metavar="TASK", help="the request for the agent")
    _agent_options(run)
    run.add_argument("--trace", metavar="FILE", help="write the run's JSON Lines trace to FILE")


def _agent_options(
    run: argparse.ArgumentParser,
    *,
    agent_help: str = "which agent: toolcall (the default), manus, mcp, browser, or MODULE:FUNCTION, your "
    "own factory, called with the configured model as llm= and returning an agent or a flow "
    "([agent] factory in the configuration)",
) -> None:
    """The model and the agent, as `run` takes them (`mcp-serve` builds its agents from the same)."""
    _model_options(run)
    run.add_argument("--agent", type=_agent_name, metavar="AGENT", help=agent_help)
    run.add_argument(
        "--tool",
        dest="tools",
        metavar="MODULE:FUNCTION",
        action="append",
        help="add your function (or Tool) as a tool of the built-in agent (repeat it for more; "
        "[agent] tools = [...] in the configuration)",
    )
    _mcp_server_option(run)
    option_flags(run)


def _own_factory(text: str) -> str:
    if ":" in text and not text.startswith(":") and not text.endswith(":"):
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: give your factory as MODULE:FUNCTION")


def _agent_name(text: str) -> str:
    """`--agent`: a built-in agent's name, or ``MODULE:FUNCTION`` (your factory, called with
    ``llm=``)."""
    if text in AGENTS or (":" in text and not text.startswith(":") and not text.endswith(":")):
        return text
    raise argparse.ArgumentTypeError(
        f"{text!r} is no agent: choose {', '.join(AGENTS)}, or give your factory as MODULE:FUNCTION"
    )


def option_flags(parser: argparse.ArgumentParser, **helps: str) -> None:
    """A flag for each agent option whose `Spec` has one (``--max-steps`` sets `max_steps`), from
    `ToolCallOptions`: its type, choices and bounds are the option's (`helps`: another help, by
    option name). A flag's value is checked as the record checks the option."""
    from ..agent.toolcall import ToolCallOptions
    from ..options import option_fields

    for option in option_fields(ToolCallOptions):
        if option.spec.flag is None:
            continue
        flag = "--" + option.name.replace("_", "-")
        help_text = helps.get(option.name, option.spec.flag)
        if get_origin(option.type) is Literal:
            parser.add_argument(flag, dest=option.name, choices=get_args(option.type), help=help_text)
        elif get_origin(option.type) is frozenset:
            parser.add_argument(
                flag, dest=option.name, metavar="TOOL", type=_tool_names, action="extend", help=help_text
            )
        elif option.type is bool:
            parser.add_argument(flag, dest=option.name, action=argparse.BooleanOptionalAction, help=help_text)
        else:
            parser.add_argument(flag, dest=option.name, type=_option_value(option), help=help_text)


def _option_value(option: OptionField) -> Callable[[str], Any]:
    """The parse of a flag's text as `option` (a number or text), refused as the record refuses it."""

    def parse(text: str) -> Any:
        try:
            value = option.type(text)
        except ValueError:
            value = text
        try:
            return option.checked(value)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = option.name  # argparse names the type in its "invalid value" line
    return parse


def _mcp_server_option(
    parser: argparse.ArgumentParser,
    *,
    server_help: str = "an MCP server whose tools the agent gets (mcp, manus): a command line (stdio) "
    "or an http(s) URL (streamable HTTP); repeat for more; joins the [mcp.servers.<id>] of the config",
) -> None:
    """``--mcp-server NAME=...`` and ``--mcp-oauth NAME``, which puts that server behind OAuth."""
    parser.add_argument(
        "--mcp-server",
        dest="mcp_servers",
        metavar="NAME=COMMAND_OR_URL",
        type=_mcp_server,
        action="append",
        default=[],
        help=server_help,
    )
    parser.add_argument(
        "--mcp-oauth",
        dest="mcp_oauth",
        metavar="NAME",
        action="append",
        default=[],
        help='the --mcp-server NAME (an http(s) URL) is behind OAuth, as auth = "oauth" in its '
        "table: `agentfsm mcp login NAME --mcp-server NAME=URL` logs in once; repeatable",
    )


def _break_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--break",
        dest="breaks",
        metavar="STATE",
        action="append",
        default=[],
        help="pause on entering STATE (or after SOURCE->DEST, or a trigger); repeatable",
    )


def _model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="litellm model name, e.g. openai/gpt-4o-mini")
    parser.add_argument("--api-base", help="base URL of an OpenAI-compatible server")
    parser.add_argument("--api-key", help="API key (prefer AGENTFSM_LLM__API_KEY: flags show in `ps`)")
    parser.add_argument("--api-version", help="API version, for providers that take one (Azure)")
    parser.add_argument(
        "--extra",
        metavar="KEY=JSON",
        action=_ExtraAction,
        help="one more argument for litellm's call, its value as JSON (repeatable), "
        'e.g. --extra \'extra_headers={"X-Team": "a"}\'',
    )
    parser.add_argument(
        "--retry-timeout",
        type=_positive_float,
        metavar="SECONDS",
        help="seconds one model call may spend in all, retries included (default: 300)",
    )
    parser.add_argument(
        "--client",
        choices=("native", "litellm"),
        help="the adapter: native (aiohttp, openai/ models only) or litellm "
        "(default: native for openai/ models, litellm for the rest)",
    )
    parser.add_argument(
        "--config", metavar="FILE", help="TOML configuration (default: ./agentfsm.toml if present)"
    )


def _output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the RunResult as one JSON object, only")
    parser.add_argument(
        "--log-format",
        choices=("console", "json"),
        default="console",
        help="log lines on stderr (default: console)",
    )
    _verbosity_options(parser)


def _verbosity_options(parser: argparse.ArgumentParser) -> None:
    """`-q` and `-v`: how much the log on stderr says (default: warnings on a terminal, else a
    line per transition; see `driving.log_level`)."""
    parser.add_argument(
        "-q",
        "--quiet",
        action="count",
        default=0,
        help="fewer log lines: warnings and errors only (-qq: errors only)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="more log lines: on a terminal a line per transition (-vv: debug events too); "
        "to a file or pipe the engine's debug events too",
    )


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _park_after(text: str) -> float | None:
    if text == "never":
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected 0 or more seconds, or never, got {text!r}")
    return value


class _ExtraAction(argparse.Action):
    """``--extra KEY=JSON``, repeatable: the keys gather into one dict, the `extra` option's.
    A value that is not JSON is taken as a string (``--extra user=me``)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        key, sep, raw = str(values).partition("=")
        if not sep or not key.strip():
            parser.error(f"argument --extra: expected KEY=JSON, got {values!r}")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        gathered = dict(getattr(namespace, self.dest, None) or {})
        gathered[key.strip()] = value
        setattr(namespace, self.dest, gathered)


def _mcp_server(text: str) -> tuple[str, str]:
    name, sep, target = text.partition("=")
    if not sep or not name.strip() or not target.strip():
        raise argparse.ArgumentTypeError(
            f"expected NAME=COMMAND_OR_URL (e.g. time=mcp-server-time), got {text!r}"
        )
    return name.strip(), target.strip()


def _http_address(text: str) -> tuple[str, int]:
    """``[HOST:]PORT`` (an IPv6 host in brackets: ``[::1]:8000``); HOST defaults to 127.0.0.1."""
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]") if sep else "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535 or not host:
        raise argparse.ArgumentTypeError(f"expected [HOST:]PORT (e.g. 8000 or 127.0.0.1:8000), got {text!r}")
    return host, port


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"a port is a number from 0 to 65535, got {text!r}")
    return int(text)


def _tool_names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected tool names separated by commas, got {text!r}")
    return names


def package_version() -> str:
    """The package's version (`--version`, and what `mcp-serve` tells its clients)."""
    from .. import __version__

    return __version__
