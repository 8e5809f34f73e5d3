"""The benchmark's stream section: one reply of 100,000 deltas (10,000 with --quick), per client.

A server of its own in another process streams one chat completion of that many one-character
chunks from bytes built in advance (a few ms), so what is measured is the client. Side by side,
one call each: `OpenAICompatible` (agentfsm's native adapter: aiohttp and its own assembler),
`LLM` (agentfsm through litellm), and bare ``litellm.acompletion(stream=True)`` iterated with
nothing else done (litellm's own floor: the openai SDK's parsing and litellm's per-chunk work and
its own two assemblies of the stream). For each: wall time, this process's CPU (threads
included) and the event loop's longest stall, seen by a ticker every 5 ms: agentfsm's
assembly runs off the loop, litellm's per-chunk work cannot.

    .venv/bin/python tools/bench.py --only stream [--quick] [--json]
    .venv/bin/python tools/bench_stream.py --serve 1000     # the server alone: prints ``ready PORT``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

PYTHON = sys.executable
MODEL = "openai/bench-stream"
DELTAS = 100_000
QUICK_DELTAS = 10_000


def stream_bytes(deltas: int) -> bytes:
    """The whole server-sent stream: `deltas` chunks of one character, the finish, usage, [DONE]."""

    def event(choices: list[Any], **more: Any) -> bytes:
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bench-stream"}
        return b"data: " + json.dumps({**chunk, "choices": choices, **more}).encode() + b"\n\n"

    piece = event([{"index": 0, "delta": {"content": "a"}, "finish_reason": None}])
    usage = {"prompt_tokens": 1, "completion_tokens": deltas, "total_tokens": deltas + 1}
    return b"".join(
        (
            piece * deltas,
            event([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
            event([], usage=usage),
            b"data: [DONE]\n\n",
        )
    )


async def serve(deltas: int) -> None:
    """Serve the stream on 127.0.0.1 until killed; prints ``ready PORT`` once listening."""
    from aiohttp import web

    body = stream_bytes(deltas)

    async def reply(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for start in range(0, len(body), 1 << 16):
            await response.write(body[start : start + (1 << 16)])
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", reply)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    print("ready", port, flush=True)
    await asyncio.Event().wait()


@contextlib.contextmanager
def stream_server(deltas: int) -> Iterator[str]:
    """The server in a process of its own; yields its base URL, and stops it."""
    server = subprocess.Popen([PYTHON, __file__, "--serve", str(deltas)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        ready = server.stdout.readline().split()
        if ready[:1] != ["ready"]:
            raise RuntimeError(f"tools/bench_stream.py --serve did not start: {ready!r}")
        yield f"http://127.0.0.1:{ready[1]}/v1"
    finally:
        server.terminate()
        server.wait(timeout=10)


async def measured(call: Callable[[], Awaitable[int]]) -> dict[str, float]:
    """Wall s, CPU s and the loop's longest stall (ms) of one `call`, which returns the text's length."""
    stall = 0.0
    running = True

    async def ticker() -> None:
        nonlocal stall
        loop = asyncio.get_running_loop()
        while running:
            before = loop.time()
            await asyncio.sleep(0.005)
            stall = max(stall, loop.time() - before - 0.005)

    ticking = asyncio.create_task(ticker())
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        length = await call()
    finally:
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        running = False
        await ticking
    return {"wall_s": wall, "cpu_s": cpu, "loop_stall_ms": stall * 1e3, "text_chars": float(length)}


async def stream(quick: bool, deltas: int | None = None) -> dict[str, Any]:
    """Each client's figures for one reply of `deltas` deltas."""
    from agentfsm import LLM, Message, OpenAICompatible
    from agentfsm.model.llm import load_litellm

    count = deltas or (QUICK_DELTAS if quick else DELTAS)
    litellm = await asyncio.to_thread(load_litellm)
    asked = [Message.user_message("stream")]
    out: dict[str, Any] = {"deltas": count, "clients": {}}
    with stream_server(count) as base:
        options: dict[str, Any] = {"api_base": base, "api_key": "bench", "stream": True, "timeout": 600}
        native = OpenAICompatible(MODEL, **options)
        through_litellm = LLM(MODEL, **options, retry_timeout=None)

        async def agentfsm_call(model: Any) -> int:
            reply = await model.ask_tool(asked)
            return len(reply.content or "")

        async def bare() -> int:
            chunks = await litellm.acompletion(
                model=MODEL,
                messages=[{"role": "user", "content": "stream"}],
                api_base=base,
                api_key="bench",
                stream=True,
                stream_options={"include_usage": True},
                timeout=600,
            )
            length = 0
            async for chunk in chunks:
                if chunk.choices and chunk.choices[0].delta.content:
                    length += len(chunk.choices[0].delta.content)
            return length

        await agentfsm_call(OpenAICompatible(MODEL, **{**options, "api_base": base}))  # warm: imports
        runners: dict[str, Callable[[], Awaitable[int]]] = {
            "OpenAICompatible": lambda: agentfsm_call(native),
            "LLM (litellm)": lambda: agentfsm_call(through_litellm),
            "bare litellm stream": bare,
        }
        for name, run in runners.items():
            out["clients"][name] = await measured(run)
        await native.aclose()
    return out


def lines(data: dict[str, Any], out: list[str]) -> None:
    """The section's table."""
    clients = data["clients"]
    out.append(f"Streaming: one reply of {data['deltas']:,} deltas, one call per client")
    out.append(f"  {'client':<22} {'wall s':>8} {'CPU s':>8} {'loop stall ms':>14} {'x native':>9}")
    native = clients.get("OpenAICompatible", {}).get("wall_s")
    for name, figures in clients.items():
        ratio = f"{figures['wall_s'] / native:9.1f}" if native else f"{'-':>9}"
        out.append(
            f"  {name:<22} {figures['wall_s']:8.2f} {figures['cpu_s']:8.2f} "
            f"{figures['loop_stall_ms']:14.1f} {ratio}"
        )
    ours, bare = clients.get("LLM (litellm)"), clients.get("bare litellm stream")
    if ours and bare:
        out.append(
            f"  agentfsm around litellm: {ours['wall_s'] - bare['wall_s']:+.2f} s wall, "
            f"{ours['cpu_s'] - bare['cpu_s']:+.2f} s CPU over bare litellm (its floor)"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", type=int, metavar="DELTAS", help="run the server alone")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.serve is not None:
        asyncio.run(serve(args.serve))
        return 0
    data = asyncio.run(stream(args.quick))
    table: list[str] = []
    lines(data, table)
    print(json.dumps(data, indent=2) if args.json else "\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
