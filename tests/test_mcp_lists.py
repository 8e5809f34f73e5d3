"""Tool lists that stay true: a server's tools added, removed and changed at run time reach the
next request (and the model is told), through the legacy notification, the 2026-07-28 listen
stream, the list's TTL and the every-N-requests fallback; a legacy HTTP server restarted mid-run
is reconnected and the call retried; server instructions in the system prompt when configured.
Against `tests/mcp_lists_server.py` on both revisions, over stdio and streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import http.server
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentfsm import Terminate, ToolCollection, tool
from agentfsm.agent.mcp import MCPAgent
from agentfsm.agent.replay import replay
from agentfsm.errors import ConfigError, KeyNotFoundError
from agentfsm.mcp import MCPServers, MCPServerSettings, ToolChanges
from agentfsm.testing import ModelRequest, ScriptedLLM, reply

SERVER = Path(__file__).with_name("mcp_lists_server.py")
CASES = [("modern", "stdio"), ("legacy", "stdio"), ("modern", "http"), ("legacy", "http")]
IDS = [f"{r}-{t}" for r, t in CASES]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start(revision: str, port: int, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """The lists server over streamable HTTP on 127.0.0.1:`port`, once it listens."""
    process = subprocess.Popen(
        [sys.executable, str(SERVER), revision, "http", str(port)],
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the lists server exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise AssertionError("the lists server did not listen within 30 s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    process.wait()


class _Servers:
    """Makes settings for the lists server on one transport, and stops the HTTP ones after."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []

    def settings(
        self, revision: str, transport: str, *, ttl_ms: int = 0, **options: object
    ) -> MCPServerSettings:
        env = {"MCP_LISTS_TTL_MS": str(ttl_ms)}
        if transport == "stdio":
            args = (str(SERVER), revision, "stdio")
            env["PYTHONPATH"] = str(SERVER.parent)
            return MCPServerSettings(command=sys.executable, args=args, env=env, timeout=5, **options)
        port = _free_port()
        self.processes.append(_start(revision, port, env))
        return MCPServerSettings(url=f"http://127.0.0.1:{port}/mcp", timeout=5, **options)


@pytest.fixture
def lists() -> Iterator[_Servers]:
    servers = _Servers()
    try:
        yield servers
    finally:
        for process in servers.processes:
            _stop(process)


def _system(request: ModelRequest) -> str:
    system = request.system_msgs
    return str(system[0].content) if system else ""


def _description(request: ModelRequest, name: str) -> str:
    for declaration in request.tools:
        if declaration["function"]["name"] == name:
            return str(declaration["function"]["description"])
    raise AssertionError(f"{name} is not offered")


@pytest.mark.parametrize(("revision", "transport"), CASES, ids=IDS)
async def test_tools_added_changed_and_removed_at_run_time_reach_the_next_request(
    lists, revision, transport, agentfsm_events, tmp_path
):
    """The server announces each change (legacy notification, or the listen stream): the next
    request offers the new set and says what changed, once; the names of tools that stay stay."""
    settings = lists.settings(revision, transport, refresh_every=0)  # only announcements count
    llm = ScriptedLLM(
        [
            reply(tool_calls=[("mcp_l_grow", {"name": "extra"})]),
            reply(tool_calls=[("mcp_l_extra", {"text": "hi"})]),
            reply(tool_calls=[("mcp_l_redescribe", {"name": "echo", "description": "Echo, anew."})]),
            reply(tool_calls=[("mcp_l_shrink", {"name": "extra"})]),
            reply(tool_calls=[("terminate", {"status": "success"})]),
        ]
    )
    async with MCPAgent(llm=llm, servers={"l": settings}) as agent:
        result = await agent.run("change the tools", trace=tmp_path / "run.jsonl")
        assert result.stop_reason == "terminated", result
        assert agent.servers.connections["l"].subscribed is (revision == "modern")  # the listen stream
    first, grown, quiet, changed, shrunk = llm.requests
    base = ["terminate", "mcp_l_echo", "mcp_l_grow", "mcp_l_shrink", "mcp_l_redescribe"]
    assert first.tool_names == base
    assert "MCP tools changed" not in _system(first)
    assert grown.tool_names == [*base, "mcp_l_extra"]
    assert "\n\nThe MCP tools changed since your last request: added mcp_l_extra.\n\n" in _system(grown)
    assert "extra: hi" in str(quiet.messages[-1].content)
    assert quiet.tool_names == grown.tool_names and "MCP tools changed" not in _system(quiet)  # one-shot
    assert changed.tool_names == grown.tool_names  # replaced in place, under its name
    assert _description(changed, "mcp_l_echo") == "Echo, anew."
    assert "changed (read their new descriptions and parameters) mcp_l_echo." in _system(changed)
    assert shrunk.tool_names == base
    assert "removed mcp_l_extra." in _system(shrunk)
    assert [(e["added"], e["removed"], e["changed"]) for e in agentfsm_events.named("mcp_tools_changed")] == [
        (["mcp_l_extra"], [], []),
        ([], [], ["mcp_l_echo"]),
        ([], ["mcp_l_extra"], []),
    ]
    replayed = await replay(tmp_path / "run.jsonl")  # the notes are in the trace's requests
    assert replayed.result is not None and replayed.result.stop_reason == "terminated"


