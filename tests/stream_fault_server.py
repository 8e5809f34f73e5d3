"""An OpenAI-compatible server on 127.0.0.1 whose streams misbehave in time or in shape.

Each way is a path of its own, so one server serves a whole test module:
``{base}/{way}/v1/chat/completions``, with `base` from `start`:

- ``trickle``: a chunk of text every `interval` seconds for `trickle_s` seconds: each chunk
  comes well within any read timeout, so only a deadline on the whole call ends it;
- ``stall``: three chunks of text, then nothing, the connection held open;
- ``silent``: the request is read, and nothing is ever sent, not even the headers;
- ``repeat``: a complete stream of one call of ``echo`` whose every delta repeats the name
  (as some servers do), with its arguments in pieces.

Every held stream waits on the server's own event, which `stop` sets before it shuts down, so
no handler outlives the test. `requests` counts the requests per way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from typing import Any

from aiohttp import web

MODEL = "openai/fault-model"
ARGUMENT_PIECES = ('{"te', 'xt": "h', "i", '"}')


def _event(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fault",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "fault-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


class StreamFaultServer:
    def __init__(self, *, interval: float = 0.2, trickle_s: float = 30.0) -> None:
        self.interval = interval
        self.trickle_s = trickle_s
        self.requests: Counter[str] = Counter()
        self.base = ""
        self._stopping = asyncio.Event()
        self._runner: web.AppRunner | None = None

    def url(self, way: str) -> str:
        """The ``api_base`` of one way: ``http://127.0.0.1:PORT/{way}/v1``."""
        return f"{self.base}/{way}/v1"

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/{way}/v1/chat/completions", self._reply)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base = f"http://127.0.0.1:{port}"
        return self.base

    async def stop(self) -> None:
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _hold(self, seconds: float | None = None) -> None:
        """Wait until the server stops (or `seconds` pass)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _reply(self, request: web.Request) -> web.StreamResponse:
        way = request.match_info["way"]
        await request.read()
        self.requests[way] += 1
        if way == "silent":
            await self._hold()
            raise web.HTTPServiceUnavailable()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            if way == "trickle":
                loop = asyncio.get_running_loop()
                ends = loop.time() + self.trickle_s
                while loop.time() < ends and not self._stopping.is_set():
                    await response.write(_event(_chunk({"content": "x"})))
                    await self._hold(self.interval)
            elif way == "stall":
                for _ in range(3):
                    await response.write(_event(_chunk({"content": "x"})))
                await self._hold()
            elif way == "repeat":
                await self._repeat(response)
            else:
                raise web.HTTPNotFound()
            finish = "tool_calls" if way == "repeat" else "stop"
            await response.write(_event(_chunk({}, finish)))
            await response.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, ConnectionError):
            pass  # the client gave up: what the deadline is for
        return response

    @staticmethod
    async def _repeat(response: web.StreamResponse) -> None:
        for number, piece in enumerate(ARGUMENT_PIECES):
            call: dict[str, Any] = {"index": 0, "function": {"name": "echo", "arguments": piece}}
            if number == 0:
                call.update(id="call_echo", type="function")
            await response.write(_event(_chunk({"tool_calls": [call]})))
