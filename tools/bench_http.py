"""The benchmark's HTTP section: what a model call costs the client, against a server that costs nothing.

`tools/fast_server.py` runs in its own process pinned to one core, the client
on the other, so the client's CPU time per request is its own. Measured:

- CPU per request (process CPU time / requests; every thread counts: litellm
  runs its sync half in a thread pool) at 1, 100 and 1,000 concurrent callers,
  for `LLM` (litellm), the native `OpenAICompatible` model (when its module
  imports), the openai SDK's `AsyncOpenAI` and a bare aiohttp loop, all sending
  the same request (a system prompt, a task, one tool);
- the wall time of 1,000 concurrent one-call agent runs (a call of ``add``,
  then the answer) for each model, against a bare aiohttp loop doing the same;
- one step (a model call that answers) at 10 / 1,000 / 10,000 messages of
  history through `LLM` with the token check before sending on (a
  `max_input_tokens` far above the history) and off, in interleaved rounds;
- the first model call in a fresh process (import, build, one call) for each
  model, and a trivial ``agentfsm run`` end to end, as subprocesses.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import importlib
import json
import logging
import os
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import bench_peers

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
MODEL = "openai/bench-model"
NATIVE = ("agentfsm.model.openai_compatible", "OpenAICompatible")
NATIVE_NAME = NATIVE[1]
LEVELS = (1, 100, 1_000)
RUNS = 1_000
TASK = "add 1 and 2"

Call = Callable[[], Awaitable[Any]]
Timing = Callable[[dict[str, Call], int, int], Awaitable[dict[str, float]]]


# -- the server and the cores ------------------------------------------------------------------


@contextlib.contextmanager
def fast_server(delay: float = 0.0) -> Iterator[str]:
    """The fast server in its own process on the second core, this process on the first; yields the
    base URL. Without two cores nothing is pinned (the figures then include the server's share).
    `delay`: seconds the server waits before each answer (a model's time to reply)."""
    pin = hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2
    cores = sorted(os.sched_getaffinity(0)) if pin else []
    argv = [PYTHON, str(Path(__file__).with_name("fast_server.py"))]
    if delay:
        argv += ["--delay", str(delay)]
    server = subprocess.Popen(
        [*argv, "--cpu", str(cores[1])] if pin else argv, stdout=subprocess.PIPE, text=True
    )
    before = os.sched_getaffinity(0) if pin else set()
    try:
        assert server.stdout is not None
        ready = server.stdout.readline().split()
        if ready[:1] != ["ready"]:
            raise RuntimeError(f"tools/fast_server.py did not start: {ready!r}")
        if pin:
            os.sched_setaffinity(0, {cores[0]})
        yield f"http://127.0.0.1:{ready[1]}/v1"
    finally:
        if pin:
            os.sched_setaffinity(0, before)
        server.terminate()
        server.wait(timeout=10)


def native_class() -> Any:
    """`OpenAICompatible`, or None where its module is not there (or does not import)."""
    try:
        return getattr(importlib.import_module(NATIVE[0]), NATIVE[1])
    except Exception:
        return None


def models(base: str, **options: Any) -> dict[str, Any]:
    """The agentfsm models under test, by name: `LLM` and, when available, the native one."""
    from agentfsm import LLM

    options = {"api_base": base, "api_key": "bench", "timeout": 120, **options}
    found: dict[str, Any] = {"LLM (litellm)": LLM(MODEL, **options)}
    native = native_class()
    if native is not None:
        found[NATIVE_NAME] = native(MODEL, **options)
    return found


async def close(under_test: dict[str, Any]) -> None:
    """Close the models that hold connections (the native model's session)."""
    for model in under_test.values():
        aclose = getattr(model, "aclose", None)
        if aclose is not None:
            await aclose()


def _request_parts() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from agentfsm import ToolCollection, tool

    messages = [{"role": "system", "content": bench_peers.SYSTEM}, {"role": "user", "content": TASK}]
    return messages, ToolCollection(tool(bench_peers.add)).to_params()


# -- CPU per request ---------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def callers(base: str) -> Any:
    """One request (the same one) through each client, by name; the clients are closed after."""
    import aiohttp
    from openai import AsyncOpenAI

    from agentfsm import Message

    wire, tools = _request_parts()
    system, user = [Message.system_message(bench_peers.SYSTEM)], [Message.user_message(TASK)]
    url = f"{base}/chat/completions"
    body = {"model": "bench-model", "messages": wire, "tools": tools}
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=RUNS))
    sdk = AsyncOpenAI(base_url=base, api_key="bench", max_retries=0, timeout=120)

    async def bare() -> Any:
        async with session.post(url, json=body) as response:
            return (await response.json())["choices"][0]["message"]

    async def openai_sdk() -> Any:
        return await sdk.chat.completions.create(model="bench-model", messages=wire, tools=tools)  # type: ignore[arg-type]

    calls: dict[str, Call] = {"bare aiohttp": bare, "openai SDK": openai_sdk}
    under_test = models(base)
    for name, model in under_test.items():
        calls[name] = functools.partial(model.ask_tool, user, system_msgs=system, tools=tools)
    try:
        yield calls
    finally:
        await session.close()
        await sdk.close()
        await close(under_test)


