"""A streamable-HTTP server's refusals, told as what they are (the SDK says only "Server returned an
error response" of one whose body is no JSON-RPC error).

A legacy server that lost the session is reconnected once and the call sent again: npm's
server-everything restarted on the same port (it answers the old session id with 400 and a body
that is no JSON-RPC error), and the suite's lists server (404, `test_mcp_lists.py`). A 400 counts
as a lost session only when the refused request carried a session id, and one reconnect is all a
call gets. A 401 says the server wants authorization, and which setting carries a token. The
stand-ins are HTTP servers on 127.0.0.1 that answer every request with one status.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_servers import everything_http_server
from test_mcp_lists import _free_port, _start, _stop

from agentfsm import Terminate, ToolCollection
from agentfsm.errors import MCPServerError
from agentfsm.mcp import MCPServers, MCPServerSettings


class _StandIn(http.server.BaseHTTPRequestHandler):
    """Answers every request with the server's `status` and `body`; records each POST's session id."""

    server: _StandInServer

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        self.server.posts.append(self.headers.get("mcp-session-id"))
        body = self.server.body(request).encode()
        self.send_response(self.server.status)
        self.send_header("Content-Type", self.server.content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        body = self.server.body({}).encode()
        self.send_response(self.server.status)
        self.send_header("Content-Type", self.server.content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_DELETE = do_GET

    def log_message(self, *args: object) -> None:
        pass


class _StandInServer(http.server.ThreadingHTTPServer):
    def __init__(self, port: int, status: int, content_type: str = "text/plain", body: object = "") -> None:
        super().__init__(("127.0.0.1", port), _StandIn)
        self.status, self.content_type, self._body = status, content_type, body
        self.posts: list[str | None] = []

    def body(self, request: dict[str, object]) -> str:
        return self._body(request) if callable(self._body) else str(self._body)


@contextlib.contextmanager
def stand_in(
    port: int, status: int, content_type: str = "text/plain", body: object = ""
) -> Iterator[_StandInServer]:
    server = _StandInServer(port, status, content_type, body)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def test_server_everything_restarted_on_its_port_gets_a_new_session_and_the_call_goes_through(
    tmp_path: Path, agentfsm_events
):
    port = _free_port()
    tools = ToolCollection(Terminate())
    with contextlib.ExitStack() as first:
        url = first.enter_context(everything_http_server(tmp_path / "first.log", port))
        settings = MCPServerSettings(url=url, timeout=10)
        async with MCPServers({"everything": settings}) as servers:
            await servers.attach(tools)
            before = await tools.execute("mcp_everything_echo", {"message": "before"})
            assert before.error is None and "Echo: before" in str(before.output)
            first.close()  # the server stops; the connection and its session id stay
            with everything_http_server(tmp_path / "second.log", port):
                after = await tools.execute("mcp_everything_echo", {"message": "after"})
                assert after.error is None, after.error
                assert "Echo: after" in str(after.output)
                assert servers.connections["everything"].gone is None
                again = await tools.execute("mcp_everything_echo", {"message": "again"})
                assert "Echo: again" in str(again.output)
                assert not (await servers.attach(tools)).withdrawn
    (reconnecting,) = agentfsm_events.named("mcp_server_reconnecting")
    assert "lost the session" in reconnecting["message"] and "HTTP 400" in reconnecting["message"]


async def test_a_server_that_lost_the_session_and_answers_every_request_with_400_is_reconnected_once(
    agentfsm_events,
):
    port = _free_port()
    process = _start("legacy", port)
    try:
        tools = ToolCollection(Terminate())
        settings = MCPServerSettings(url=f"http://127.0.0.1:{port}/mcp", timeout=5, connect_timeout=5)
        async with MCPServers({"l": settings}) as servers:
            await servers.attach(tools)
            _stop(process)
            with stand_in(port, 400, body="Bad Request: no valid session") as refusing:
                result = await tools.execute("mcp_l_echo", {"text": "lost"})
                assert result.error is not None and "stopped while `echo` ran" in result.error
                gone = str(servers.connections["l"].gone)
                assert "its session was lost" in gone and "reconnecting failed" in gone
                assert "HTTP 400" in gone
                with_session = [session for session in refusing.posts if session]
                assert len(with_session) == 1  # the call once; the reconnect's requests carry none
                assert len(agentfsm_events.named("mcp_server_reconnecting")) == 1
                changes = await servers.attach(tools)
                assert "mcp_l_echo" in changes.withdrawn
    finally:
        _stop(process)


async def test_a_400_that_is_a_json_rpc_error_is_the_servers_refusal_not_a_lost_session(agentfsm_events):
    port = _free_port()
    process = _start("legacy", port)

    def invalid_params(request: dict[str, object]) -> str:
        error = {"code": -32602, "message": "bad arguments for echo"}
        return json.dumps({"jsonrpc": "2.0", "id": request.get("id"), "error": error})

    try:
        tools = ToolCollection(Terminate())
        settings = MCPServerSettings(url=f"http://127.0.0.1:{port}/mcp", timeout=5, connect_timeout=5)
        async with MCPServers({"l": settings}) as servers:
            await servers.attach(tools)
            _stop(process)
            with stand_in(port, 400, "application/json", invalid_params):
                result = await tools.execute("mcp_l_echo", {"text": "x"})
                assert result.error == "MCP server 'l' refused `echo`: MCPError: bad arguments for echo"
                assert servers.connections["l"].gone is None
                assert agentfsm_events.named("mcp_server_reconnecting") == []
    finally:
        _stop(process)


async def test_a_400_to_a_request_without_a_session_is_a_refusal_with_its_status():
    port = _free_port()
    with stand_in(port, 400, body="Bad Request") as refusing:
        settings = MCPServerSettings(url=f"http://127.0.0.1:{port}/mcp", timeout=5, connect_timeout=5)
        with pytest.raises(MCPServerError) as raised:
            async with MCPServers({"plain": settings}) as servers:
                await servers.attach(ToolCollection(Terminate()))
        assert "cannot connect to MCP server 'plain'" in str(raised.value)
        assert "(HTTP 400)" in str(raised.value)
        assert all(session is None for session in refusing.posts)


async def test_a_401_says_the_server_wants_authorization_and_where_a_token_goes():
    port = _free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with stand_in(port, 401, body="Unauthorized"):
        settings = MCPServerSettings(url=url, timeout=5, connect_timeout=5)
        with pytest.raises(MCPServerError) as raised:
            async with MCPServers({"auth": settings}) as servers:
                await servers.attach(ToolCollection(Terminate()))
    assert str(raised.value) == (
        f"cannot connect to MCP server 'auth' (http {url}): the server wants authorization (HTTP 401 "
        f'from {url}); if it uses OAuth, set auth = "oauth" in `[mcp.servers.auth]` (--mcp-oauth auth for '
        "a --mcp-server) and run `agentfsm mcp login auth`, else give it a token in "
        "`[mcp.servers.auth] headers` "
        '(MCPServerSettings.headers), e.g. headers = { Authorization = "Bearer <token>" }'
    )
    assert "Server returned an error response" not in str(raised.value)


async def test_a_401_during_a_session_is_told_as_the_tools_error():
    port = _free_port()
    process = _start("legacy", port)
    try:
        tools = ToolCollection(Terminate())
        settings = MCPServerSettings(url=f"http://127.0.0.1:{port}/mcp", timeout=5)
        async with MCPServers({"l": settings}) as servers:
            await servers.attach(tools)
            _stop(process)
            with stand_in(port, 401, body="token expired"):
                result = await tools.execute("mcp_l_echo", {"text": "x"})
            assert result.error is not None
            assert result.error.startswith(
                "MCP server 'l' refused `echo`: the server wants authorization (HTTP 401"
            )
            assert "`[mcp.servers.l] headers`" in result.error
    finally:
        _stop(process)


async def test_a_401_from_a_legacy_sse_server_says_the_same():
    port = _free_port()
    url = f"http://127.0.0.1:{port}/sse"
    with stand_in(port, 401, body="Unauthorized"):
        settings = MCPServerSettings(type="sse", url=url, timeout=5, connect_timeout=5)
        with pytest.raises(MCPServerError) as raised:
            async with MCPServers({"old": settings}) as servers:
                await servers.attach(ToolCollection(Terminate()))
    assert "the server wants authorization (HTTP 401 from" in str(raised.value)
    assert "`[mcp.servers.old] headers`" in str(raised.value)


async def test_a_403_says_the_server_refused_the_credentials_given():
    port = _free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with stand_in(port, 403, body="Forbidden"):
        settings = MCPServerSettings(
            url=url, headers={"Authorization": "Bearer old"}, timeout=5, connect_timeout=5
        )
        with pytest.raises(MCPServerError) as raised:
            async with MCPServers({"auth": settings}) as servers:
                await servers.attach(ToolCollection(Terminate()))
    assert str(raised.value).endswith(
        f"the server refused the credentials it was given (HTTP 403 from {url}); "
        "check the token in `[mcp.servers.auth] headers` (MCPServerSettings.headers)"
    )
