"""A real model over real HTTP: `OpenAICompatible` against a tiny OpenAI-compatible server on 127.0.0.1.

The server stands in for vLLM, llama.cpp or OpenAI itself: it answers the first request with a 503
(the model retries it), then asks for a tool call, then gives the final answer.
"""

import asyncio
import socket
from typing import Any

from aiohttp import web

from agentfsm import LLMRetry, OpenAICompatible, Terminate, ToolCallAgent, tool
from agentfsm.run.events import AgentEvent

ADD = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
REPLIES: list[dict[str, Any]] = [
    {"role": "assistant", "content": None, "tool_calls": [ADD]},
    {"role": "assistant", "content": "2 + 3 is 5."},
]


async def chat_completions(request: web.Request) -> web.Response:
    body = await request.json()
    seen = request.app["seen"]
    seen.append(body)
    if len(seen) == 1:  # a busy server: the client waits as its Retry-After says, then tries again
        return web.json_response(
            {"error": {"message": "overloaded"}}, status=503, headers={"Retry-After": "0"}
        )
    print(
        f"server: model={body['model']} messages={len(body['messages'])} tools={len(body.get('tools', []))}"
        f" temperature={body['temperature']} max_tokens={body['max_tokens']} seed={body['seed']}"
        f" X-Team={request.headers['X-Team']} authorization={request.headers.get('Authorization')}"
    )
    message = REPLIES[len(seen) - 2]
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    usage = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}
    return web.json_response({"object": "chat.completion", "choices": [choice], "usage": usage})


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def on_event(event: AgentEvent) -> None:
    if isinstance(event, LLMRetry):
        print(
            f"retry: attempt {event.attempt} failed with HTTP {event.status_code}, next in {event.wait_s:g} s"
        )


async def main() -> None:
    app = web.Application()
    app["seen"] = []
    app.router.add_post("/v1/chat/completions", chat_completions)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # a free port on this machine only
    await web.SockSite(runner, sock).start()
    port = sock.getsockname()[1]

    llm = OpenAICompatible(
        "openai/gpt-4o-mini",  # the name the server is sent is "gpt-4o-mini"; the price map knows it
        api_base=f"http://127.0.0.1:{port}/v1",  # no key: a server of your own is sent none
        timeout=10,  # each attempt
        max_attempts=3,  # tries of a request that fails transiently (429, 5xx, timeouts, connections)
        token_budget=50_000,  # what one run may spend, input and output
        extra={"extra_headers": {"X-Team": "docs"}, "seed": 7},  # a header, and a field of the body
    )
    agent = ToolCallAgent(llm=llm, tools=[add, Terminate()])
    agent.on_event(on_event)
    result = await agent.run("what is 2 + 3?")
    print(result.stop_reason, repr(result.output))
    used = result.usage  # cost_usd from the price map (None for a model it does not know)
    print(f"usage: {used.llm_calls} calls, {used.total_tokens} tokens, ${used.cost_usd:.6f}")

    await llm.aclose()  # the model's connections: its maker closes them
    await runner.cleanup()


asyncio.run(main())