@pytest.mark.parametrize("revision", ["modern", "legacy"])
async def test_a_tool_keeps_its_name_while_it_stays_and_gets_it_back_when_it_returns(lists, revision):
    """Two tools whose plain names clash (``a.b`` and ``a_b`` are both ``mcp_l_a_b``): the one
    named second keeps its hashed name when the first goes, and the first comes back under its own."""
    tools = ToolCollection(Terminate())
    async with MCPServers({"l": lists.settings(revision, "stdio", refresh_every=0)}) as servers:
        await servers.attach(tools)
        await tools.execute("mcp_l_grow", {"name": "a.b"})
        assert (await servers.attach(tools)).added == ("mcp_l_a_b",)
        await tools.execute("mcp_l_grow", {"name": "a_b"})
        (hashed,) = (await servers.attach(tools)).added
        assert hashed.startswith("mcp_l_a_b_") and len(hashed) == len("mcp_l_a_b_") + 8
        await tools.execute("mcp_l_shrink", {"name": "a.b"})
        assert (await servers.attach(tools)).removed == ("mcp_l_a_b",)
        assert hashed in tools  # not renamed to the plain name it could have now
        await tools.execute("mcp_l_grow", {"name": "a.b"})
        assert (await servers.attach(tools)).added == ("mcp_l_a_b",)
        assert (await tools.execute("mcp_l_a_b", {"text": "x"})).output == "a.b: x"
        assert (await tools.execute(hashed, {"text": "y"})).output == "a_b: y"


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_2026_list_is_read_again_when_its_ttl_runs_out(lists, transport):
    """A change the server does not announce shows once the list's ``ttlMs`` has run out, not
    before (the fallback waits while the TTL says the list is fresh)."""
    settings = lists.settings("modern", transport, ttl_ms=1500, refresh_every=1)
    tools = ToolCollection(Terminate())
    async with MCPServers({"l": settings}) as servers:
        await servers.attach(tools)
        await tools.execute("mcp_l_grow", {"name": "quiet", "notify": False})
        assert not await servers.attach(tools)  # fresh for 1.5 s: not read again
        assert "mcp_l_quiet" not in tools
        await asyncio.sleep(1.6)
        changes = await servers.attach(tools)
        assert changes.added == ("mcp_l_quiet",) and "mcp_l_quiet" in tools


@pytest.mark.parametrize(("revision", "transport"), CASES, ids=IDS)
async def test_a_server_that_announces_nothing_is_read_again_every_n_requests(lists, revision, transport):
    settings = lists.settings(revision, transport, refresh_every=2)
    never = lists.settings(revision, transport, refresh_every=0)
    tools = ToolCollection(Terminate())
    async with MCPServers({"l": settings, "n": never}) as servers:
        await servers.attach(tools)
        await tools.execute("mcp_l_grow", {"name": "quiet", "notify": False})
        await tools.execute("mcp_n_grow", {"name": "quiet", "notify": False})
        assert not await servers.attach(tools)  # the list has served one request
        changes = await servers.attach(tools)  # two: read again
        assert changes.added == ("mcp_l_quiet",)
        for _ in range(3):
            assert not await servers.attach(tools)
        assert "mcp_n_quiet" not in tools  # refresh_every = 0: never read again


async def test_a_legacy_http_server_restarted_mid_run_is_reconnected_and_the_call_retried(agentfsm_events):
    port = _free_port()
    process = _start("legacy", port)
    try:
        settings = MCPServerSettings(url=f"http://127.0.0.1:{port}/mcp", timeout=5)
        llm = ScriptedLLM(
            [
                reply(tool_calls=[("mcp_l_echo", {"text": "before"})]),
                reply(tool_calls=[("mcp_l_echo", {"text": "after"})]),
                reply(tool_calls=[("terminate", {"status": "success"})]),
            ]
        )
        async with MCPAgent(llm=llm, servers={"l": settings}) as agent:
            async for transition in agent.iter("echo twice"):
                if transition.dest == "THINKING" and transition.step == 2:  # between the two calls
                    _stop(process)
                    process = _start("legacy", port)  # a new process: it knows no session
            assert agent.last_result is not None and agent.last_result.stop_reason == "terminated"
            assert agent.servers.connections["l"].gone is None
        assert "echo: before" in str(llm.requests[1].messages[-1].content)
        assert "echo: after" in str(llm.requests[2].messages[-1].content)
        assert len(agentfsm_events.named("mcp_server_reconnecting")) == 1
    finally:
        _stop(process)


class _NoSession(http.server.BaseHTTPRequestHandler):
    """Answers every request with 404, as a server that knows no session (nor anything else)."""

    def do_POST(self) -> None:
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_DELETE = do_POST

    def log_message(self, *args: object) -> None:
        pass


