"""An OpenAI-compatible model on 127.0.0.1 whose replies end at different times, by task.

For concurrency tests of a model shared by many runs: each run is ``task N`` (its first user
message), and the runs overlap and end one after another, so the later ones still have a
request to make when the earlier ones end (and clean up).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from aiohttp import web
from loopback_chat_server import LoopbackChatServer

__all__ = ["StaggeredModel"]


class StaggeredModel(LoopbackChatServer):
    """An OpenAI-compatible model on 127.0.0.1 whose run for ``task N`` takes two requests, each
    answered after ``0.1 + step * N`` seconds: first a call of a tool the agent does not have
    (the model reads that it is unknown), then the answer ``answer N``. So the runs overlap,
    and end one after another while the later ones still have a request to make."""

    def __init__(self, step: float = 0.06) -> None:
        super().__init__()
        self.step = step
        self.served: list[int] = []

    async def _reply(self, request: web.Request) -> web.Response:
        messages = (await request.json())["messages"]
        task = next(str(m["content"]) for m in messages if m["role"] == "user")
        found = re.search(r"task (\d+)", task)
        assert found is not None, task
        number = int(found.group(1))
        await asyncio.sleep(0.1 + self.step * number)
        self.served.append(number)
        if any(m["role"] == "tool" for m in messages):
            message: dict[str, Any] = {"role": "assistant", "content": f"answer {number}"}
        else:
            call = {"id": "call_1", "type": "function", "function": {"name": "look", "arguments": "{}"}}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
        body = {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": 1_764_547_200,
            "model": "staggered",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
        }
        return web.Response(text=json.dumps(body), content_type="application/json")
