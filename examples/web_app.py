"""Serving agents from a web app: `agentfsm.Runs` behind aiohttp. Killed and started again, it goes on.

    APP_API_BASE=http://127.0.0.1:8000/v1 python examples/web_app.py   # any OpenAI-compatible server

POST /runs {"task"}, GET /runs[/ID], GET /runs/ID/events (server-sent, from ?after=SEQ or Last-Event-ID),
POST /runs/ID/approve {"call_id", "reject"?: why}, POST /runs/ID/cancel.
"""

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler

from agentfsm import OpenAICompatible, Runs, Terminate, ToolCallAgent, tool
from agentfsm.errors import AgentfsmError, KeyNotFoundError
from agentfsm.runs import AgentSpec

MODEL = OpenAICompatible(os.environ.get("APP_MODEL", "openai/helper"), api_base=os.environ["APP_API_BASE"])
LEDGER = Path(os.environ.get("APP_LEDGER", "ledger.txt"))
RUNS = web.AppKey("runs", Runs)
routes = web.RouteTableDef()


@tool(needs_approval=True)
def archive(name: str) -> str:
    """Archive the report `name` (a person approves it first)."""
    with LEDGER.open("a") as ledger:
        ledger.write(f"archived {name}\n")
    return f"archived {name}"


def helper(spec: AgentSpec) -> ToolCallAgent:
    return ToolCallAgent(llm=MODEL, tools=[archive, Terminate()], name="helper", **spec.options)


async def runs_ctx(app: web.Application) -> AsyncIterator[None]:  # unfinished runs resume on entry
    async with Runs(os.environ.get("APP_RUNS", "runs"), agents={"helper": helper}) as app[RUNS]:
        yield
    await MODEL.aclose()  # the app made the model: the app closes it, not its agents


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except AgentfsmError as exc:  # the engine's refusal, in one line: the client's to read
        return web.json_response(
            {"error": str(exc)}, status=404 if isinstance(exc, KeyNotFoundError) else 409
        )


@routes.post("/runs")
async def start(request: web.Request) -> web.Response:
    run_id = await request.app[RUNS].submit((await request.json())["task"], "helper")
    return web.json_response({"run_id": run_id}, status=201)


@routes.get("/runs")
async def listed(request: web.Request) -> web.Response:
    return web.json_response([s.model_dump(mode="json") for s in await request.app[RUNS].list()])


@routes.get("/runs/{id}")
async def status(request: web.Request) -> web.Response:
    return web.json_response(
        (await request.app[RUNS].status(request.match_info["id"])).model_dump(mode="json")
    )


@routes.post("/runs/{id}/approve")
async def decide(request: web.Request) -> web.Response:
    body, run_id, runs = await request.json(), request.match_info["id"], request.app[RUNS]
    if "reject" in body:
        await runs.reject(run_id, body["call_id"], body["reject"])
    else:
        await runs.approve(run_id, body["call_id"])
    return web.json_response({"decided": body["call_id"]})


@routes.post("/runs/{id}/cancel")
async def cancel(request: web.Request) -> web.Response:
    await request.app[RUNS].cancel(request.match_info["id"])
    return web.json_response({"cancelled": request.match_info["id"]})


@routes.get("/runs/{id}/events")
async def events(request: web.Request) -> web.StreamResponse:
    after = int(request.query.get("after") or request.headers.get("Last-Event-ID") or 0)
    feed = request.app[RUNS].events(request.match_info["id"], after=after)  # an unknown run: 404 here
    stream = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await stream.prepare(request)
    async for event in feed:  # a client that goes away ends this loop, never the run
        await stream.write(
            f"id: {event.seq}\nevent: {event.kind}\ndata: {json.dumps(event.to_json())}\n\n".encode()
        )
    return stream


app = web.Application(middlewares=[errors])
app.cleanup_ctx.append(runs_ctx)
app.add_routes(routes)

if __name__ == "__main__":
    web.run_app(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8080")))