async def cpu_per_request(call: Call, concurrency: int, requests: int) -> dict[str, float]:
    """Process CPU ms and wall ms per request, `concurrency` callers sharing `requests` requests."""
    each = max(1, requests // concurrency)

    async def caller() -> None:
        for _ in range(each):
            await call()

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    done = each * concurrency
    return {
        "cpu_ms": (time.process_time() - cpu) / done * 1e3,
        "wall_ms": (time.perf_counter() - wall) / done * 1e3,
        "requests": done,
    }


async def cpu_section(base: str, quick: bool) -> dict[str, dict[str, dict[str, float]]]:
    requests = {1: 50, 100: 200, 1_000: 1_000} if quick else {1: 1_000, 100: 2_000, 1_000: 3_000}
    out: dict[str, dict[str, dict[str, float]]] = {}
    async with callers(base) as calls:
        # litellm last: it goes on working in threads of its own (its logging worker) after its
        # calls return, and the CPU time measured is the process's
        for name in sorted(calls, key=lambda name: name == "LLM (litellm)"):
            call = calls[name]
            for _ in range(20):  # warm: imports, connection pools, first-call paths
                await call()
            out[name] = {}
            for c in LEVELS:
                await settled()
                out[name][str(c)] = await cpu_per_request(call, c, requests[c])
    return out


async def settled(quiet_ms: float = 1.0, most_s: float = 10.0) -> None:
    """Wait until the process's threads stop using CPU (at most `most_s` seconds), so that one
    client's leftover work is not counted against the next."""
    deadline = time.monotonic() + most_s
    while time.monotonic() < deadline:
        before = time.process_time()
        await asyncio.sleep(0.1)
        if (time.process_time() - before) * 1e3 < quiet_ms:
            return


# -- 1,000 concurrent runs ---------------------------------------------------------------------


async def concurrent_runs(base: str, count: int) -> dict[str, Any]:
    """`count` one-call runs at once for each model, and for a bare aiohttp loop doing the same."""
    import aiohttp

    from agentfsm import ToolCallAgent, ToolCollection, tool

    tools = ToolCollection(tool(bench_peers.add))
    url = f"{base}/chat/completions"

    async def bare_run(session: aiohttp.ClientSession) -> Any:
        messages, specs = _request_parts()
        for _ in range(30):
            body = {"model": "bench-model", "messages": messages, "tools": specs}
            async with session.post(url, json=body) as response:
                reply = (await response.json())["choices"][0]["message"]
            messages.append(reply)
            if not reply.get("tool_calls"):
                return reply["content"]
            for call in reply["tool_calls"]:
                result = bench_peers.add(**json.loads(call["function"]["arguments"]))
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": str(result)})
        raise AssertionError("no final answer")

    def agent_run(llm: Any) -> Call:
        async def run() -> Any:
            result = await ToolCallAgent(llm=llm, tools=tools, next_step_prompt=None).run(TASK)
            assert result.stop_reason == "final_answer", result
            return result

        return run

    walls: dict[str, float] = {}
    failed: dict[str, str] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=count)) as session:
        runs: dict[str, Call] = {"bare aiohttp": functools.partial(bare_run, session)}
        # retries as a client under load needs them: a loopback server under 1,000 connections may drop some
        under_test = models(base, max_attempts=3, backoff_base=0.05)
        for name, llm in under_test.items():
            runs[name] = agent_run(llm)
        for name in sorted(runs, key=lambda name: name == "LLM (litellm)"):  # litellm last: see cpu_section
            run = runs[name]
            await run()  # warm
            await settled()
            started = time.perf_counter()
            outcomes = await asyncio.gather(*(run() for _ in range(count)), return_exceptions=True)
            walls[name] = time.perf_counter() - started
            errors = [o for o in outcomes if isinstance(o, BaseException)]
            if errors:
                failed[name] = f"{len(errors)} failed; first: {type(errors[0]).__name__}: {errors[0]}"[:300]
        await close(under_test)
    bare = walls["bare aiohttp"]
    return {
        "runs": count,
        "wall_s": walls,
        "to_bare": {name: wall / bare for name, wall in walls.items()},
        "failed": failed,
    }


# -- a step with the token check on and off ----------------------------------------------------


