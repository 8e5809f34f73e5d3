"""Twelve calls at once to one `agentfsm mcp-serve` process, over real MCP (streamable HTTP on
127.0.0.1 from twelve clients, and stdio from one client with twelve calls in flight), on a model
server of the test's own whose replies end at different times: every call answers, each with its
own run's answer. The runs share one model per agent name (`OpenAICompatible`, one aiohttp
session per loop); a run that ends must not close what the others still use."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters
from mcp.client import Client
from mcp.client.stdio import stdio_client
from staggered_model_server import StaggeredModel
from test_mcp_serve import _serving_http, _text

pytestmark = pytest.mark.usefixtures("clean_env")

CALLS = 12


@pytest.fixture
async def staggered() -> AsyncIterator[StaggeredModel]:
    model = StaggeredModel()
    await model.start()
    try:
        yield model
    finally:
        await model.stop()


def _flags(model: StaggeredModel) -> list[str]:
    return ["--model", "openai/staggered", "--api-base", model.base, "--api-key", "k", "--max-steps", "4"]


def _check_all_answered(results: list[Any], model: StaggeredModel) -> None:
    failed = [(n, _text(r)) for n, r in enumerate(results) if r.is_error]
    assert failed == [], failed
    outputs = [r.structured_content["output"] for r in results]
    assert outputs == [f"answer {n}" for n in range(CALLS)]
    assert {r.structured_content["stop_reason"] for r in results} == {"final_answer"}
    assert len({r.structured_content["run_id"] for r in results}) == CALLS
    assert sorted(model.served) == sorted(list(range(CALLS)) * 2)  # two requests a run, none retried


async def test_twelve_clients_at_once_over_http_all_get_their_answers(
    staggered: StaggeredModel, clean_env: Path
) -> None:
    async with _serving_http(_flags(staggered), clean_env) as (url, _), AsyncExitStack() as clients:
        connected = [await clients.enter_async_context(Client(url)) for _ in range(CALLS)]
        results = await asyncio.gather(
            *(client.call_tool("run_agent", {"task": f"task {n}"}) for n, client in enumerate(connected))
        )
    _check_all_answered(list(results), staggered)


@asynccontextmanager
async def _stdio_client(flags: list[str], cwd: Path, errlog: Any) -> AsyncIterator[Client]:
    """`mcp-serve FLAGS` over stdio, in the handshake's revision, its stderr in `errlog`."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "agentfsm", "mcp-serve", *flags], cwd=cwd
    )
    async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
        yield client


async def test_twelve_calls_at_once_over_stdio_all_get_their_answers(
    staggered: StaggeredModel, clean_env: Path
) -> None:
    with open(clean_env / "serve.log", "w+") as errlog:
        async with _stdio_client(_flags(staggered), clean_env, errlog) as client:
            results = await asyncio.gather(
                *(client.call_tool("run_agent", {"task": f"task {n}"}) for n in range(CALLS))
            )
        errlog.seek(0)
        log = errlog.read()
    assert "Session is closed" not in log
    _check_all_answered(list(results), staggered)
