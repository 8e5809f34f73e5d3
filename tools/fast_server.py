"""A fast OpenAI-compatible chat-completions server on 127.0.0.1, for the benchmark's HTTP section.

llmock (FastAPI) takes about 7 ms a request, so under load it measures itself,
not the client. This one answers from canned bytes on a bare asyncio protocol
(HTTP/1.1, keep-alive, pipelining), a few µs a request, so what the benchmark
sees is the client's cost. Every POST gets a chat completion: while the
request holds no tool result, one call of ``add`` with ``{"a": 1, "b": 2}``;
once it holds one, the answer ``done``. So an agent with an ``add`` tool runs
one call and answers, and any other agent gets an unknown-tool observation
and then the answer.

    .venv/bin/python tools/fast_server.py [--port 0] [--cpu N] [--delay SECONDS]

prints ``ready PORT`` on stdout once it listens, and serves until killed.
``--cpu`` pins the process to that core, so a client pinned to another one
does not share it. ``--delay`` answers each request that long after it came,
as a model that takes its time would (a real one takes hundreds of ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from typing import Any, cast

__all__ = ["ANSWER", "CALL", "serve"]

_TOOL_RESULT = re.compile(rb'"role"\s*:\s*"tool"')
_HEADERS_END = b"\r\n\r\n"
_LENGTH = re.compile(rb"\r\ncontent-length:\s*(\d+)", re.IGNORECASE)


def completion(message: dict[str, Any], finish_reason: str) -> bytes:
    """One whole HTTP response carrying a chat completion of `message`."""
    body = json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1_764_547_200,
            "model": "bench-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
        }
    ).encode()
    head = (
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n"
    )
    return head.encode() + body


CALL = completion(
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_bench",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
            }
        ],
    },
    "tool_calls",
)
ANSWER = completion({"role": "assistant", "content": "done"}, "stop")


class _Connection(asyncio.Protocol):
    """Reads whole requests (headers, then Content-Length bytes) and writes a canned reply to each."""

    def __init__(self, delay: float = 0.0) -> None:
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.delay = delay

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        while True:
            end = buffer.find(_HEADERS_END)
            if end < 0:
                return
            match = _LENGTH.search(buffer, 0, end + 2)
            length = int(match.group(1)) if match else 0
            total = end + 4 + length
            if len(buffer) < total:
                return
            body = bytes(buffer[end + 4 : total])
            del buffer[:total]
            assert self.transport is not None
            answer = ANSWER if _TOOL_RESULT.search(body) else CALL
            if self.delay:  # the replies of pipelined requests keep their order: same delay, FIFO timers
                asyncio.get_running_loop().call_later(self.delay, self._write, answer)
            else:
                self.transport.write(answer)

    def _write(self, answer: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(answer)


async def serve(port: int = 0, delay: float = 0.0) -> asyncio.Server:
    """Listen on 127.0.0.1 (`port` 0: any free one), answering `delay` s after each request;
    the caller closes the server."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: _Connection(delay), "127.0.0.1", port, backlog=4096)


async def _main(port: int, delay: float) -> None:
    server = await serve(port, delay)
    print("ready", server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="the port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--cpu", type=int, default=None, help="pin the server to this core")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer (default: 0)")
    args = parser.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    try:
        import uvloop
    except ImportError:
        asyncio.run(_main(args.port, args.delay))
    else:
        uvloop.run(_main(args.port, args.delay))
    return 0


if __name__ == "__main__":
    sys.exit(main())
