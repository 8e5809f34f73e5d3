"""The official SDK's client against `@modelcontextprotocol/server-everything` from npm, over stdio and
streamable HTTP on 127.0.0.1: the fixtures in mcp_servers.py start a real server that lists its tools and
echoes. Without the server (tools/mcp-env) these tests skip, except with AGENTFSM_REQUIRE_MCP=1 (CI).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from pathlib import Path

import mcp.types
import mcp_servers
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_servers import MARKER, marked_processes

from agentfsm import MCPAgent
from agentfsm.mcp import MCPServerSettings
from agentfsm.messages import Role
from agentfsm.testing import ScriptedLLM, reply

# The tools of the locked version (tools/npm) for a client that declares no roots, sampling or
# elicitation: the server adds the tools that need those only for a client that declares them.
EXPECTED_TOOLS = {
    "echo",
    "get-annotated-message",
    "get-env",
    "get-resource-links",
    "get-resource-reference",
    "get-structured-content",
    "get-sum",
    "get-tiny-image",
    "gzip-file-as-resource",
    "simulate-research-query",
    "toggle-simulated-logging",
    "toggle-subscriber-updates",
    "trigger-long-running-operation",
}


async def _list_and_echo(client: Client) -> tuple[set[str], mcp.types.CallToolResult]:
    # The server speaks the handshake revision only; mode="auto" falls back to it.
    assert client.protocol_version == "2025-11-25"
    assert client.server_info.name == "mcp-servers/everything"
    listed = await client.list_tools()
    result = await client.call_tool("echo", {"message": "héllo, 127.0.0.1"})
    return {t.name for t in listed.tools}, result


def _echoed(result: mcp.types.CallToolResult) -> str:
    assert not result.is_error, result
    assert len(result.content) == 1, result.content
    part = result.content[0]
    assert isinstance(part, mcp.types.TextContent), part
    return part.text


async def test_stdio_lists_tools_and_echoes(everything_stdio: StdioServerParameters) -> None:
    async with Client(everything_stdio) as client:
        names, result = await _list_and_echo(client)
    assert names == EXPECTED_TOOLS, sorted(names)
    assert _echoed(result) == "Echo: héllo, 127.0.0.1"


async def test_http_lists_tools_and_echoes(everything_http: str) -> None:
    assert everything_http.startswith("http://127.0.0.1:")
    async with Client(everything_http) as client:
        names, result = await _list_and_echo(client)
    assert names == EXPECTED_TOOLS, sorted(names)
    assert _echoed(result) == "Echo: héllo, 127.0.0.1"


def _listening(port: int) -> list[str]:
    """Local addresses of the TCP sockets listening on `port` (hex as in /proc/net/tcp and tcp6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.rpartition(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.append(address)
    return found


async def test_http_server_listens_on_loopback_only(everything_http: str) -> None:
    port = int(everything_http.removeprefix("http://127.0.0.1:").removesuffix("/mcp"))
    assert _listening(port) == ["0100007F"]  # 127.0.0.1, and nothing on any other address


async def test_stdio_server_is_one_marked_process_gone_after_close(
    everything_stdio: StdioServerParameters,
) -> None:
    assert everything_stdio.env is not None
    mark = everything_stdio.env[MARKER]
    assert marked_processes(mark) == []
    async with Client(everything_stdio) as client:
        await client.list_tools()
        assert len(marked_processes(mark)) == 1
    deadline = time.monotonic() + 5
    while marked_processes(mark) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert marked_processes(mark) == []


def test_marked_processes_finds_a_process_by_its_mark() -> None:
    mark = uuid.uuid4().hex
    other = subprocess.Popen(["sleep", "30"], env={MARKER: "another", "PATH": os.environ["PATH"]})
    child = subprocess.Popen(["sleep", "30"], env={MARKER: mark, "PATH": os.environ["PATH"]})
    try:
        # A process read within moments of its start has once shown no marked environment under load:
        # look until it does, as _assert_none_left looks until the marks are gone.
        deadline = time.monotonic() + 5
        while marked_processes(mark) != [child.pid] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert marked_processes(mark) == [child.pid]
    finally:
        for process in (child, other):
            process.kill()
            process.wait()
    assert marked_processes(mark) == []


def test_missing_server_skips_with_the_command_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mcp_servers, "_installed", lambda: "not installed; run tools/mcp-env")
    monkeypatch.setattr(mcp_servers, "REQUIRE_MCP", False)
    with pytest.raises(pytest.skip.Exception, match="run tools/mcp-env"):
        mcp_servers.everything_entry()


def test_missing_server_fails_when_ci_requires_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mcp_servers, "_installed", lambda: "not installed; run tools/mcp-env")
    monkeypatch.setattr(mcp_servers, "REQUIRE_MCP", True)
    with pytest.raises(pytest.fail.Exception, match=r"AGENTFSM_REQUIRE_MCP=1 but .*run tools/mcp-env"):
        mcp_servers.everything_entry()


# -- agentfsm's own client and agent against it -------------------------------------------------


async def _agent_echoes_and_terminates(settings: MCPServerSettings) -> None:
    llm = ScriptedLLM(
        [
            reply(tool_calls=[("mcp_everything_echo", {"message": "from the agent"})]),
            reply(tool_calls=[("mcp_everything_get-tiny-image", {})]),
            reply(tool_calls=[("terminate", {"status": "success"})]),
        ]
    )
    async with MCPAgent(llm=llm, servers={"everything": settings}) as agent:
        result = await agent.run("echo, then show the image")
    offered = set(llm.requests[0].tool_names)
    assert {f"mcp_everything_{name}" for name in EXPECTED_TOOLS} | {"terminate"} <= offered
    echoed = [m for m in llm.requests[1].messages if m.role is Role.TOOL][-1]
    assert "from the agent" in (echoed.content or "")
    image = [m for m in llm.requests[2].messages if m.role is Role.TOOL][-1]
    assert image.base64_image  # the server's PNG, as the tool result's image
    assert result.stop_reason == "terminated" and result.steps == 3


async def test_mcp_agent_over_stdio_calls_server_everything_and_terminates(
    everything_stdio: StdioServerParameters,
) -> None:
    command, *args = [everything_stdio.command, *everything_stdio.args]
    settings = MCPServerSettings(command=command, args=tuple(args), env=dict(everything_stdio.env or {}))
    await _agent_echoes_and_terminates(settings)


async def test_mcp_agent_over_streamable_http_calls_server_everything_and_terminates(
    everything_http: str,
) -> None:
    await _agent_echoes_and_terminates(MCPServerSettings(type="http", url=everything_http))
