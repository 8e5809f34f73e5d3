"""Stdio MCP servers that misbehave without malice: a stray print on stdout, a process that dies
mid-call, a tool whose input schema is no object's, a 50 MB result.

The server is `tests/mcp_raw_server.py`, a real process that writes the protocol byte by byte.
Calls are bounded loosely (well under the server's `timeout`): a call that fails does so at once.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from agentfsm import Terminate, ToolCollection
from agentfsm.mcp import MCPServers, MCPServerSettings
from agentfsm.mcp.client import MCPConnection
from agentfsm.mcp.results import MAX_RESULT_CHARS

_SERVER = Path(__file__).resolve().parent / "mcp_raw_server.py"
_TIMEOUT = 8.0
_AT_ONCE = 3.0


def _settings(*flags: str, timeout: float = _TIMEOUT) -> MCPServerSettings:
    return MCPServerSettings(command=sys.executable, args=(str(_SERVER), *flags), timeout=timeout)


async def test_a_stray_print_on_stdout_is_skipped_with_a_warning_naming_it(agentfsm_events):
    connection = MCPConnection("raw", _settings())
    await connection.connect()
    try:
        result = await connection.call("stray", {"text": "one"})
        assert (result.output, result.error) == ("stray: one", None)
        assert (await connection.call("echo", {"text": "two"})).output == "echo: two"
    finally:
        await connection.aclose()
    (skipped,) = agentfsm_events.named("mcp_stdout_line_skipped")
    assert "'debug: a stray print on stdout'" in str(skipped["message"])
    assert "'raw'" in str(skipped["message"])


async def test_a_server_that_dies_mid_call_fails_that_call_at_once_and_its_tools_are_withdrawn(
    agentfsm_events,
):
    servers = MCPServers({"raw": _settings()})
    tools = ToolCollection(Terminate())
    await servers.attach(tools)
    try:
        connection = servers.connections["raw"]
        started = time.monotonic()
        result = await connection.call("die", {})
        assert time.monotonic() - started < _AT_ONCE
        assert result.error is not None and "'raw'" in result.error and "withdrawn" in result.error
        assert "\n" not in result.error
        changes = await servers.attach(tools)
        assert "mcp_raw_echo" in changes.withdrawn and "mcp_raw_echo" not in tools.names
        started = time.monotonic()
        later = await connection.call("echo", {"text": "three"})
        assert later.error is not None and time.monotonic() - started < 1.0
    finally:
        await servers.aclose()
    assert len(agentfsm_events.named("mcp_server_gone")) == 1


async def test_a_tool_whose_input_schema_is_no_object_is_skipped_and_the_others_are_offered(
    agentfsm_events,
):
    servers = MCPServers({"raw": _settings("--bad-schema")})
    tools = ToolCollection(Terminate())
    await servers.attach(tools)
    try:
        assert "mcp_raw_echo" in tools.names
        assert "mcp_raw_listy" not in tools.names and "mcp_raw_stringy" not in tools.names
        connection = servers.connections["raw"]
        assert (await connection.call("echo", {"text": "four"})).output == "echo: four"
        await connection.relist()  # read again: the same two skipped, and no second warning
        assert {t.name for t in connection.tools} >= {"echo", "big"}
        assert not {"listy", "stringy"} & {t.name for t in connection.tools}
    finally:
        await servers.aclose()
    (skipped,) = agentfsm_events.named("mcp_tools_skipped")
    message = str(skipped["message"])
    assert "'listy'" in message and "'stringy'" in message and "inputSchema" in message
    assert "'echo'" not in message


async def test_a_50_mb_result_is_cut_at_the_cap_with_a_marker_counting_the_rest():
    connection = MCPConnection("raw", _settings(timeout=120.0))
    await connection.connect()
    try:
        result = await connection.call("big", {"mb": 50})
        assert result.error is None and result.output is not None
        kept, marker = result.output[:MAX_RESULT_CHARS], result.output[MAX_RESULT_CHARS:]
        assert kept == "x" * MAX_RESULT_CHARS
        assert f"{50 * 1024 * 1024 - MAX_RESULT_CHARS} more not kept" in marker
        assert len(result.output) < MAX_RESULT_CHARS + 200
        assert (await connection.call("echo", {"text": "five"})).output == "echo: five"
    finally:
        await connection.aclose()
