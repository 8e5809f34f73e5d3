"""The inspector's web server: the page, its assets, and the JSON it reads, on aiohttp's own server.

Why these rules:
- It binds 127.0.0.1 unless told otherwise, and on any other address every request needs the
  token printed in the URL (as Jupyter's does): a run holds prompts, tool output and file
  contents. The token comes once in the URL's query and is kept in a cookie the page sends
  back; a script may send it as ``X-Agentfsm-Token``.
- Every request's ``Host`` must be the address served: a web page elsewhere cannot make a
  browser on this machine read the runs by pointing a name of its own at 127.0.0.1 (DNS
  rebinding).
- The page reads only the runs found under the paths given: a request names a run by its key
  in the list (`agentfsm.ui.reading`), never by a path.
- Its assets ship in the package (`agentfsm/ui/static`): nothing is fetched from the network,
  so it works offline, and the page's Content-Security-Policy allows nothing else.
- A run that cannot be read answers with its one-line problem (HTTP 422), which the page shows
  on the run's row; no stack trace reaches the page.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import socket
from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from aiohttp import web

from ..agent.stepping import Breakpoint
from ..errors import AgentfsmError, InspectorError
from ..messages import Message
from .managed import Forks, Holds, Reviews
from .reader import Reader

if TYPE_CHECKING:
    from ..runs.forking import ForkMemory

__all__ = ["LOOPBACK", "Inspector", "needs_token"]

LOOPBACK = "127.0.0.1"
COOKIE = "agentfsm_ui"
HEADER = "X-Agentfsm-Token"
PAGE_SIZE = 500
"""Transitions a timeline request returns at most (the page asks for more as it scrolls)."""
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_ASSETS = {"app.js": "text/javascript", "style.css": "text/css"}
_HOLDING = ("breakpoints", "step", "continue")
_VERBS = ("approve", "reject", "answer", "cancel", "review", *_HOLDING)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def needs_token(host: str) -> bool:
    """Whether serving on `host` needs a token: anything but a loopback address does."""
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: it may resolve anywhere
        return True


class Inspector:
    """The web app over a `Reader`, served at `host` (see the module's docstring for its rules).

    `start()` binds (port 0: any free port) and returns the URL to open, with the token when there
    is one; `stop()` closes it.
    """

    def __init__(
        self, reader: Reader, *, host: str = LOOPBACK, port: int = 0, token: str | None = None
    ) -> None:
        self.reader = reader
        self.host, self.port, self.token = host, port, token
        self._hosts: set[str] = set()
        self.url: str | None = None
        """The page's URL once serving (with the token, if any)."""
        self._runner: web.AppRunner | None = None
        self.app = web.Application(middlewares=[self._guard])
        self.app.add_routes(
            [
                web.get("/", self._page),
                web.get("/static/{name}", self._asset),
                web.get("/api/runs", self._runs),
                web.get("/api/runs/more", self._more_runs),
                web.get("/api/run", self._run),
                web.get("/api/run/transitions", self._transitions),
                web.get("/api/run/memory", self._memory),
                web.get("/api/run/events", self._events),
                web.get("/api/run/fork", self._fork_point),
                web.post("/api/run/fork", self._fork),
                web.post("/api/run/{verb}", self._steer),
            ]
        )
        self._following: set[asyncio.Task[Any]] = set()
        """The handlers streaming a run's events: cancelled by `stop()` (they would wait for the run)."""

    async def start(self) -> str:
        """Serve; returns the page's URL."""
        family, kind, proto, _, address = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)[0]
        listening = socket.socket(family, kind, proto)
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listening.bind(address)
        except OSError as exc:
            listening.close()
            raise InspectorError(
                f"cannot serve the inspector at {self.host}:{self.port}: {exc.strerror}; "
                "choose another --port (0: any free one)"
            ) from None
        self.port = listening.getsockname()[1]
        await self.reader.rows()  # opens a database now, not on the page's first request
        runner = web.AppRunner(self.app, access_log=None)
        await runner.setup()
        await web.SockSite(runner, listening).start()
        self._runner = runner
        shown = f"[{self.host}]" if ":" in self.host else self.host
        self._hosts = {f"{shown}:{self.port}"}
        if not needs_token(self.host):
            self._hosts |= {f"{name}:{self.port}" for name in ("127.0.0.1", "localhost", "[::1]")}
        self.url = f"http://{shown}:{self.port}/" + (f"?token={self.token}" if self.token else "")
        return self.url

    async def stop(self) -> None:
        """Stop serving, and let go of the database, if any."""
        for following in list(self._following):
            following.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await asyncio.to_thread(self.reader.close)

    # -- the rules ------------------------------------------------------------------

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.host not in self._hosts:
            return web.Response(
                status=421, text=f"this inspector serves {sorted(self._hosts)[0]}, not {request.host}"
            )
        given = request.query.get("token") or request.cookies.get(COOKIE) or request.headers.get(HEADER) or ""
        if self.token is not None and not hmac.compare_digest(given.encode(), self.token.encode()):
            return web.Response(status=403, text="open the URL the inspector printed: it carries its token")
        if request.method != "GET":
            refused = self._refused_action(request)
            if refused is not None:
                return web.json_response({"problem": refused}, status=403)
        response = await handler(request)
        response.headers["Content-Security-Policy"] = _CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-store"
        if self.token is not None and request.query.get("token"):
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="Strict")
        return response

    def _refused_action(self, request: web.Request) -> str | None:
        """Why an action (a POST) is refused, or None: it must come from this inspector's own page
        (its ``Origin``), as JSON (a form on another site cannot send that without asking first)."""
        origin = request.headers.get("Origin", "")
        if origin.removeprefix("http://") not in self._hosts:
            return f"an action must come from the inspector's own page, not from {origin or 'no page'}"
        if request.content_type != "application/json":
            return f"an action is a JSON body, not {request.content_type}"
        return None

    # -- the page -----------------------------------------------------------------------

    async def _page(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text=_static("index.html"), content_type="text/html")

    async def _asset(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in _ASSETS:
            raise web.HTTPNotFound(text=f"no asset {name!r}")
        return web.Response(text=_static(name), content_type=_ASSETS[name])

    # -- the data -----------------------------------------------------------------------

    async def _runs(self, request: web.Request) -> web.StreamResponse:
        rows = await self.reader.rows()
        return web.json_response({"runs": [row.to_json() for row in rows], "more": self.reader.more})

    async def _more_runs(self, request: web.Request) -> web.StreamResponse:
        """The next page of a manager's runs (the list's `more` names it, and where it begins)."""
        try:
            rows = await self.reader.more_rows(request.query.get("source", ""), _number(request, "offset", 0))
        except KeyError as exc:
            return web.json_response({"problem": str(exc.args[0])}, status=404)
        return web.json_response({"runs": [row.to_json() for row in rows], "more": self.reader.more})

    async def _run(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, lambda view: view.summary())

    async def _transitions(self, request: web.Request) -> web.StreamResponse:
        offset = _number(request, "offset", 0)
        limit = min(_number(request, "limit", PAGE_SIZE), PAGE_SIZE)
        return await self._answer(
            request, lambda view: {"offset": offset, "transitions": view.page(offset, limit)}
        )

    async def _memory(self, request: web.Request) -> web.StreamResponse:
        at = _number(request, "at", 0)
        return await self._answer(request, lambda view: view.memory_at(at))

    async def _answer(
        self, request: web.Request, part: Callable[[Any], dict[str, Any]]
    ) -> web.StreamResponse:
        key = request.query.get("key", "")
        try:
            view = await self.reader.view(key)
            return web.json_response(part(view))
        except KeyError:
            return web.json_response({"problem": f"no run {key!r} among the paths given"}, status=404)
        except IndexError as exc:
            return web.json_response({"problem": str(exc)}, status=404)
        except AgentfsmError as exc:
            return web.json_response({"problem": str(exc).splitlines()[0]}, status=422)

    # -- a managed run, live --------------------------------------------------------------

    async def _events(self, request: web.Request) -> web.StreamResponse:
        """The run's events from number `after` on as server-sent events (``data``: the event's
        JSON, ``id``: its seq), then an ``end`` event when the run has ended; a run that is not a
        manager's has none (404)."""
        key = request.query.get("key", "")
        held = self.reader.source(key)
        if held is None:
            return web.json_response(
                {"problem": f"run {key!r} is not followed live: it is a file's"}, status=404
            )
        source, run_id = held
        after = _number(request, "after", 0)
        try:
            events = source.manager().events(run_id, after=after)
        except AgentfsmError as exc:
            return web.json_response({"problem": str(exc).splitlines()[0]}, status=404)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
        )
        response.headers["Content-Security-Policy"] = _CSP
        await response.prepare(request)
        task = asyncio.current_task()
        assert task is not None
        self._following.add(task)
        try:
            async for item in events:
                line = json.dumps(item.to_json(), ensure_ascii=False, default=str)
                await response.write(f"id: {item.seq}\ndata: {line}\n\n".encode())
            await response.write(b"event: end\ndata: {}\n\n")
        except (ConnectionResetError, asyncio.CancelledError):  # the page left, or the server stops
            pass
        except AgentfsmError as exc:  # an unknown id: said once, as the stream's last event
            problem = json.dumps({"problem": str(exc).splitlines()[0]})
            await response.write(f"event: problem\ndata: {problem}\n\n".encode())
        finally:
            self._following.discard(task)
        return response

    async def _forks(self, key: str) -> tuple[Forks, str | Path, str] | web.Response:
        """The manager that forks the run `key` names, what it forks (a run's id, or a trace's path)
        and the prefix of the fork's key; or the answer saying why none does."""
        held = self.reader.source(key)
        if held is None:
            try:
                view = await self.reader.view(key)
            except (KeyError, AgentfsmError):
                return web.json_response({"problem": f"no run {key!r} among the paths given"}, status=404)
            target = self.reader.fork_target()
            if view.fork is None or target is None:
                problem = (
                    f"run {key!r} is a {view.row.kind}'s: a file's run forks into an app's runs, and "
                    "the inspector has none; serve it with the app's Runs too (`serve(runs, path)`)"
                )
                return web.json_response({"problem": problem}, status=404)
            return cast(Forks, target.manager()), Path(view.row.path), target.prefix
        manager = held[0].manager()
        if not isinstance(manager, Forks):
            return web.json_response(
                {"problem": f"run {key!r} is a durable run's: fork it from its trace in an app's Runs"},
                status=409,
            )
        return manager, held[1], held[0].prefix

    async def _fork_point(self, request: web.Request) -> web.StreamResponse:
        """Where a managed run stood after transition `at`: its state, step and memory (to edit; a
        flow's: each of its agents', under ``agents``)."""
        found = await self._forks(request.query.get("key", ""))
        if isinstance(found, web.Response):
            return found
        manager, source, _ = found
        try:
            point = await manager.fork_point(source, _number(request, "at", 0))
        except AgentfsmError as exc:
            return web.json_response({"problem": str(exc).splitlines()[0]}, status=409)
        return web.json_response(
            {
                "transition": point.transition,
                "state": point.state,
                "step": point.step,
                "pending": list(point.pending),
                "messages": [message.model_dump(mode="json") for message in point.memory.messages],
                **(
                    {
                        "agents": {
                            name: [message.model_dump(mode="json") for message in memory.messages]
                            for name, memory in point.agents.items()
                        }
                    }
                    if point.flow
                    else {}
                ),
            }
        )

    async def _fork(self, request: web.Request) -> web.StreamResponse:
        """A new run from a managed run's transition ``at``, with ``messages`` as its memory (a
        flow's: ``agents``, each agent's messages by name; None: as it was there); answers the new
        run's key."""
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"problem": "the action's body is not JSON"}, status=400)
        if (
            not isinstance(body, dict)
            or isinstance(body.get("at"), bool)
            or not isinstance(body.get("at"), int)
        ):
            return web.json_response(
                {"problem": "a fork names its transition: {key, at, messages}"}, status=400
            )
        key = str(body.get("key", ""))
        found = await self._forks(key)
        if isinstance(found, web.Response):
            return found
        manager, source, prefix = found
        agent = body.get("agent") if isinstance(source, Path) else None
        if agent is not None and not isinstance(agent, str):
            return web.json_response(
                {"problem": f"a fork's agent is a factory's name, got {agent!r}"}, status=400
            )
        memory: ForkMemory | None = None
        try:
            if body.get("agents") is not None:  # a flow's: its agents' messages, by name
                memory = {
                    str(name): [Message.model_validate(message) for message in messages]
                    for name, messages in dict(body["agents"]).items()
                }
            elif body.get("messages") is not None:
                memory = [Message.model_validate(message) for message in body["messages"]]
        except (TypeError, ValueError) as exc:
            problem = f"the fork's messages are not messages: {str(exc).splitlines()[0]}"
            return web.json_response({"problem": problem}, status=400)
        try:
            fork_id = await manager.fork(source, body["at"], agent=agent, memory=memory)
        except AgentfsmError as exc:
            return web.json_response({"problem": str(exc).splitlines()[0]}, status=409)
        return web.json_response({"done": "fork", "run_id": fork_id, "key": f"{prefix}/{fork_id}"})

    async def _steer(self, request: web.Request) -> web.StreamResponse:
        """An action on a managed run through its manager's own verb (so a stale or duplicate
        decision is refused as an app's is: 409): ``approve``, ``reject``, ``answer``, ``cancel``,
        and for an app's runs (`Holds`) ``breakpoints`` (replaced by the body's list), ``step`` and
        ``continue``, and (`Reviews`) ``review``: a flow's plan approved, edited (the body's
        ``steps``) or cancelled (its ``verdict``)."""
        verb = request.match_info["verb"]
        if verb not in _VERBS:
            return web.json_response({"problem": f"no action {verb!r}; {', '.join(_VERBS)}"}, status=404)
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"problem": "the action's body is not JSON"}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"problem": "the action's body is a JSON object"}, status=400)
        key = str(body.get("key", ""))
        held = self.reader.source(key)
        if held is None:
            return web.json_response(
                {"problem": f"run {key!r} is no managed run: it cannot be steered"}, status=404
            )
        manager, run_id = held[0].manager(), held[1]
        call_id, pause = str(body.get("call_id", "")), body.get("pause")
        for name, kind in (("arguments", dict), ("content", dict), ("pause", int)):
            if body.get(name) is not None and not isinstance(body[name], kind):
                return web.json_response(
                    {"problem": f"the action's {name} must be a JSON {kind.__name__}, got {body[name]!r}"},
                    status=400,
                )
        if verb in _HOLDING:
            if not isinstance(manager, Holds):
                problem = f"run {key!r} is a durable run's: it has no breakpoints to {verb}"
                return web.json_response({"problem": problem}, status=409)
            return await _hold(manager, run_id, verb, body)
        if verb == "review":
            return await _review(manager, run_id, key, body)
        try:
            if verb == "approve":
                await manager.approve(run_id, call_id, arguments=body.get("arguments"), pause=pause)
            elif verb == "reject":
                await manager.reject(run_id, call_id, body.get("reason"), pause=pause)
            elif verb == "answer":
                await manager.answer(
                    run_id,
                    call_id,
                    body.get("content"),
                    action=body.get("action", "accept"),
                    key=body.get("question"),
                    pause=pause,
                )
            else:
                await manager.cancel(run_id)
        except AgentfsmError as exc:
            return web.json_response({"problem": str(exc).splitlines()[0]}, status=409)
        return web.json_response({"done": verb, "run_id": run_id})