async def check_step(
    base: str, quick: bool, filled_memory: Callable[[int], Any], interleaved: Timing
) -> dict[str, Any]:
    """One step that answers, at 10 / 1,000 / 10,000 messages, through `LLM` and the native model
    with the check on and off (`filled_memory` and `interleaved` are the benchmark's: a full
    memory; median µs in alternating batches). The native model's window (10**6) is under its
    character bound at 10,000 messages, so its tokenizer counts too."""
    from agentfsm import LLM, ToolCallAgent, ToolCollection, tool

    tools = ToolCollection(tool(bench_peers.add))
    options: dict[str, Any] = {"api_base": base, "api_key": "bench", "timeout": 120}
    pairs: dict[str, tuple[Any, Any]] = {
        "": (LLM(MODEL, **options, max_input_tokens=10**9), LLM(MODEL, **options)),
    }
    native = native_class()
    if native is not None:
        pairs["native "] = (native(MODEL, **options, max_input_tokens=10**6), native(MODEL, **options))
    for _, unchecked in pairs.values():
        assert unchecked.input_limit is None  # no window known for this name: nothing is counted
    sizes = (10, 1_000, 10_000)
    step_ms: dict[str, dict[str, float]] = {f"{size} messages": {} for size in sizes}
    for size in sizes:
        rounds, batch = (3, 2) if quick else (9, 10)
        if size < 10_000:
            batch *= 5
        # One adapter at a time, its two runners interleaved: litellm goes on working in a thread
        # after its calls return, which would slow whichever runner came next.
        for prefix, (checked, unchecked) in pairs.items():
            runners: dict[str, Call] = {}
            for label, llm in ((f"{prefix}on", checked), (f"{prefix}off", unchecked)):
                memory = filled_memory(size)
                agent = ToolCallAgent(llm=llm, tools=tools, memory=memory, next_step_prompt=None)
                runners[label] = functools.partial(agent.run, "one more step")
            # Histories of 10,000 messages make each full collection a pause of tens of ms that
            # lands on whichever step allocates past the threshold: out of the collector's sight,
            # they no longer turn that into noise between the two runners.
            gc.collect()
            gc.freeze()
            try:
                us = await interleaved(runners, rounds, batch)
            finally:
                gc.unfreeze()
            step_ms[f"{size} messages"].update({label: value / 1e3 for label, value in us.items()})
            del runners
            await settled()
    for checked, unchecked in pairs.values():
        await close({"on": checked, "off": unchecked})
    ratios = {size: v["on"] / v["off"] for size, v in step_ms.items()}
    native_ratios = {
        size: v["native on"] / v["native off"] for size, v in step_ms.items() if "native on" in v
    }
    return {"step_ms": step_ms, "ratio_on_to_off": ratios, "native_ratio_on_to_off": native_ratios}


# -- fresh processes ---------------------------------------------------------------------------


_FIRST_CALL = """
import asyncio, importlib, sys
from agentfsm import Message, ToolCollection, tool
module, name, base = sys.argv[1:4]
model = getattr(importlib.import_module(module), name)({model!r}, api_base=base, api_key="bench")
def add(a: int, b: int) -> int:
    '''Add two integers.'''
    return a + b
tools = ToolCollection(tool(add)).to_params()
reply = asyncio.run(model.ask_tool([Message.user_message("add")], tools=tools))
assert reply.tool_calls, reply
"""


