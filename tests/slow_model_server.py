"""An OpenAI-compatible model on 127.0.0.1 that takes `delay` seconds per reply and counts what it serves.

The script is tools/fast_server.py's: while a request holds no tool result, one
call of ``add`` with ``{"a": 1, "b": 2}``; once it holds one, the answer
``done``. It counts requests in flight (and the most at once) and requests per
task (the run's first user message), so a test can show that a queue's
concurrency limit held and that no run was lost or run twice.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

from aiohttp import web
from loopback_chat_server import LoopbackChatServer

CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
    ],
}
ANSWER = {"role": "assistant", "content": "done"}


class SlowModelServer(LoopbackChatServer):
    def __init__(self, delay: float = 0.1) -> None:
        super().__init__()
        self.delay = delay
        self.in_flight = 0
        self.most_in_flight = 0
        self.requests: Counter[str] = Counter()

    async def _reply(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        messages = body.get("messages", [])
        task = next((m.get("content") for m in messages if m.get("role") == "user"), "")
        self.requests[str(task)] += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        answered = any(m.get("role") == "tool" for m in messages)
        message, reason = (ANSWER, "stop") if answered else (CALL, "tool_calls")
        reply = {
            "id": "chatcmpl-slow",
            "object": "chat.completion",
            "created": 1_764_547_200,
            "model": "slow-model",
            "choices": [{"index": 0, "message": message, "finish_reason": reason}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
        }
        return web.Response(text=json.dumps(reply), content_type="application/json")
