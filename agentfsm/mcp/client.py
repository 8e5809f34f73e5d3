"""One connection to one MCP server: with `agentfsm.mcp.stdio`, the client side's importer of the MCP SDK.

The SDK's `Client` runs in ``mode="auto"``: it asks ``server/discover`` and speaks the
stateless 2026-07-28 revision to a server that answers, and falls back to the 2025
``initialize`` handshake for the others.

Why the connection lives in a task of its own: the SDK's transports are anyio task groups and
cancel scopes, which must be left by the task that entered them. Entered in a run's task,
cancelling the run (or a streamable-HTTP server dropping, which cancels the entering task)
would tear them down from the wrong task ("cancel scope in a different task") or cancel the
run itself. So a connection task enters the `Client`, lists the tools, and waits to be
closed; calls are made from any task and only wait on the answer. The connection is opened
once, kept across runs, and closed by `aclose()`, which the connection task does itself (a
stdio server's process is stopped and reaped there). A call races the server's answer against
its `timeout` and against the connection's end, so a server that dies mid-call is an answer,
never a hang, and one failing call leaves its siblings alone.

The tool list follows the server: a change the server announces (the legacy
``notifications/tools/list_changed``, or on 2026-07-28 an event of the ``subscriptions/listen``
stream the connection task holds open), the end of the list's ``ttlMs`` on 2026-07-28, or
`refresh_every` requests without a listing mark it due, and `list_due` says so to
`MCPServers.attach`, which re-reads it (`relist`). A legacy streamable-HTTP server that lost
the session (it restarted, and answers the old session id with 404, or with 400 and a body that
is no JSON-RPC error) is reconnected once and the call retried once; a stdio server that died
is not restarted. The SDK reports an HTTP refusal it cannot read only as "Server returned an
error response", so the HTTP client's response hook keeps the status: a 401 (or 403) is told
as the server wanting authorization, with the setting that carries a token. What a failure
was is read by `agentfsm.mcp.failures`; what it does (gone, reconnect, an error result) is
decided here.

An accepted form answer carries the default of each field the person left out (SEP-1034),
so the server receives what its form said a field would be (`agentfsm.forms.with_defaults`).

A server that needs input (elicitation) gets it through the agent's AWAITING_INPUT pause
(`agentfsm.agent.awaiting_input`): the call returns `ToolResult(input_required=...)`, and
the agent calls again with the answers. On 2026-07-28 the server answers ``input_required``
and the call is retried with ``input_responses`` and the server's ``request_state`` (both in
the token, so a retry works from another process). On the 2025 revisions the server sends
``elicitation/create`` while the call is open: the call is held open in this process until
the answer comes (`agentfsm.mcp.held.HeldCall`); after a restart the call is made again, and the server's
questions asked before are answered from the answers given then. Sampling and roots are
not offered (deprecated in 2026-07-28), so servers are refused them.

A stdio server is reached through `agentfsm.mcp.stdio`'s transport, which reads the server's
stdout as bytes (a stray byte, a stray line or an overlong line cost what they should, never a
call that waits for an answer that was thrown away).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, MCPLoginError, MCPServerError, MCPTimeoutError, MissingExtraError
from ..forms import with_defaults
from ..log import event
from ..questions import Answer, InputRequired, Question
from ..toolbox.tool import ToolResult
from .failures import (
    Refusal,
    authorization_wanted,
    describe,
    explain,
    is_disconnect,
    login_problem,
    refusal_behind,
    refused_requests,
)
from .held import HeldCall
from .results import to_tool_result
from .settings import MCPServerSettings
from .stdio import stdio_transport

if TYPE_CHECKING:
    from .oauth import Login

__all__ = ["MCPConnection", "ServerTool"]

_INSTALL = "the MCP client needs the MCP SDK 2.x: pip install 'mcp>=2.3,<3'"
_HOLD_SECONDS = 7 * 24 * 3600.0
"""The SDK's read timeout of a legacy call that may ask a person: the SDK's clock cannot stop
while the run is paused, so `call` keeps the server's own time (`timeout`) instead."""


