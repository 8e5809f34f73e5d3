"""`agentfsm mcp-serve`: the engine as an MCP server, with one tool, `run_agent`.

With `agentfsm.mcp.elicit` (how a pause is asked of the client), the only importer of the MCP
SDK's server side. Built on the SDK's lowlevel `Server`, which serves both eras on one connection: a client
that asks ``server/discover`` speaks the stateless 2026-07-28 revision, one that sends
``initialize`` the 2025 handshake. The lowlevel tier, not `MCPServer`, because the tool's
schemas are the engine's: the input is checked here, so a bad value is an `isError` result
that names it and the fix, and the output schema is `RunResult`'s own (pydantic's schema of
the dataclass, which `MCPServer`'s derivation from a return annotation refuses).

Each call is its own run on an agent of its own (built by the `AgentFactory` the command line
gives), so concurrent calls share no memory. A call that needs approval, and a question one of
the agent's tools asks (an MCP server's own elicitation, `ask_human` for input), are asked of the
client as elicitations (`agentfsm.mcp.elicit`), in the way its revision has:

- 2025 (handshake): the run's `approver` and `input_handler` send ``elicitation/create`` over the
  session, mid-call, and the run goes on with the answer.
- 2026-07-28: a server cannot send requests, so the run pauses (neither: `run()` returns paused
  in AWAITING_APPROVAL or AWAITING_INPUT) and the call answers ``input_required``, one
  elicitation per call waiting or question unanswered; the client retries the call with the
  answers and the `requestState`, and the paused run resumes with them. The paused agent stays
  in this process for `pause_timeout` seconds, the `requestState`'s lifetime, keyed by a random
  token the SDK seals (encrypted, bound to this tool and these arguments) so a client can
  neither read nor forge it.

A client that declares no elicitation support, or declines, cancels or fails to answer,
gets the call rejected (a question: declined, or cancelled when it cannot be asked); the
model reads why in the call's observation. A run paused with nothing to ask is cancelled. A client that never
answers holds nothing for longer than `pause_timeout`: each pause has a timer of its own (not
the next call's arrival, which may never come), and at its end the run is cancelled and its
agent released (its MCP servers, sandbox and browser closed). On 2025 the call then answers
with the cancelled run's result; on 2026-07-28 the paused run is dropped and a late retry is
told it is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import signal
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ConfigError, MissingExtraError, WrongValueError
from ..log import event
from ..questions import InputHandler
from ..run.result import AgentState, RunResult
from .elicit import Approver, Asked, OverTheSession, apply_answers, handlers_for, requests_for

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext
    from mcp.server.lowlevel import Server
    from mcp.types import (
        CallToolRequestParams,
        CallToolResult,
        InputRequiredResult,
        ListToolsResult,
        PaginatedRequestParams,
    )

__all__ = ["TOOL", "AgentFactory", "AgentServer", "ServedAgent"]

TOOL = "run_agent"
"""The name of the one tool the server offers."""
SERVER_NAME = "agentfsm"
PAUSE_TIMEOUT = 600.0
"""Seconds a run paused for approval or input waits for the client's answer (on 2026-07-28 its retry, and
the `requestState`'s TTL); then the run is cancelled and its agent released."""


class ServedAgent(Asked, Protocol):
    """What the server drives of an agent (`ToolCallAgent` is one): a run, and its pauses asked of
    the client (`Asked`)."""

    approver: Approver | None
    input_handler: InputHandler | None

    async def run(self, request: str) -> RunResult: ...

    async def resume(self) -> RunResult: ...

    async def cancel(self) -> RunResult: ...


AgentFactory = Callable[[str, int | None], ServedAgent]
"""``factory(agent_name, max_steps)``: a new agent for one call (`max_steps` None: its default).
Raises `ValueError` (a `ConfigError`) when that agent cannot be built; the call reports it."""


@dataclass(frozen=True, slots=True)
class _Request:
    task: str
    agent: str
    max_steps: int | None


