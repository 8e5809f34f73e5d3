"""An OpenAI-compatible model on 127.0.0.1 for the example web app (`examples/web_app.py`).

Each run's task says what the model does: ``archive NAME`` calls the `archive` tool (which needs
approval), ``note NAME`` answers at once, ``slow NAME`` answers after `slow_s` seconds (a run a kill
can land in). After a tool's result it answers ``done NAME``. Stateless, so a restarted app's
resumed runs get the same answers.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web
from loopback_chat_server import LoopbackChatServer

__all__ = ["AppModel"]


class AppModel(LoopbackChatServer):
    def __init__(self, slow_s: float = 5.0) -> None:
        super().__init__()
        self.slow_s = slow_s
        self.requests = 0

    async def _reply(self, request: web.Request) -> web.Response:
        self.requests += 1
        messages = (await request.json())["messages"]
        task = next(str(m["content"]) for m in messages if m["role"] == "user")
        verb, _, name = task.partition(" ")
        message: dict[str, Any] = {"role": "assistant", "content": f"done {name}"}
        if not any(m["role"] == "tool" for m in messages):
            if verb == "archive":
                call = {"name": "archive", "arguments": json.dumps({"name": name})}
                message = {"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"call_{name}", "type": "function", "function": call}
                ]}  # fmt: skip
            elif verb == "slow":
                await asyncio.sleep(self.slow_s)
        body = {
            "id": "chatcmpl-app",
            "object": "chat.completion",
            "model": "helper",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
        return web.json_response(body)
