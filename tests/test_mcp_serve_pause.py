"""A run under `agentfsm mcp-serve --pause-timeout` that waits for an approval nobody gives ends at
its timeout, on a timer of its own, on both protocol paths, and its agent is released: the
served process (streamable HTTP on 127.0.0.1) runs the `mcp` agent, whose MCP server (a stdio
process the run started) is the resource its release must close. No other call arrives to
trigger the expiry: on 2026-07-28 the client never retries; on 2025 the client's elicitation
callback never returns."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError
from mcp.types import ElicitResult, InputRequiredResult
from test_mcp_serve import _model_flags, _serving_http, _text

from agentfsm.cli import commands as cli_main

pytestmark = pytest.mark.usefixtures("clean_env")

TIMEOUT = 2.0
SERVER = Path(__file__).with_name("mcp_test_server.py")


def _flags(llmock: Any) -> list[str]:
    return [
        *_model_flags(llmock),
        "--agent",
        "mcp",
        "--mcp-server",
        f"t={sys.executable} {SERVER} modern stdio",
        "--require-approval",
        "mcp_t_echo",
        "--pause-timeout",
        f"{TIMEOUT:g}",
    ]


def _mcp_servers_of(pid: int) -> list[int]:
    """The processes of `mcp_test_server.py` that `pid` started (its children), read from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            command = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == pid and SERVER.name.encode() in command:
            found.append(int(entry))
    return found


async def _until(check: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.05)
    return bool(check())


async def _log_line(process: subprocess.Popen[str], text: str, seconds: float) -> str:
    """The first line of the served process's stderr holding `text`, within `seconds`."""
    assert process.stderr is not None
    stderr = process.stderr

    def read() -> str:
        while True:
            line = stderr.readline()
            if not line or text in line:
                return line

    return await asyncio.wait_for(asyncio.to_thread(read), seconds)


async def _unused(context: Any, params: Any) -> ElicitResult:
    raise AssertionError("the client was asked, though it drives the retry itself")


EXPIRED = f"a paused run got no answer within {TIMEOUT:g} s; cancelled"


async def test_on_2026_07_28_an_unanswered_pause_ends_at_its_timeout_with_no_other_call(
    llmock: Any, clean_env: Path
) -> None:
    llmock.call_tool("mcp_t_echo", {"text": "hi"})
    async with (
        _serving_http(_flags(llmock), clean_env) as (url, process),
        Client(url, elicitation_callback=_unused) as client,  # it can answer, and never retries
    ):
        paused = await client.session.call_tool("run_agent", {"task": "echo"}, allow_input_required=True)
        paused_at = time.monotonic()
        assert isinstance(paused, InputRequiredResult)
        assert len(_mcp_servers_of(process.pid)) == 1  # the paused run holds its MCP server
        line = await _log_line(process, EXPIRED, TIMEOUT + 10)
        waited = time.monotonic() - paused_at
        assert EXPIRED in line
        assert TIMEOUT - 0.5 < waited < TIMEOUT + 5, waited
        assert await _until(lambda: not _mcp_servers_of(process.pid), 5)  # the agent was released
        with pytest.raises(MCPError, match="Invalid or expired requestState"):  # a late retry
            await client.session.call_tool("run_agent", {"task": "echo"}, request_state=paused.request_state)
        assert process.poll() is None  # the server goes on
    assert len(llmock.requests) == 1


async def test_on_2025_an_elicitation_never_answered_ends_the_run_at_its_timeout(
    llmock: Any, clean_env: Path
) -> None:
    asked: list[str] = []
    never = asyncio.Event()

    async def silent(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        await never.wait()  # the person never answers
        raise AssertionError("unreachable")

    llmock.call_tool("mcp_t_echo", {"text": "hi"})
    async with (
        _serving_http(_flags(llmock), clean_env) as (url, process),
        Client(url, mode="legacy", elicitation_callback=silent) as client,
    ):
        calling = asyncio.create_task(client.call_tool("run_agent", {"task": "echo"}))
        assert await _until(lambda: bool(asked), 20)
        asked_at = time.monotonic()
        assert len(_mcp_servers_of(process.pid)) == 1
        result = await asyncio.wait_for(calling, TIMEOUT + 10)
        waited = time.monotonic() - asked_at
        assert TIMEOUT - 0.5 < waited < TIMEOUT + 5, waited
        assert result.is_error
        assert result.structured_content["stop_reason"] == "cancelled"
        assert _text(result).startswith("ERROR (cancelled) after 1 step")
        assert EXPIRED in await _log_line(process, EXPIRED, 5)
        assert await _until(lambda: not _mcp_servers_of(process.pid), 5)  # the agent was released
        assert "`mcp_t_echo`" in asked[0] and len(asked) == 1
        assert process.poll() is None
    assert len(llmock.requests) == 1  # the call never ran, and the model was not asked again


@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf"])
def test_a_pause_timeout_that_is_no_positive_number_is_a_usage_error(
    value: str, llmock: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    assert cli_main.main(["mcp-serve", "--pause-timeout", value, *_model_flags(llmock)]) == 2
    assert f"expected a positive number of seconds, got {value!r}" in capfd.readouterr().err
