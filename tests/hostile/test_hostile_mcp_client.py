"""A hostile stdio MCP server's stdout: bytes that are not UTF-8, and a line that never ends.

The server is `tests/mcp_raw_server.py`, a real process speaking the protocol byte by byte. The
SDK's own reader died on one line that is not UTF-8, silently, and every later call waited out its
timeout; a line without end grew in memory without bound. Each test bounds its calls loosely
(well under the server's `timeout`): a call answers or fails at once, never waits for an answer
that cannot come.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from agentfsm import Terminate, ToolCollection
from agentfsm.mcp import MCPServers, MCPServerSettings
from agentfsm.mcp.client import MCPConnection

_SERVER = Path(__file__).resolve().parent.parent / "mcp_raw_server.py"
_TIMEOUT = 8.0
"""The server's `timeout`; a call that takes anything near it waited for nothing."""
_AT_ONCE = 3.0


def _settings() -> MCPServerSettings:
    return MCPServerSettings(command=sys.executable, args=(str(_SERVER),), timeout=_TIMEOUT)


async def _timed(
    connection: MCPConnection, name: str, **arguments: object
) -> tuple[float, str | None, str | None]:
    started = time.monotonic()
    result = await connection.call(name, dict(arguments))
    return time.monotonic() - started, result.output, result.error


async def test_a_line_that_is_not_utf8_is_skipped_and_the_connection_lives_on(agentfsm_events):
    connection = MCPConnection("raw", _settings())
    await connection.connect()
    try:
        took, output, error = await _timed(connection, "garble", text="one")
        assert (output, error) == ("garbled: one", None)
        assert took < _AT_ONCE
        for word in ("two", "three"):  # and every later call, at once
            took, output, error = await _timed(connection, "echo", text=word)
            assert (output, error) == (f"echo: {word}", None)
            assert took < _AT_ONCE
        assert connection.gone is None
    finally:
        await connection.aclose()
    (skipped,) = agentfsm_events.named("mcp_stdout_line_skipped")
    assert skipped["server"] == "raw"
    assert "not JSON-RPC" in str(skipped["message"]) and "not UTF-8" in str(skipped["message"])


async def test_an_answer_that_is_not_utf8_arrives_with_its_bad_bytes_replaced():
    connection = MCPConnection("raw", _settings())
    await connection.connect()
    try:
        took, output, error = await _timed(connection, "latin1", text="four")
        assert (output, error) == ("caf\ufffd: four", None)  # the é of Latin-1 is one bad byte
        assert took < _AT_ONCE
        took, output, _ = await _timed(connection, "echo", text="five")
        assert output == "echo: five" and took < _AT_ONCE
    finally:
        await connection.aclose()


async def test_a_line_that_never_ends_closes_the_connection_and_withdraws_its_tools(
    agentfsm_events, monkeypatch: pytest.MonkeyPatch
):
    """A second attack of the family: stdout that never ends its line (memory without bound for
    a reader that waits for the newline). Past the cap the connection closes, its call fails at
    once and the server's tools are withdrawn, with one warning each."""
    monkeypatch.setattr("agentfsm.mcp.stdio.MAX_LINE_BYTES", 2 * 1024 * 1024)
    servers = MCPServers({"raw": _settings()})
    tools = ToolCollection(Terminate())
    await servers.attach(tools)
    try:
        assert "mcp_raw_echo" in tools.names
        connection = servers.connections["raw"]
        took, output, error = await _timed(connection, "flood", mb=8)
        assert output is None and error is not None and "raw" in error
        assert took < _AT_ONCE
        assert connection.gone is not None
        changes = await servers.attach(tools)
        assert "mcp_raw_echo" in changes.withdrawn and "mcp_raw_echo" not in tools.names
        took, _, error = await _timed(connection, "echo", text="six")
        assert error is not None and "not available" in error and took < 1.0
    finally:
        await servers.aclose()
    (too_long,) = agentfsm_events.named("mcp_stdout_line_too_long")
    assert str(2 * 1024 * 1024) in str(too_long["message"])
    assert len(agentfsm_events.named("mcp_server_gone")) == 1


async def test_an_answer_that_is_no_valid_json_rpc_fails_its_call_at_once_naming_it(agentfsm_events):
    """The same family: the answer to a call, malformed (its ``result`` a string). Skipped like a
    stray line, its call would wait out the timeout; it fails at once, and the connection lives."""
    connection = MCPConnection("raw", _settings())
    await connection.connect()
    try:
        took, output, error = await _timed(connection, "malformed")
        assert output is None and error is not None and took < _AT_ONCE
        assert "'raw'" in error and "not valid JSON-RPC" in error and "not an object" in error
        took, output, _ = await _timed(connection, "echo", text="seven")
        assert output == "echo: seven" and took < _AT_ONCE
    finally:
        await connection.aclose()
    assert agentfsm_events.named("mcp_stdout_line_skipped") == []