async def test_a_lost_session_that_cannot_be_reopened_is_an_error_and_withdraws_the_server():
    port = _free_port()
    process = _start("legacy", port)
    try:
        tools = ToolCollection(Terminate())
        settings = MCPServerSettings(url=f"http://127.0.0.1:{port}/mcp", timeout=5, connect_timeout=5)
        async with MCPServers({"l": settings}) as servers:
            await servers.attach(tools)
            _stop(process)
            stand_in = http.server.HTTPServer(("127.0.0.1", port), _NoSession)
            threading.Thread(target=stand_in.serve_forever, daemon=True).start()
            try:
                result = await tools.execute("mcp_l_echo", {"text": "lost"})
                assert result.error is not None and "stopped while `echo` ran" in result.error
                assert "reconnecting failed" in str(servers.connections["l"].gone)
                changes = await servers.attach(tools)
                assert set(changes.withdrawn) == {
                    "mcp_l_echo",
                    "mcp_l_grow",
                    "mcp_l_redescribe",
                    "mcp_l_shrink",
                }
            finally:
                stand_in.shutdown()
                stand_in.server_close()
    finally:
        _stop(process)


@pytest.mark.parametrize("revision", ["modern", "legacy"])
async def test_server_instructions_reach_the_system_prompt_only_when_configured(lists, revision):
    heading = "## Instructions of the MCP server 'l'\nTools come and go on this server."
    for given in (True, False):
        settings = lists.settings(revision, "stdio", instructions=given)
        llm = ScriptedLLM([reply(tool_calls=[("terminate", {"status": "success"})])])
        async with MCPAgent(llm=llm, servers={"l": settings}) as agent:
            await agent.run("hello")
        system = _system(llm.requests[0])
        assert system.startswith("You are an AI assistant with access to the tools of MCP servers")
        assert (heading in system) is given


async def test_manus_puts_configured_instructions_in_its_system_prompt(lists, tmp_path):
    from agentfsm import Manus
    from agentfsm.sandbox.settings import SandboxSettings

    llm = ScriptedLLM([reply(tool_calls=[("terminate", {"status": "success"})])])
    agent = await Manus.create(
        llm=llm,
        mcp_servers={"l": lists.settings("modern", "stdio", instructions=True)},
        sandbox=SandboxSettings(mode="local", local_dir=str(tmp_path)),
    )
    try:
        await agent.run("hello")
    finally:
        await agent.aclose()
    system = _system(llm.requests[0])
    assert system.startswith("You are OpenManus") and str(tmp_path) in system
    assert system.endswith("## Instructions of the MCP server 'l'\nTools come and go on this server.")


# -- without a server ------------------------------------------------------------------


def test_the_note_names_what_changed_and_nothing_says_nothing():
    assert ToolChanges().note() is None and not ToolChanges()
    note = ToolChanges(added=("a", "b"), removed=("c",), withdrawn=("d",)).note()
    assert note == (
        "The MCP tools changed since your last request: added a, b; removed c; "
        "withdrawn, their server stopped answering: d."
    )


def test_refresh_every_and_instructions_are_checked():
    table = {"command": "server", "refresh_every": 0, "instructions": True}
    settings = MCPServerSettings.from_table(table)
    assert (settings.refresh_every, settings.instructions) == (0, True)
    assert MCPServerSettings(command="server").refresh_every == 5
    assert MCPServerSettings(command="server").instructions is False
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ConfigError, match="`refresh_every` must be a whole number >= 0"):
            MCPServerSettings(command="server", refresh_every=bad)
    with pytest.raises(ConfigError, match="`instructions` must be true or false, got 'yes'"):
        MCPServerSettings(command="server", instructions="yes")


def test_the_config_file_sets_refresh_every_and_instructions(tmp_path):
    from agentfsm.cli.config import Settings

    path = tmp_path / "agentfsm.toml"
    path.write_text('[mcp.servers.l]\ncommand = "server"\nrefresh_every = 0\ninstructions = true\n')
    assert Settings.load(path).mcp.server_settings() == {
        "l": MCPServerSettings(command="server", refresh_every=0, instructions=True)
    }
    path.write_text('[mcp.servers.l]\ncommand = "server"\nrefresh_every = -1\n')
    with pytest.raises(ConfigError, match=r"\[mcp.servers.l\] refresh_every = -1"):
        Settings.load(path)


def test_replace_keeps_the_position_of_the_tool_it_replaces():
    @tool
    def first() -> str:
        """One."""
        return "1"

    @tool(name="first")
    def other() -> str:
        """Another."""
        return "2"

    @tool
    def nope() -> str:
        """Not in the collection."""
        return ""

    tools = ToolCollection(first, Terminate())
    assert tools.replace(other) is first
    assert tools.names == ["first", "terminate"] and tools.get("first") is other
    with pytest.raises(KeyNotFoundError, match="no tool named 'nope' to replace"):
        tools.replace(nope)