@dataclass(slots=True)
class _Paused:
    """A 2026-07-28 run paused for the client's retry, and the timer that ends it without one."""

    agent: ServedAgent
    timer: asyncio.TimerHandle


class AgentServer:
    """The MCP server: `run_agent` over the agents `factory` builds, by the names in `agents`.

    Serve it with `serve_stdio()` or `serve_http(host, port)`; `aclose()` (done by both on
    their way out) ends the runs still paused for an answer. `pause_timeout`: the seconds a run
    paused for approval or input waits for the client's answer before it is cancelled.
    """

    def __init__(
        self,
        factory: AgentFactory,
        *,
        agents: Sequence[str],
        default_agent: str,
        pause_timeout: float = PAUSE_TIMEOUT,
        version: str = "",
    ) -> None:
        try:
            from mcp.server.lowlevel import Server
            from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
        except ImportError:
            raise MissingExtraError(
                "agentfsm mcp-serve needs the MCP SDK 2.x: pip install 'agentfsm[mcp]'"
            ) from None
        if not pause_timeout > 0 or pause_timeout == float("inf"):
            raise WrongValueError(
                f"pause_timeout must be a positive number of seconds, got {pause_timeout!r}"
            )
        if default_agent not in agents:
            raise WrongValueError(
                f"default_agent {default_agent!r} is not one of the agents {list(agents)!r}"
            )
        self.factory = factory
        self.agents = tuple(agents)
        self.default_agent = default_agent
        self.pause_timeout = pause_timeout
        self._paused: dict[str, _Paused] = {}
        self._ending: set[asyncio.Task[None]] = set()
        """The releases of paused runs whose time ran out, awaited by `aclose()`."""
        self.server: Server[Any] = Server(
            SERVER_NAME,
            version=version,
            instructions=f"`{TOOL}` runs an agentfsm agent on a task and returns its RunResult.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        security = RequestStateSecurity.ephemeral(ttl=pause_timeout)
        self.server.middleware.append(RequestStateBoundary(security, default_audience=SERVER_NAME))

    # -- serving ------------------------------------------------------------------

    async def serve_stdio(self) -> None:
        """Serve one client on stdin and stdout until stdin closes. While it serves, the SDK
        points file descriptor 1 at stderr, so nothing else written to stdout reaches the wire."""
        from mcp.server.stdio import stdio_server

        try:
            async with stdio_server() as (read, write):
                await self.server.run(read, write, self.server.create_initialization_options())
        finally:
            await self.aclose()

    async def serve_http(self, host: str, port: int, *, ready: Callable[[str], None] | None = None) -> None:
        """Serve streamable HTTP on ``http://host:port/mcp`` until SIGINT or SIGTERM.
        `ready` is called with the URL once the socket listens; `ConfigError` when it cannot."""
        import uvicorn

        class Stoppable(uvicorn.Server):
            """uvicorn, but SIGINT and SIGTERM only stop it: uvicorn re-raises them once it has
            shut down, which would end the process before the paused runs are closed."""

            def handle_exit(self, sig: int, frame: Any) -> None:
                if self.should_exit and sig == signal.SIGINT:
                    self.force_exit = True  # a second Ctrl-C: stop without waiting for calls
                self.should_exit = True

        listening = _listen(host, port)
        app = self.server.streamable_http_app(host=host)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
        server = Stoppable(config)
        url = f"http://{_url_host(host)}:{port}/mcp"

        async def announce() -> None:
            while not server.started and not server.should_exit:
                await asyncio.sleep(0.02)
            if server.started and ready is not None:
                ready(url)

        announcer = asyncio.create_task(announce())
        try:
            await server.serve(sockets=[listening])
        finally:
            announcer.cancel()
            listening.close()
            await self.aclose()

    async def aclose(self) -> None:
        """End every run still paused for an answer (`cancelled`), releasing what its agent holds,
        and wait for the releases of the runs whose time ran out."""
        paused, self._paused = list(self._paused.values()), {}
        for entry in paused:
            entry.timer.cancel()
            await _end(entry.agent)
        while self._ending:
            await asyncio.gather(*self._ending)

    # -- the protocol -------------------------------------------------------------

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        from mcp.types import ListToolsResult, Tool, ToolAnnotations

        tool = Tool(
            name=TOOL,
            title="Run an agentfsm agent",
            description=(
                "Run an agent on a task to its end and return its RunResult (state, stop_reason, steps, "
                "output, error, usage). Calls that need approval, and the questions the agent's tools "
                "ask, are asked of you as elicitations."
            ),
            input_schema=self.input_schema(),
            output_schema=_output_schema(),
            annotations=ToolAnnotations(read_only_hint=False, open_world_hint=True),
        )
        return ListToolsResult(tools=[tool])

    def input_schema(self) -> dict[str, Any]:
        """`run_agent`'s arguments: the task, and optionally which agent and its step limit."""
        return {
            "type": "object",
            "properties": {
                "task": {"type": "string", "minLength": 1, "description": "the request for the agent"},
                "agent": {
                    "type": "string",
                    "enum": list(self.agents),
                    "default": self.default_agent,
                    "description": f"which agent runs the task (default: {self.default_agent})",
                },
                "max_steps": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "steps before the run stops (default: the agent's configured max_steps)",
                },
            },
            "required": ["task"],
            "additionalProperties": False,
        }

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> CallToolResult | InputRequiredResult:
        if params.name != TOOL:
            return _refusal(f"unknown tool {params.name!r}: this server has one tool, `{TOOL}`")
        if params.request_state is not None:  # a 2026-07-28 retry, answering the pause
            entry = self._paused.pop(params.request_state, None)
            if entry is not None:
                entry.timer.cancel()
            else:
                return _refusal(
                    f"the paused run is gone (it waits {self.pause_timeout:g} s, and only in "
                    f"the server process that paused it): call `{TOOL}` again"
                )
            apply_answers(entry.agent, params.input_responses or {})
            return await self._drive(entry.agent, entry.agent.resume())
        try:
            request = self._parse(params.arguments or {})
        except WrongValueError as exc:
            return _refusal(str(exc))
        try:
            agent = self.factory(request.agent, request.max_steps)
        except ValueError as exc:  # ConfigError: this agent cannot be built from the configuration
            return _refusal(f"cannot build the {request.agent} agent: {exc}")
        agent.approver, agent.input_handler = handlers_for(ctx, self.pause_timeout)
        return await self._drive(agent, agent.run(request.task))

    def _parse(self, arguments: Mapping[str, Any]) -> _Request:
        known = ("task", "agent", "max_steps")
        unknown = sorted(set(arguments) - set(known))
        if unknown:
            raise WrongValueError(
                f"unknown argument {unknown[0]!r} to `{TOOL}`: its arguments are {', '.join(known)}"
            )
        task = arguments.get("task")
        if not isinstance(task, str) or not task.strip():
            raise WrongValueError(
                f"`task` must be a non-empty string, the request for the agent; got {task!r}"
            )
        agent = arguments.get("agent", self.default_agent)
        if agent not in self.agents:
            raise WrongValueError(
                f"`agent` must be one of {', '.join(self.agents)}, got {agent!r}; "
                f"leave it out for the default ({self.default_agent})"
            )
        max_steps = arguments.get("max_steps")
        if max_steps is not None and (
            isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1
        ):
            raise WrongValueError(
                f"`max_steps` must be a positive integer, got {max_steps!r}; "
                "leave it out for the agent's configured max_steps"
            )
        return _Request(task=task, agent=str(agent), max_steps=max_steps)

    async def _drive(
        self, agent: ServedAgent, running: Awaitable[RunResult]
    ) -> CallToolResult | InputRequiredResult:
        """Await the run; a pause becomes ``input_required`` (the agent kept, until the retry or its
        timer), any other end the RunResult (the agent released). A 2025 run whose approval or
        question got no answer in time is cancelled, and its result is the call's; so is a paused
        run with nothing to ask (a pause of the agent's own), which no retry could go on with."""
        from mcp.types import InputRequiredResult

        kept = False
        try:
            result = await running
            if not result.paused:
                return _result(result)
            session = agent.approver
            if isinstance(session, OverTheSession) and session.expired:
                self._expired()
                return _result(await agent.cancel())
            asked = requests_for(agent)
            if not asked:  # nothing the client could answer: it would wait for ever
                event(
                    "mcp_serve_pause_unanswerable",
                    level=logging.WARNING,
                    message=f"a run paused ({result.stop_reason}) with nothing to ask the client; cancelled",
                )
                return _result(await agent.cancel())
            token = secrets.token_urlsafe(18)
            timer = asyncio.get_running_loop().call_later(self.pause_timeout, self._expire, token)
            self._paused[token] = _Paused(agent, timer)
            kept = True
            return InputRequiredResult(input_requests=asked, request_state=token)
        finally:
            if not kept:
                await _close(agent)

    def _expire(self, token: str) -> None:
        """The timer of the run paused under `token`: no retry came in time, so the run is
        cancelled and its agent released now, whether or not another call ever arrives."""
        entry = self._paused.pop(token, None)
        if entry is None:  # retried, or the server closed, meanwhile
            return
        self._expired()
        ending = asyncio.get_running_loop().create_task(_end(entry.agent))
        self._ending.add(ending)
        ending.add_done_callback(self._ending.discard)

    def _expired(self) -> None:
        event(
            "mcp_serve_pause_expired",
            level=logging.INFO,
            message=f"a paused run got no answer within {self.pause_timeout:g} s; cancelled",
        )


