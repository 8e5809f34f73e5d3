"""The MCP client against real servers: the suite's own (built with the SDK's server API, on
each revision it speaks, over stdio and streamable HTTP on 127.0.0.1) and `mcp-server-time`."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentfsm.agent.mcp import MCPAgent
from agentfsm.errors import MCPServerError
from agentfsm.mcp import MCPServers, MCPServerSettings
from agentfsm.messages import Role
from agentfsm.testing import ScriptedLLM, reply

SERVER = Path(__file__).with_name("mcp_test_server.py")
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
CASES = [("modern", "stdio"), ("legacy", "stdio"), ("modern", "http"), ("legacy", "http")]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _serve_http(revision: str, transport: str = "http") -> tuple[subprocess.Popen[bytes], str]:
    """The test server over HTTP in a subprocess, bound to 127.0.0.1, once it listens."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, str(SERVER), revision, transport, str(port)], stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the test MCP server exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process, f"http://127.0.0.1:{port}/{'sse' if transport == 'sse' else 'mcp'}"
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise AssertionError("the test MCP server did not listen within 30 s")


@pytest.fixture(params=CASES, ids=[f"{r}-{t}" for r, t in CASES])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, MCPServerSettings]]:
    """(revision, settings) of a test server with a 2 s call timeout; an HTTP one is stopped after."""
    revision, transport = request.param
    if transport == "stdio":
        args = (str(SERVER), revision, "stdio")
        yield revision, MCPServerSettings(command=sys.executable, args=args, timeout=2)
        return
    process, url = _serve_http(revision)
    try:
        yield revision, MCPServerSettings(url=url, timeout=2)
    finally:
        process.kill()
        process.wait()