async def _review(manager: object, run_id: str, key: str, body: dict[str, Any]) -> web.StreamResponse:
    """A flow's plan decided: ``verdict`` ``approve``, ``edit`` (with ``steps``, a list of step
    texts with their ``[agent]`` tags) or ``cancel``, bound to the body's ``pause``."""
    if not isinstance(manager, Reviews):
        return web.json_response(
            {"problem": f"run {key!r} is a durable run's: it has no plan to review"}, status=409
        )
    verdict, steps = body.get("verdict"), body.get("steps")
    if verdict not in ("approve", "edit", "cancel"):
        problem = f"a plan's verdict is 'approve', 'edit' or 'cancel', got {verdict!r}"
        return web.json_response({"problem": problem}, status=400)
    if steps is not None and (
        not isinstance(steps, list) or not all(isinstance(s, str) and s.strip() for s in steps)
    ):
        problem = f"a plan's steps are a list of step texts, got {steps!r}"
        return web.json_response({"problem": problem}, status=400)
    try:
        await manager.review(run_id, verdict, steps, pause=body.get("pause"))
    except AgentfsmError as exc:
        return web.json_response({"problem": str(exc).splitlines()[0]}, status=409)
    return web.json_response({"done": "review", "run_id": run_id})


async def _hold(manager: Holds, run_id: str, verb: str, body: dict[str, Any]) -> web.StreamResponse:
    """A run's breakpoints set (``breakpoints``: a list of `Breakpoint` fields), or the held run
    moved on (``step``, ``continue``)."""
    try:
        if verb == "breakpoints":
            given = body.get("breakpoints")
            if not isinstance(given, list) or not all(isinstance(point, dict) for point in given):
                return web.json_response(
                    {"problem": f"breakpoints must be a list of objects, got {given!r}"}, status=400
                )
            fields = {"state", "trigger", "source", "dest", "tool"}
            for point in given:
                if set(point) - fields or not all(isinstance(value, str) for value in point.values()):
                    problem = f"a breakpoint has text fields {sorted(fields)}, got {point!r}"
                    return web.json_response({"problem": problem}, status=400)
            await manager.set_breakpoints(run_id, [Breakpoint(**point) for point in given])
        elif verb == "step":
            await manager.step(run_id)
        else:
            await manager.proceed(run_id)
    except AgentfsmError as exc:
        return web.json_response({"problem": str(exc).splitlines()[0]}, status=409)
    return web.json_response({"done": verb, "run_id": run_id})


def _number(request: web.Request, name: str, default: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    if not text.isdigit():
        raise web.HTTPBadRequest(text=f"{name} must be a whole number, got {text!r}")
    return int(text)


def _static(name: str) -> str:
    return (resources.files("agentfsm.ui") / "static" / name).read_text(encoding="utf-8")