@dataclass(frozen=True, slots=True)
class ServerTool:
    """A tool as the server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None


class MCPConnection:
    """A connection to the server `server_id`, described by `settings`. `open()` connects."""

    def __init__(self, server_id: str, settings: MCPServerSettings, *, login: Login | None = None) -> None:
        self.server_id = server_id
        self.settings = settings
        self.login = login
        """For a server behind OAuth (`settings.auth`): who signs in when the server wants it
        (`agentfsm mcp login`); None: an authorization that needs a person fails, naming the login."""
        self.tools: tuple[ServerTool, ...] = ()
        """The server's tools, as listed when the connection opened."""
        self.protocol_version: str | None = None
        """The revision spoken: ``2026-07-28``, or the handshake's (``2025-11-25``, ...)."""
        self.instructions: str | None = None
        self.gone: str | None = None
        """Why the server stopped answering (None while it does): set once, logged once."""
        self.stale: str | None = None
        """Why the tool list must be read again (the server announced a change), or None."""
        self.subscribed = False
        """Whether a 2026-07-28 ``subscriptions/listen`` stream for tool-list changes is open."""
        self._fresh_until: float | None = None
        """On 2026-07-28: when the list's ``ttlMs`` runs out (`time.monotonic`); None: no TTL."""
        self._requests = 0
        """Requests since the list was last read (for `refresh_every`)."""
        self._skipped: tuple[str, ...] = ()
        """The tools of the last listing that were skipped (an input schema that is no object's)."""
        self._client: Any = None
        self._task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._reconnecting = asyncio.Lock()
        self._held: dict[str, HeldCall] = {}
        """Legacy calls held open while a person answers their server's question, by hold id."""
        self._open_legacy: list[HeldCall] = []
        """Legacy calls in flight (their server's questions are theirs)."""
        self._needs_login: str | None = None
        """Why the server's OAuth wants a person's login that this connection cannot ask for
        (the SDK's transport reports it as the connection closing)."""
        self._refused: Refusal | None = None
        """The last POST the streamable-HTTP server refused (the SDK keeps only "Server returned
        an error response" of it): what a failure is read with."""

    async def connect(self) -> None:
        """Start the connection task and wait until the tools are listed (at most `connect_timeout`)."""
        if self._task is not None:
            return
        try:
            import mcp  # noqa: F401  (checked here, so a missing SDK is one clear line)
        except ImportError:
            raise MissingExtraError(_INSTALL) from None
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._hold(ready), name=f"mcp-{self.server_id}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.settings.connect_timeout)
        except TimeoutError:
            await self._stop()
            raise MCPTimeoutError(
                f"MCP server {self.server_id!r} did not answer within {self.settings.connect_timeout:g} s "
                f"({self._target()}): check that it starts, or raise its `connect_timeout`"
            ) from None
        except BaseException:
            await self._stop()
            raise

    async def _hold(self, ready: asyncio.Future[None]) -> None:
        """The connection task: enter the client, list the tools, wait to be closed."""
        from mcp.client import Client

        try:
            async with contextlib.AsyncExitStack() as stack:
                client = Client(
                    await self._transport(stack),
                    mode="auto",
                    read_timeout_seconds=self.settings.timeout,
                    message_handler=self._on_message,
                    elicitation_callback=self._on_elicit,
                )
                await stack.enter_async_context(client)
                self.protocol_version = client.protocol_version
                self._listed(*await _list_tools(client, modern=self.modern))
                self.instructions = client.instructions
                self._client = client
                ready.set_result(None)
                if self.modern:
                    await self._follow(client)
                await self._closing.wait()
        except Exception as exc:
            if ready.done():
                self._lost(describe(exc))
            elif isinstance(exc, ConfigError):  # an OAuth secret or key that cannot be read
                ready.set_exception(exc)
            else:
                wants = self._wants_authorization(exc)
                login = self._needs_login or login_problem(self.server_id, self.settings, exc)
                ready.set_exception(
                    MCPLoginError(login)
                    if login is not None
                    else MCPServerError(
                        f"cannot connect to MCP server {self.server_id!r} ({self._target()}): {wants}"
                        if wants is not None
                        else f"cannot connect to MCP server {self.server_id!r} ({self._target()}): "
                        f"{self._explain(exc)}; check its command or URL"
                    )
                )
        finally:
            self._client = None
            if not ready.done():
                ready.cancel()

    async def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        settings = self.settings
        if settings.type == "stdio":
            from mcp import StdioServerParameters

            assert settings.command is not None  # checked by the settings
            params = StdioServerParameters(
                command=settings.command, args=list(settings.args), env=dict(settings.env)
            )
            return stdio_transport(params, server_id=self.server_id, errlog=_errlog())
        assert settings.url is not None
        if settings.type == "sse":
            from mcp.client.sse import sse_client

            return sse_client(settings.url, headers=dict(settings.headers) or None, timeout=settings.timeout)
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        auth = None
        if settings.auth is not None:
            from .oauth import oauth_provider

            auth = oauth_provider(self.server_id, settings, login=self.login, refused=self._login_refused)
        http = await stack.enter_async_context(
            httpx2.AsyncClient(
                auth=auth,
                headers=dict(settings.headers),
                timeout=httpx2.Timeout(settings.timeout, read=300.0),
                event_hooks={"response": [self._saw_response]},
            )
        )
        return streamable_http_client(settings.url, http_client=http)

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        meta: dict[str, Any] | None = None,
        asked: InputRequired | None = None,
        answers: Mapping[str, Answer] | None = None,
    ) -> ToolResult:
        """Call the server's tool `name`: its result, or an error result saying what went wrong
        (a timeout, a refusal, a server gone), or the questions its server asks
        (`ToolResult.input_required`). With `asked` and `answers`: go on with the call that
        asked. Never raises but for cancellation. `meta` goes in the request's ``_meta`` (the
        run's trace context, `agentfsm.toolbox.call_context`).

        A legacy HTTP server that lost the session is reconnected and the call sent again, once:
        the server never ran it (it did not know the session). A second loss withdraws it."""
        if self._reconnecting.locked():  # another call is reconnecting: wait for the new session
            async with self._reconnecting:
                pass
        client = self._client
        outcome = await self._call_once(name, arguments, meta, asked, answers)
        if not isinstance(outcome, _SessionLost):
            return outcome
        if not await self._reconnect(client, outcome.why):
            return self._gone_result(name)
        outcome = await self._call_once(name, arguments, meta, asked, answers)
        if not isinstance(outcome, _SessionLost):
            return outcome
        self._lost(f"its session was lost again right after reconnecting ({outcome.why})")
        return self._gone_result(name)

    async def _call_once(
        self,
        name: str,
        arguments: dict[str, Any],
        meta: dict[str, Any] | None,
        asked: InputRequired | None,
        answers: Mapping[str, Answer] | None,
    ) -> ToolResult | _SessionLost:
        client = self._client
        if self.gone is not None or client is None:
            why = self.gone or "the connection is closed"
            return ToolResult(error=f"MCP server {self.server_id!r} is not available ({why})")
        timeout = self.settings.timeout
        legacy = self._legacy_call(client, name, arguments, asked, answers, meta)
        if legacy is not None:
            call, question = legacy.call, legacy.question
        else:
            call, question = (
                asyncio.ensure_future(self._modern_call(client, name, arguments, asked, answers, meta)),
                None,
            )
        held = self._task
        assert held is not None
        waits: set[asyncio.Future[Any]] = {call, held} if question is None else {call, held, question}
        try:
            await asyncio.wait(waits, timeout=timeout + 1.0, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if legacy is not None and not call.done() and legacy.question.done():
                self._held[legacy.id] = legacy  # its server waits for a person's answer: keep it open
            elif not call.done():
                call.cancel()
                await asyncio.wait({call})
            if legacy is not None:
                self._open_legacy.remove(legacy)
        if legacy is not None and legacy.id in self._held:
            return ToolResult(input_required=legacy.asking())
        if not call.cancelled() and call.exception() is None:
            return self._answer(name, call.result())
        if held.done() or self.gone is not None:
            return self._gone_result(name)
        problem = None if call.cancelled() else call.exception()
        if problem is None or "timed out" in str(problem):
            return ToolResult(
                error=f"MCP server {self.server_id!r} did not answer `{name}` within {timeout:g} s "
                "(the server's `timeout`); the call may still finish there"
            )
        if is_disconnect(problem) or self._needs_login is not None:
            self._lost(describe(problem))
            return self._gone_result(name)
        if self._session_lost(problem):
            return _SessionLost(self._explain(problem))
        wants = self._wants_authorization(problem)
        if wants is not None:
            return ToolResult(error=f"MCP server {self.server_id!r} refused `{name}`: {wants}")
        return ToolResult(error=f"MCP server {self.server_id!r} refused `{name}`: {self._explain(problem)}")

    # -- input: the server's questions (elicitation) ---------------------------------------

    async def _modern_call(
        self,
        client: Any,
        name: str,
        arguments: dict[str, Any],
        asked: InputRequired | None,
        answers: Mapping[str, Answer] | None,
        meta: dict[str, Any] | None,
    ) -> Any:
        """One round of a 2026-07-28 server's call: its ``input_required`` result comes back here
        (the SDK's `Client.call_tool` would answer it itself), and `answers` go with the retry."""
        responses, state = None, None
        if asked is not None and answers is not None:
            token = _token(asked)
            state = token.get("request_state")
            asking = {q.key: q for q in asked.questions}
            responses = {
                key: _elicit_result(answer, asking.get(key) or Question(key=key, message=""))
                for key, answer in answers.items()
            }
        return await client.session.call_tool(
            name,
            arguments,
            read_timeout_seconds=self.settings.timeout,
            input_responses=responses,
            request_state=state,
            meta=meta,
            allow_input_required=True,
        )

    def _answer(self, name: str, result: Any) -> ToolResult:
        """The tool result, or the questions of a 2026-07-28 server's ``input_required``."""
        from mcp_types import ElicitRequest, InputRequiredResult

        if not isinstance(result, InputRequiredResult):
            return to_tool_result(result)
        requests = result.input_requests or {}
        others = sorted({r.method for r in requests.values() if not isinstance(r, ElicitRequest)})
        if others:
            return ToolResult(error=refused_requests(self.server_id, name, others))
        questions = tuple(
            _question(key, r.params) for key, r in requests.items() if isinstance(r, ElicitRequest)
        )
        token = json.dumps({"revision": "2026-07-28", "request_state": result.request_state})
        return ToolResult(input_required=InputRequired(questions=questions, token=token))

    def _legacy_call(
        self,
        client: Any,
        name: str,
        arguments: dict[str, Any],
        asked: InputRequired | None,
        answers: Mapping[str, Answer] | None,
        meta: dict[str, Any] | None,
    ) -> HeldCall | None:
        """A 2025 server's call, whose server may ask while it is open: the call held for `asked`
        given its `answers` (in this process), or a new one (answering the questions asked
        before from `asked`'s token and `answers`). None for a 2026-07-28 server."""
        if self.modern:
            return None
        token = _token(asked) if asked is not None else {}
        given = (
            [(q, answers[q.key]) for q in asked.questions if q.key in answers] if asked and answers else []
        )
        held = self._held.pop(str(token.get("hold", "")), None)
        if held is not None and not held.call.done() and given:
            held.answer(given)
            self._open_legacy.append(held)
            return held
        if held is not None:
            held.give_up()
        earlier = [
            (Question.model_validate(q), Answer.model_validate(a)) for q, a in token.get("answered", ())
        ]
        coro = client.call_tool(name, arguments, read_timeout_seconds=_HOLD_SECONDS, meta=meta)
        legacy = HeldCall(call=asyncio.ensure_future(coro), answered=earlier + given, replay=earlier + given)
        self._open_legacy.append(legacy)
        return legacy

    async def _on_elicit(self, context: Any, params: Any) -> Any:
        """A 2025 server's ``elicitation/create`` during a call: answered from the answers given
        before a restart when it asks one of those again, else by a person (the call's `call`
        returns the question, and this waits for `HeldCall.answer`)."""
        from mcp_types import INVALID_REQUEST, ErrorData

        open_calls = [c for c in self._open_legacy if not c.call.done() and not c.waiting]
        if len(open_calls) != 1:
            return ErrorData(
                code=INVALID_REQUEST,
                message=(
                    "agentfsm takes a question only while exactly one call to this server is open "
                    f"(it has {len(open_calls)}), so it can tell which call asks"
                ),
            )
        legacy = open_calls[0]
        question = _question(f"q{len(legacy.answered) + 1}", params)
        for index, (before, answer) in enumerate(legacy.replay):
            if (before.message, before.schema, before.url) == (
                question.message,
                question.schema,
                question.url,
            ):
                del legacy.replay[index]
                return _elicit_result(answer, question)
        return _elicit_result(await legacy.ask(question), question)

    def abandon(self, asked: InputRequired) -> None:
        """Nobody will answer `asked`: a legacy call held open for it is cancelled (its server is
        told the question was cancelled first)."""
        held = self._held.pop(str(_token(asked).get("hold", "")), None)
        if held is not None:
            held.give_up()

    def _gone_result(self, name: str) -> ToolResult:
        why = self.gone or "the connection was closed"
        return ToolResult(
            error=f"MCP server {self.server_id!r} stopped while `{name}` ran ({why}); "
            "its tools are withdrawn: go on without them"
        )

    # -- the tool list ------------------------------------------------------------------

    @property
    def modern(self) -> bool:
        """Whether the connection speaks the stateless 2026-07-28 revision (no session to lose)."""
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        return self.protocol_version in MODERN_PROTOCOL_VERSIONS

    def list_due(self) -> str | None:
        """Why the tool list must be read again before the next request, or None: a change the
        server announced, the end of its TTL, or `refresh_every` requests served since it was
        last read (not while a TTL says it is fresh)."""
        if self.gone is not None or self._client is None:
            return None
        if self.stale is not None:
            return self.stale
        fresh_until = self._fresh_until
        if fresh_until is not None:
            return "its list's TTL ran out" if time.monotonic() >= fresh_until else None
        every = self.settings.refresh_every
        if every and self._requests >= every:
            return f"{self._requests} requests since it was last listed"
        return None

    def count_request(self) -> None:
        """One more request to the model offers the tools of this listing."""
        self._requests += 1

    async def relist(self) -> None:
        """Read the server's tool list again into `tools`. A server that does not answer in
        time, or refuses, keeps its last list (and says so in a log event); one that is gone is
        withdrawn; a legacy HTTP server that lost the session is reconnected (which lists)."""
        client = self._client
        if client is None or self.gone is not None:
            return
        why, self.stale = self.stale, None  # cleared first: a change announced meanwhile marks it again
        self._requests = 0
        listing = asyncio.ensure_future(_list_tools(client, modern=self.modern, refresh=True))
        held = self._task
        assert held is not None
        timeout = self.settings.timeout
        try:
            await asyncio.wait({listing, held}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not listing.done():
                listing.cancel()
                await asyncio.wait({listing})
        if not listing.cancelled() and listing.exception() is None:
            self._listed(*listing.result())
            return
        if held.done() or self.gone is not None:
            return
        problem = None if listing.cancelled() else listing.exception()
        if problem is not None and is_disconnect(problem):
            self._lost(describe(problem))
        elif problem is not None and self._session_lost(problem):
            await self._reconnect(client, self._explain(problem))
        else:
            failure = "no answer within its `timeout`" if problem is None else self._explain(problem)
            event(
                "mcp_tools_list_failed",
                level=logging.WARNING,
                server=self.server_id,
                message=f"MCP server {self.server_id!r} did not list its tools ({failure}); "
                f"its last list stays (asked because {why or 'it was due'})",
            )

    def _listed(
        self, tools: tuple[ServerTool, ...], ttl_ms: int | None, skipped: tuple[str, ...] = ()
    ) -> None:
        if skipped and skipped != self._skipped:  # warned once for as long as the list says the same
            event(
                "mcp_tools_skipped",
                level=logging.WARNING,
                server=self.server_id,
                tools=list(skipped),
                message=f"MCP server {self.server_id!r} lists tools that cannot be offered, skipped: "
                + "; ".join(skipped),
            )
        self._skipped = skipped
        self.tools = tools
        self._requests = 0
        self._fresh_until = time.monotonic() + ttl_ms / 1000 if ttl_ms else None

    async def _on_message(self, message: Any) -> None:
        """The Client's message handler: a tool-list change marks the list stale. (On
        2026-07-28 the events of the listen stream reach it too.)"""
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self.stale = self.stale or "the server announced a change"

    async def _follow(self, client: Any) -> None:
        """In the connection task, on 2026-07-28: hold a ``subscriptions/listen`` stream for
        tool-list changes until the connection closes (the revision sends no change unasked).
        Each event marks the list stale; a stream that drops marks it stale (events may have
        been missed) and is opened again a second later. A server that does not serve the
        stream, or refuses it, is left to its TTL and `refresh_every`."""
        from mcp.client.subscriptions import SubscriptionLost

        closing = asyncio.ensure_future(self._closing.wait())
        try:
            while not closing.done():
                try:
                    async with client.listen(tools_list_changed=True) as subscription:
                        if not subscription.honored.tools_list_changed:
                            return
                        self.subscribed = True
                        if not await self._events(subscription, closing):
                            return
                except SubscriptionLost:
                    self.subscribed = False
                    self.stale = self.stale or "its change stream dropped (changes may have been missed)"
                    await asyncio.wait({closing}, timeout=1.0)
                except Exception as exc:  # not served, refused, or no answer: no stream, then
                    self.subscribed = False
                    event(
                        "mcp_listen_unavailable",
                        level=logging.DEBUG,
                        server=self.server_id,
                        message=f"MCP server {self.server_id!r} holds no subscriptions/listen stream "
                        f"({describe(exc)}); its tool list follows its TTL and `refresh_every`",
                    )
                    return
        finally:
            self.subscribed = False
            closing.cancel()

    async def _events(self, subscription: Any, closing: asyncio.Future[Any]) -> bool:
        """Mark the list stale at each event, until the connection closes (False) or the server
        ends the stream (True: open another). SubscriptionLost propagates."""
        events = aiter(subscription)
        while True:
            upcoming = asyncio.ensure_future(anext(events))
            await asyncio.wait({upcoming, closing}, return_when=asyncio.FIRST_COMPLETED)
            if not upcoming.done():
                upcoming.cancel()
                await asyncio.wait({upcoming})
                return False
            try:
                upcoming.result()
            except StopAsyncIteration:
                return True
            self.stale = self.stale or "the server announced a change"

    # -- a lost session ------------------------------------------------------------------

    def _session_lost(self, problem: BaseException) -> bool:
        """Whether `problem` says a legacy HTTP server no longer knows the session: it restarted,
        or dropped the session. The spec has it answer 404 for the session id; others (npm's
        server-everything) answer 400 with a body that is no JSON-RPC error. A 400 counts only
        when the refused request carried a session id (a 400 without one is a real refusal)."""
        if self.settings.type != "http" or self.modern:
            return False
        text = str(problem).lower()
        if "session" in text and ("not found" in text or "terminated" in text or "expired" in text):
            return True
        refused = self._refusal(problem)
        return refused is not None and refused.session and refused.status in (400, 404)

    async def _saw_response(self, response: Any) -> None:
        """The HTTP client's response hook: keep the status of a POST the server refused, and
        whether it carried a session id, which the SDK's error for it does not say."""
        request = response.request
        if response.status_code >= 400 and request.method == "POST":
            self._refused = Refusal(response.status_code, "mcp-session-id" in request.headers)

    def _refusal(self, problem: BaseException) -> Refusal | None:
        """The HTTP refusal behind `problem` (`failures.refusal_behind`), else None."""
        return refusal_behind(problem, self._refused)

    def _wants_authorization(self, problem: BaseException) -> str | None:
        """What to say when `problem` is the server asking for credentials
        (`failures.authorization_wanted`), else None."""
        return authorization_wanted(self.server_id, self.settings, self._refusal(problem), problem)

    def _explain(self, problem: BaseException) -> str:
        """One line for `problem`, with the HTTP status of a refusal (`failures.explain`)."""
        return explain(problem, self._refusal(problem))

    async def _reconnect(self, before: Any, why: str) -> bool:
        """Open a new session in place of `before` (once, however many calls found it lost):
        whether the server answers again. If it does not, it is gone."""
        async with self._reconnecting:
            if self._client is not None and self._client is not before:
                return True  # another call reconnected already
            if self.gone is not None:
                return False
            event(
                "mcp_server_reconnecting",
                level=logging.WARNING,
                server=self.server_id,
                message=f"MCP server {self.server_id!r} lost the session ({why}); reconnecting once",
            )
            await self._stop()
            self._task, self._closing, self._refused = None, asyncio.Event(), None
            try:
                await self.connect()
            except MCPServerError as exc:
                self._lost(f"its session was lost ({why}) and reconnecting failed: {exc}")
                return False
            return True

    def _login_refused(self, why: str) -> None:
        self._needs_login = why

    def _lost(self, why: str) -> None:
        """The server is gone: say so once, and let the connection task clean up."""
        if self.gone is not None:
            return
        why = self._needs_login or why
        self.gone = why or "the connection ended"
        event(
            "mcp_server_gone",
            level=logging.WARNING,
            server=self.server_id,
            message=f"MCP server {self.server_id!r} stopped answering ({self.gone}); its tools are withdrawn",
        )
        self._closing.set()

    async def aclose(self) -> None:
        """Close the connection (a stdio server's process is stopped); safe to call twice."""
        await self._stop()

    async def _stop(self) -> None:
        held = [call.give_up() for call in self._held.values()]
        self._held.clear()
        if held:  # their servers were told "cancel": let them answer before the transport goes
            await asyncio.wait(held, timeout=self.settings.timeout)
        self._closing.set()
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait({task})
        self._client = None

    def _target(self) -> str:
        settings = self.settings
        if settings.type == "stdio":
            return " ".join([settings.command or "", *settings.args])
        return f"{settings.type} {settings.url}"


@dataclass(frozen=True, slots=True)
class _SessionLost:
    """A call found the legacy session lost: `MCPConnection.call` reconnects and sends it again."""

    why: str


def _question(key: str, params: Any) -> Question:
    """A server's elicitation (form or URL) as a `Question`."""
    url = getattr(params, "url", None)
    schema = {} if url is not None else dict(getattr(params, "requested_schema", None) or {})
    return Question(key=key, message=params.message, schema=schema, url=url)


def _elicit_result(answer: Answer, question: Question) -> Any:
    """The answer as the server receives it: an accepted form carries the default of each field
    the person left out (SEP-1034), so a server gets what its form said it would."""
    from mcp_types import ElicitResult

    if answer.action != "accept":
        return ElicitResult(action=answer.action)
    return ElicitResult(action="accept", content=with_defaults(question.schema, answer.content))


def _token(asked: InputRequired) -> dict[str, Any]:
    try:
        token = json.loads(asked.token or "{}")
    except json.JSONDecodeError:
        return {}
    return token if isinstance(token, dict) else {}


async def _list_tools(
    client: Any, *, modern: bool, refresh: bool = False
) -> tuple[tuple[ServerTool, ...], int | None, tuple[str, ...]]:
    """Every page of the server's tool list, and on 2026-07-28 its ``ttlMs`` (the shortest of
    its pages'; None without one), and the tools skipped (each with why). `refresh`: past the
    SDK's response cache, to the server (the list is read again because it changed or its TTL
    ran out); the cache keeps what it returns.

    The SDK validates a page whole, so one tool it cannot accept (an ``inputSchema`` that is not
    an object's) would fail the list of every tool of the server: such a page is read again,
    tool by tool (`_lenient_page`), and only the tools that fail are skipped."""
    from pydantic import ValidationError

    tools: list[ServerTool] = []
    skipped: list[str] = []
    ttl: int | None = None
    cursor: str | None = None
    while True:
        try:
            page = await client.list_tools(cursor=cursor, cache_mode="refresh" if refresh else "use")
        except ValidationError:
            page, dropped = await _lenient_page(client, cursor)
            skipped += dropped
        for tool in page.tools:
            schema = dict(tool.input_schema or {})
            schema.setdefault("type", "object")
            tools.append(ServerTool(tool.name, tool.description or "", schema, tool.output_schema))
        if modern and "ttl_ms" in page.model_fields_set:
            ttl = page.ttl_ms if ttl is None else min(ttl, page.ttl_ms)
        cursor = page.next_cursor
        if not cursor:
            return tuple(tools), ttl, tuple(skipped)


async def _lenient_page(client: Any, cursor: str | None) -> tuple[Any, list[str]]:
    """One page of ``tools/list`` with the tools the SDK rejects left out, and those tools (each
    with why). The page is asked for again past the SDK's result validation (the session's raw
    request, stamped as `ClientSession.send_request` stamps it), each tool is checked on its own
    against the negotiated revision, and what passes is handed to the session as its listing
    (the output schemas it checks results with)."""
    from mcp_types import ListToolsRequest, PaginatedRequestParams
    from mcp_types.methods import parse_server_result
    from pydantic import ValidationError

    session = client.session
    request = ListToolsRequest(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    options: dict[str, Any] = {}
    session._stamp(data, options)  # noqa: SLF001 - the SDK stamps requests only inside send_request
    if client.read_timeout_seconds is not None:
        options["timeout"] = client.read_timeout_seconds
    raw = await session._dispatcher.send_raw_request(  # noqa: SLF001 - raw listing, checked per tool
        "tools/list", data.get("params"), options
    )
    version = client.protocol_version
    kept: list[Any] = []
    skipped: list[str] = []
    listed = raw.get("tools") if isinstance(raw, dict) else None
    for tool in listed if isinstance(listed, list) else ():
        try:
            parse_server_result("tools/list", version, {"tools": [tool]})
        except ValidationError as exc:
            name = tool.get("name") if isinstance(tool, dict) else None
            problem = exc.errors()[0]
            where = ".".join(str(part) for part in problem["loc"][2:]) or "the tool"
            skipped.append(f"{name!r} ({where}: {problem['msg']})")
            continue
        kept.append(tool)
    page: Any = parse_server_result("tools/list", version, {**raw, "tools": kept})
    complete = cursor is None and page.next_cursor is None
    # The SDK offers no public way to hand a session a listing checked outside it
    return session._absorb_tool_listing(page, complete=complete), skipped  # noqa: SLF001


def _errlog() -> Any:
    """Where a stdio server's stderr goes: this process's stderr as it is now. (The SDK's
    default is the `sys.stderr` of when it was imported, which may have been closed since.)"""
    try:
        sys.stderr.fileno()
    except (AttributeError, ValueError, OSError):  # replaced by something without a descriptor
        return sys.__stderr__
    return sys.stderr