# -- results ----------------------------------------------------------------------


@cache
def _output_schema() -> dict[str, Any]:
    """`RunResult`'s JSON schema (as dumped), the tool's `outputSchema`."""
    from pydantic import TypeAdapter

    schema: dict[str, Any] = TypeAdapter(RunResult).json_schema(mode="serialization")
    return schema


def _result(result: RunResult) -> CallToolResult:
    """The RunResult as structured content, and a line of text saying how the run ended. A run
    that ended in ERROR is an error result (`isError`), its RunResult naming the error."""
    from mcp.types import CallToolResult, TextContent

    text = f"{result.state.value} ({result.stop_reason}) after {result.steps} step{'s' * (result.steps != 1)}"
    detail = result.error if result.error is not None else result.output
    if detail:
        text += f": {detail}"
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=result.model_dump(mode="json"),
        is_error=result.state is AgentState.ERROR,
    )


def _refusal(message: str) -> CallToolResult:
    from mcp.types import CallToolResult, TextContent

    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


async def _close(agent: ServedAgent) -> None:
    aclose = getattr(agent, "aclose", None)  # agents holding resources (Manus, MCPAgent) have one
    if aclose is not None:
        await aclose()


async def _end(agent: ServedAgent) -> None:
    """Cancel a paused run and release its agent. A release that fails is logged: it ends a run
    nobody waits for (a timer's, or the server's way out), so there is nobody to raise it to."""
    with contextlib.suppress(Exception):  # already ended some other way: nothing left to cancel
        await agent.cancel()
    try:
        await _close(agent)
    except Exception as exc:
        event(
            "mcp_serve_release_failed",
            level=logging.WARNING,
            message=f"closing the agent of a cancelled run failed: {type(exc).__name__}: {exc}",
        )


def _listen(host: str, port: int) -> socket.socket:
    """The bound socket uvicorn serves on, bound here so that an address taken (or not this
    machine's) is one line, not uvicorn's log and exit status."""
    listening = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind((host, port))
    except OSError as exc:
        listening.close()
        raise ConfigError(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}): choose a free port, "
            "or an address of this machine"
        ) from None
    return listening


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
