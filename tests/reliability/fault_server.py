"""An OpenAI-compatible chat server on 127.0.0.1 whose faults follow a plan per conversation.

llmock's scenarios are global: a fault goes to whichever request comes next, so with many runs
at once nobody can say in advance which run a fault hits. Here each run's first user message
names its plan (``run-17``), and the plan lists, request by request, what the server does: a
status code (with an optional ``Retry-After``), a delay longer than the client's timeout, or the
reply. The server keeps a journal of every request by run, so a test can count attempts as the
server saw them, which is what proves no hidden retry layer multiplies them.

Plain asyncio streams, HTTP/1.1 with keep-alive: no dependency, and fast enough that under load
it measures the client, not itself.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SERVER_TASK", "Fault", "FaultServer", "Plan", "Raw", "Reply"]

SERVER_TASK = "fault-server-connection"


@dataclass(frozen=True)
class Fault:
    """Answer one request with `status` (and `Retry-After: retry_after`), or sleep `delay` seconds."""

    status: int = 503
    retry_after: float | None = None
    delay: float = 0.0


@dataclass(frozen=True)
class Raw:
    """Answer one request with exactly these bytes (a broken body, an HTML page, a wrong shape)."""

    body: bytes
    status: int = 200


@dataclass(frozen=True)
class Reply:
    """Answer one request: text, or one tool call."""

    content: str | None = None
    tool: tuple[str, dict[str, Any]] | None = None


@dataclass
class Plan:
    """What the server does for each request of one run, in order; past the end, the last step again."""

    steps: list[Fault | Raw | Reply]
    served: int = 0

    def next(self) -> Fault | Raw | Reply:
        step = self.steps[min(self.served, len(self.steps) - 1)]
        self.served += 1
        return step


@dataclass
class FaultServer:
    """Serve `plans` (by run name) on 127.0.0.1; `journal[run]` counts the requests each run made."""

    plans: dict[str, Plan]
    journal: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    connections: int = 0
    open_connections: int = 0
    _server: asyncio.Server | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    async def __aenter__(self) -> FaultServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            task.set_name(SERVER_TASK)  # a connection the client keeps alive is no task it leaked
        self.connections += 1
        self.open_connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(re.search(rb"(?i)content-length:\s*(\d+)", head).group(1))  # type: ignore[union-attr]
                body = json.loads(await reader.readexactly(length))
                status, headers, payload = await self._answer(body)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
                writer.write(
                    f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(data)}\r\n{extra}\r\n".encode()
                    + data
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client closed the connection, or the test's loop is closing
        finally:
            self.open_connections -= 1
            writer.close()

    async def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, str], dict[str, Any] | bytes]:
        first = next(m["content"] for m in body["messages"] if m["role"] == "user")
        run = first.split()[0]
        self.journal[run] += 1
        step = self.plans[run].next()
        if isinstance(step, Raw):
            return step.status, {}, step.body
        if isinstance(step, Fault):
            if step.delay:
                await asyncio.sleep(step.delay)
            headers = {"retry-after": f"{step.retry_after:g}"} if step.retry_after is not None else {}
            return step.status, headers, {"error": {"message": f"planned {step.status}", "type": "fault"}}
        message: dict[str, Any] = {"role": "assistant", "content": step.content}
        if step.tool is not None:
            name, arguments = step.tool
            number = self.journal[run]
            message["tool_calls"] = [
                {
                    "id": f"call_{number}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ]
        return (
            200,
            {},
            {
                "id": f"chatcmpl-{run}-{self.journal[run]}",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "fault-model"),
                "choices": [
                    {"index": 0, "message": message, "finish_reason": "tool_calls" if step.tool else "stop"}
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            },
        )