def _timed(argv: list[str], samples: int) -> dict[str, Any]:
    times: list[float] = []
    for _ in range(samples):
        started = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120)
        times.append(time.perf_counter() - started)
        if proc.returncode != 0:
            return {"error": f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"}
    return {"s": statistics.median(times), "samples": samples}


def fresh_processes(base: str, quick: bool) -> dict[str, Any]:
    samples = 1 if quick else 5
    code = textwrap.dedent(_FIRST_CALL.format(model=MODEL))
    first: dict[str, Any] = {
        "LLM (litellm)": _timed([PYTHON, "-c", code, "agentfsm.model.llm", "LLM", base], samples)
    }
    if native_class() is None:
        first[NATIVE_NAME] = {"error": "not available"}
    else:
        first[NATIVE_NAME] = _timed([PYTHON, "-c", code, *NATIVE, base], samples)
    cli = [str(Path(PYTHON).parent / "agentfsm"), "run", TASK, "--model", MODEL, "--api-base", base]
    cli += ["--api-key", "bench", "--json"]
    return {"first_call": first, "cli_run": _timed(cli, samples)}


# -- the section -------------------------------------------------------------------------------


async def http(quick: bool, filled_memory: Callable[[int], Any], interleaved: Timing) -> dict[str, Any]:
    # litellm warns on every request that waits for its per-host pool (500 slots): said once, in the table
    logging.getLogger("LiteLLM").setLevel(logging.ERROR)
    with fast_server() as base:
        return {
            "pinned": len(os.sched_getaffinity(0)) == 1,
            "native": "available" if native_class() is not None else "not available",
            "cpu_per_request": await cpu_section(base, quick),
            "concurrent_runs": await concurrent_runs(base, 200 if quick else RUNS),
            "check_step": await check_step(base, quick, filled_memory, interleaved),
            **fresh_processes(base, quick),
        }


# -- the report --------------------------------------------------------------------------------


def _goal(label: str, value: float | None, limit: float, unit: str = "x") -> str:
    if value is None:
        return f"  goal: {label} <= {limit:g}{unit}: not available"
    verdict = "met" if value <= limit else "NOT met"
    return f"  goal: {label} <= {limit:g}{unit}: {value:.2f}{unit}, {verdict}"


def lines(h: dict[str, Any], out: list[str]) -> None:
    """The section's table, with the goals of issue 14 beside the figures."""
    cpu = h["cpu_per_request"]
    pinned = "client and server pinned to one core each" if h["pinned"] else "not pinned: one core"
    out.append(f"The model path over HTTP (fast loopback server, {pinned})")
    out.append(f"  CPU per request (ms){'c=1':>12}{'c=100':>10}{'c=1,000':>10}")
    for name in ("bare aiohttp", "openai SDK", "LLM (litellm)", NATIVE_NAME):
        if name in cpu:
            row = "".join(f"{cpu[name][str(c)]['cpu_ms']:>10.3f}" for c in LEVELS)
            out.append(f"  {name:<20}  {row}")
        else:
            out.append(f"  {name:<20}  not available (agentfsm.model.openai_compatible does not import)")
    bare = cpu["bare aiohttp"]
    for name in ("LLM (litellm)", NATIVE_NAME):
        if name in cpu:
            ratios = " / ".join(
                f"{cpu[name][str(c)]['cpu_ms'] / bare[str(c)]['cpu_ms']:.1f}x" for c in LEVELS
            )
            out.append(f"  {name} / bare aiohttp: {ratios}")
    for c in (1, 1_000):
        value = cpu[NATIVE_NAME][str(c)]["cpu_ms"] / bare[str(c)]["cpu_ms"] if NATIVE_NAME in cpu else None
        out.append(_goal(f"native CPU per request / bare aiohttp at c={c:,}", value, 2))
    runs = h["concurrent_runs"]
    out.append(f"  {runs['runs']:,} concurrent one-call runs (wall s)")
    for name, wall in runs["wall_s"].items():
        out.append(f"    {name:<20}{wall:>8.2f} s  {runs['to_bare'][name]:>6.1f}x the bare loop")
    out.append("    (litellm's aiohttp transport allows 500 connections per host; more runs queue)")
    for name, why in runs["failed"].items():
        out.append(f"    {name}: {why}")
    out.append(_goal(f"native {runs['runs']:,} runs / bare loop", runs["to_bare"].get(NATIVE_NAME), 2))
    step = h["check_step"]
    out.append("  One step (a call that answers), token check on and off (ms, median)")
    for size, v in step["step_ms"].items():
        ratio = step["ratio_on_to_off"][size]
        out.append(f"    LLM     {size:<16}{v['on']:>9.2f} on{v['off']:>9.2f} off   ratio {ratio:.2f}")
        if "native on" in v:
            ratio = step["native_ratio_on_to_off"][size]
            on, off = v["native on"], v["native off"]
            out.append(f"    native  {size:<16}{on:>9.2f} on{off:>9.2f} off   ratio {ratio:.2f}")
    out.append(_goal("LLM: a step with the check / without at 10,000 messages",
                     step["ratio_on_to_off"]["10000 messages"], 1.1))  # fmt: skip
    if step.get("native_ratio_on_to_off"):
        out.append(_goal("native: a step with the check / without at 10,000 messages",
                         step["native_ratio_on_to_off"]["10000 messages"], 1.1))  # fmt: skip
    out.append("  Fresh processes (s, median): the first model call (import, build, one call)")
    for name, figure in h["first_call"].items():
        out.append(f"    {name:<20}{_seconds(figure)}")
    out.append(f"    {'agentfsm run (CLI)':<20}{_seconds(h['cli_run'])}")
    native = h["first_call"].get(NATIVE_NAME, {})
    out.append(_goal("native first call", native.get("s"), 0.5, " s"))
    out.append(_goal("a trivial `agentfsm run`", h["cli_run"].get("s"), 0.7, " s"))


def _seconds(figure: dict[str, Any]) -> str:
    return f"{figure['s']:>8.2f} s" if "s" in figure else f"  {figure['error']}"