def _children() -> list[int]:
    """This process's child processes, read from /proc."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == me:
                found.append(int(entry))
    return found


async def test_each_revision_speaks_and_its_results_reach_the_model(server):
    revision, settings = server
    async with MCPServers({"t": settings}) as servers:
        connection = servers.connections["t"]
        expected = "2026-07-28" if revision == "modern" else "2025-11-25"
        assert connection.protocol_version == expected
        tools = {t.remote_name: t for t in servers.tools}
        assert tools["echo"].name == "mcp_t_echo"
        assert tools["echo"].parameters["required"] == ["text"]  # the server's input schema

        assert (await tools["echo"](text="hi")).output == "echo: hi"
        picture = await tools["picture"]()
        assert picture.base64_image == PIXEL and picture.error is None
        weather = await tools["weather"](city="Oslo")
        assert weather.output == '{"city": "Oslo", "celsius": 21.5}'
        assert tools["weather"].output_schema is not None
        failed = await tools["fail"](reason="r")
        assert failed.error is not None and "failed on purpose: r" in failed.error
        unknown = await connection.call("no_such_tool", {})
        assert unknown.error is not None and "no_such_tool" in unknown.error
        assert connection.gone is None  # a refused call leaves the server's tools in place
        resources = await tools["resources"]()
        assert resources.output == (
            "[resource file:///notes.txt (text/plain)]\nthe notes\n"
            "[resource link file:///big.bin, name 'big.bin', type application/octet-stream]"
        )


async def test_the_legacy_http_sse_transport_serves_the_tools():
    process, url = _serve_http("legacy", "sse")
    try:
        async with MCPServers({"t": MCPServerSettings(type="sse", url=url, timeout=2)}) as servers:
            assert servers.connections["t"].protocol_version is not None
            tools = {t.remote_name: t for t in servers.tools}
            assert (await tools["echo"](text="sse")).output == "echo: sse"
            assert (await tools["picture"]()).base64_image == PIXEL
            slow = await tools["slow"](seconds=30)
            assert slow.error is not None and "did not answer `slow` within 2 s" in slow.error
    finally:
        process.kill()
        process.wait()


async def test_a_slow_call_times_out_and_the_server_still_answers(server):
    _, settings = server
    async with MCPServers({"t": settings}) as servers:
        tools = {t.remote_name: t for t in servers.tools}
        slow, echo = await asyncio.gather(tools["slow"](seconds=30), tools["echo"](text="sibling"))
        assert slow.error is not None and "did not answer `slow` within 2 s" in slow.error
        assert echo.output == "echo: sibling"  # the failing call did not cancel its sibling
        assert (await tools["echo"](text="after")).output == "echo: after"
        assert servers.connections["t"].gone is None


async def test_a_server_killed_mid_call_is_an_observation_and_the_run_goes_on(server, caplog):
    _, settings = server
    llm = ScriptedLLM(
        [
            reply(tool_calls=[("mcp_t_slow", {"seconds": 30}), ("mcp_t_echo", {"text": "sibling"})]),
            reply(tool_calls=[("terminate", {"status": "success"})]),
        ]
    )
    async with MCPAgent(llm=llm, servers={"t": settings}, parallel_tool_calls=True) as agent:
        pid = int(str((await agent.servers.connections["t"].call("pid", {})).output))

        async def kill() -> None:
            await asyncio.sleep(0.5)
            os.kill(pid, signal.SIGKILL)

        killer = asyncio.create_task(kill())
        with caplog.at_level(logging.WARNING, logger="agentfsm"):
            result = await agent.run("call the slow tool")
        await killer
    assert result.stop_reason == "terminated"
    tool_messages = [m for m in llm.requests[1].messages if m.role is Role.TOOL]
    slow, echo = tool_messages
    assert "stopped while `slow` ran" in slow.content and "withdrawn" in slow.content  # not a timeout
    assert "echo: sibling" in echo.content
    assert llm.requests[1].tool_names == ["terminate"]  # the dead server's tools are withdrawn
    assert sum("mcp_server_gone" in r.getMessage() for r in caplog.records) == 1  # reported once


async def test_mcp_agent_calls_a_tool_sees_its_output_and_terminates(server):
    _, settings = server
    llm = ScriptedLLM(
        [
            reply(tool_calls=[("mcp_t_echo", {"text": "hello"})]),
            reply(tool_calls=[("mcp_t_terminate", {"status": "x"})]),  # the server's, not the agent's
            reply(tool_calls=[("terminate", {"status": "success"})]),
        ]
    )
    async with MCPAgent(llm=llm, servers={"t": settings}) as agent:
        result = await agent.run("echo hello")
        assert "terminate" in llm.requests[0].tool_names and "mcp_t_terminate" in llm.requests[0].tool_names
        assert "echo: hello" in llm.requests[1].messages[-1].content
        assert "server terminate x" in llm.requests[2].messages[-1].content
        assert result.stop_reason == "terminated" and result.steps == 3
        again = ScriptedLLM([reply(tool_calls=[("mcp_t_echo", {"text": "twice"})]), reply("done")])
        agent.llm = again
        agent.reset()
        second = await agent.run("once more")  # the connection outlives the run
        assert "echo: twice" in again.requests[1].messages[-1].content
        assert second.state.value == "FINISHED"


async def test_an_image_result_reaches_the_model_on_the_tool_message_observation(server):
    _, settings = server
    llm = ScriptedLLM(
        [reply(tool_calls=[("mcp_t_picture", {})]), reply(tool_calls=[("terminate", {"status": "success"})])]
    )
    async with MCPAgent(llm=llm, servers={"t": settings}) as agent:
        await agent.run("show the picture")
    (observed,) = [m for m in llm.requests[1].messages if m.role is Role.TOOL]
    assert observed.base64_image == PIXEL


async def test_cancelling_a_run_mid_call_leaves_no_child_process(caplog):
    settings = MCPServerSettings(command=sys.executable, args=(str(SERVER), "modern", "stdio"), timeout=30)
    llm = ScriptedLLM([reply(tool_calls=[("mcp_t_slow", {"seconds": 30})])])
    before = set(_children())
    with caplog.at_level(logging.DEBUG):
        agent = MCPAgent(llm=llm, servers={"t": settings})
        await agent.connect()
        assert len(set(_children()) - before) == 1  # the server's process
        run = asyncio.create_task(agent.run("wait"))
        while agent.fsm_state != "ACTING":
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # inside the call
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        await agent.aclose()
    assert set(_children()) - before == set()
    assert not [r for r in caplog.records if "cancel scope" in r.getMessage()]


async def test_mcp_server_time_from_pypi_over_stdio():
    command = Path(sys.executable).with_name("mcp-server-time")
    assert command.exists(), (
        f"{command} is missing: install the dev extra (tools/dev-env installs mcp-server-time)"
    )
    async with MCPServers({"time": MCPServerSettings(command=str(command))}) as servers:
        tools = {t.name: t for t in servers.tools}
        assert set(tools) == {"mcp_time_get_current_time", "mcp_time_convert_time"}
        now = await tools["mcp_time_get_current_time"](timezone="UTC")
        assert '"timezone": "UTC"' in str(now.output)


async def test_a_server_that_cannot_start_is_an_error_naming_it():
    servers = MCPServers(
        {"bad": MCPServerSettings(command=sys.executable, args=("-c", "raise SystemExit(3)"))}
    )
    with pytest.raises(MCPServerError, match="cannot connect to MCP server 'bad'"):
        await servers.connect()
    await servers.aclose()


async def test_manus_create_connects_its_mcp_servers_and_aclose_stops_them(tmp_path):
    from agentfsm import Manus
    from agentfsm.sandbox.settings import SandboxSettings

    settings = MCPServerSettings(command=sys.executable, args=(str(SERVER), "modern", "stdio"))
    llm = ScriptedLLM(
        [
            reply(tool_calls=[("mcp_t_echo", {"text": "manus"})]),
            reply(tool_calls=[("terminate", {"status": "success"})]),
        ]
    )
    before = set(_children())
    agent = await Manus.create(
        llm=llm, mcp_servers={"t": settings}, sandbox=SandboxSettings(mode="local", local_dir=str(tmp_path))
    )
    try:
        assert {"mcp_t_echo", "python_execute", "terminate"} <= set(agent.tools.names)
        result = await agent.run("echo through manus")
        assert result.stop_reason == "terminated"
        assert "echo: manus" in llm.requests[1].messages[-1].content
    finally:
        await agent.aclose()
    assert set(_children()) - before == set()
