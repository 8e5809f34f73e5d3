"""`agentfsm mcp-serve` started as a subprocess and driven by the MCP SDK's `Client`: in
``mode="auto"`` (which speaks 2026-07-28 to it) and ``mode="legacy"`` (the handshake), over
stdio and streamable HTTP on 127.0.0.1, on llmock's model (127.0.0.1)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters
from mcp.client import Client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, ElicitRequest, ElicitResult, InputRequiredResult

from agentfsm import Terminate, ToolCallAgent
from agentfsm.cli import commands as cli_main
from agentfsm.mcp.serve import AgentServer
from agentfsm.testing import ScriptedLLM, reply

pytestmark = pytest.mark.usefixtures("clean_env")

MODES = ["auto", "legacy"]
TRANSPORTS = ["stdio", "http"]
CASES = [(m, t) for m in MODES for t in TRANSPORTS]
REVISION = {"auto": "2026-07-28", "legacy": "2025-11-25"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _model_flags(llmock: Any) -> list[str]:
    return ["--model", "openai/test-model", "--api-base", llmock.base_url("openai"), "--api-key", "k"]


@asynccontextmanager
async def _serving_http(flags: list[str], cwd: Path) -> AsyncIterator[tuple[str, subprocess.Popen[str]]]:
    """`mcp-serve --http 127.0.0.1:PORT` in a subprocess, once it says it serves (its URL and
    process); stopped after."""
    port = _free_port()
    command = [sys.executable, "-m", "agentfsm", "mcp-serve", "--http", f"127.0.0.1:{port}", *flags]
    process = subprocess.Popen(command, cwd=cwd, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        assert process.stderr is not None
        line = ""
        while time.monotonic() < deadline and "serving MCP on" not in line:
            line = await asyncio.to_thread(process.stderr.readline)
            if not line and process.poll() is not None:
                raise AssertionError(f"mcp-serve exited with {process.returncode}")
        assert f"serving MCP on http://127.0.0.1:{port}/mcp" in line, line
        yield f"http://127.0.0.1:{port}/mcp", process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@asynccontextmanager
async def _client(
    mode: str, transport: str, flags: list[str], cwd: Path, **options: Any
) -> AsyncIterator[Client]:
    """A `Client` connected to `mcp-serve FLAGS` over `transport`, in `mode`."""
    if transport == "stdio":
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "agentfsm", "mcp-serve", *flags], cwd=cwd
        )
        async with Client(params, mode=mode, **options) as client:
            yield client
        return
    async with _serving_http(flags, cwd) as (url, _), Client(url, mode=mode, **options) as client:
        yield client


@pytest.fixture(params=CASES, ids=[f"{m}-{t}" for m, t in CASES])
def case(request: pytest.FixtureRequest) -> tuple[str, str]:
    mode, transport = request.param
    return mode, transport


def _text(result: Any) -> str:
    """The result's one text block."""
    (block,) = result.content
    assert block.type == "text"
    return str(block.text)


def _answering(answer: ElicitResult, asked: list[str]) -> Callable[..., Any]:
    async def callback(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        assert params.requested_schema["required"] == ["approve"]
        return answer

    return callback


async def test_the_tool_is_listed_with_its_schemas(
    case: tuple[str, str], llmock: Any, clean_env: Path
) -> None:
    mode, transport = case
    async with _client(mode, transport, _model_flags(llmock), clean_env) as client:
        assert client.protocol_version == REVISION[mode]
        (tool,) = (await client.list_tools()).tools
        assert tool.name == "run_agent"
        assert tool.input_schema["required"] == ["task"]
        assert tool.input_schema["properties"]["agent"]["enum"] == ["toolcall", "manus", "mcp", "browser"]
        assert tool.output_schema is not None
        assert {"state", "stop_reason", "steps", "output", "error", "usage"} <= set(
            tool.output_schema["properties"]
        )


async def test_a_run_to_its_end_returns_the_run_result(
    case: tuple[str, str], llmock: Any, clean_env: Path
) -> None:
    mode, transport = case
    llmock.call_tool("terminate", {"status": "success"})
    async with _client(mode, transport, _model_flags(llmock), clean_env) as client:
        result = await client.call_tool("run_agent", {"task": "say hi", "max_steps": 5})
    assert not result.is_error
    structured = result.structured_content
    assert structured["state"] == "FINISHED" and structured["stop_reason"] == "terminated"
    assert structured["steps"] == 1 and structured["usage"]["llm_calls"] == 1
    assert _text(result).startswith("FINISHED (terminated) after 1 step")
    assert "say hi" in json.dumps(llmock.requests[-1].body)


async def test_an_approved_call_runs(case: tuple[str, str], llmock: Any, clean_env: Path) -> None:
    mode, transport = case
    llmock.call_tool("terminate", {"status": "success"})
    asked: list[str] = []
    callback = _answering(ElicitResult(action="accept", content={"approve": True}), asked)
    flags = [*_model_flags(llmock), "--require-approval", "terminate"]
    async with _client(mode, transport, flags, clean_env, elicitation_callback=callback) as client:
        result = await client.call_tool("run_agent", {"task": "finish"})
    assert result.structured_content["stop_reason"] == "terminated", result
    (message,) = asked
    assert "`terminate`" in message and '"status": "success"' in message


async def test_a_rejected_call_does_not_run_and_the_model_reads_why(
    case: tuple[str, str], llmock: Any, clean_env: Path
) -> None:
    mode, transport = case
    llmock.call_tool("terminate", {"status": "success"})
    llmock.reply("I will not finish, then.")
    asked: list[str] = []
    callback = _answering(
        ElicitResult(action="accept", content={"approve": False, "reason": "not yet"}), asked
    )
    flags = [*_model_flags(llmock), "--require-approval", "terminate"]
    async with _client(mode, transport, flags, clean_env, elicitation_callback=callback) as client:
        result = await client.call_tool("run_agent", {"task": "finish"})
    structured = result.structured_content
    assert structured["stop_reason"] == "final_answer", result
    assert structured["output"] == "I will not finish, then." and len(asked) == 1
    sent = json.dumps(llmock.requests[-1].body)
    assert "the user rejected the call to `terminate`; it was not run. Reason: not yet" in sent


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_on_2026_07_28_the_call_answers_input_required_and_the_retry_resumes_the_run(
    transport: str, llmock: Any, clean_env: Path
) -> None:
    """The loop `Client.call_tool` drives, driven by hand: the paused run's approvals come as one
    elicitation per waiting call; the retry with the answers and the state resumes that run, once."""
    llmock.call_tool("terminate", {"status": "success"})
    flags = [*_model_flags(llmock), "--require-approval", "terminate"]
    callback = _answering(ElicitResult(action="accept", content={"approve": True}), [])
    async with _client("auto", transport, flags, clean_env, elicitation_callback=callback) as client:
        session = client.session
        paused = await session.call_tool("run_agent", {"task": "finish"}, allow_input_required=True)
        assert isinstance(paused, InputRequiredResult) and paused.request_state
        ((call_id, question),) = paused.input_requests.items()
        assert isinstance(question, ElicitRequest) and "`terminate`" in question.params.message
        answers = {call_id: ElicitResult(action="accept", content={"approve": True})}
        done = await session.call_tool(
            "run_agent", {"task": "finish"}, input_responses=answers, request_state=paused.request_state
        )
        assert isinstance(done, CallToolResult) and done.structured_content["stop_reason"] == "terminated"
        again = await session.call_tool(
            "run_agent", {"task": "finish"}, input_responses=answers, request_state=paused.request_state
        )
        assert again.is_error and "the paused run is gone" in _text(again)
        with pytest.raises(MCPError, match="Invalid or expired requestState"):  # sealed: no forgery
            await session.call_tool("run_agent", {"task": "finish"}, request_state="forged")
    assert len(llmock.requests) == 1  # the retry resumed the run: the model was not asked again


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("answer", ["declined", "no elicitation support"])
async def test_a_client_that_declines_or_cannot_answer_gets_the_call_rejected(
    mode: str, answer: str, llmock: Any, clean_env: Path
) -> None:
    llmock.call_tool("terminate", {"status": "success"})
    llmock.reply("stopped")
    options: dict[str, Any] = {}
    if answer == "declined":
        options["elicitation_callback"] = _answering(ElicitResult(action="decline"), [])
    flags = [*_model_flags(llmock), "--require-approval", "terminate"]
    async with _client(mode, "stdio", flags, clean_env, **options) as client:
        result = await client.call_tool("run_agent", {"task": "finish"})
    assert result.structured_content["stop_reason"] == "final_answer"
    why = (
        "the MCP client's user declined the approval"
        if answer == "declined"
        else "the MCP client cannot answer approvals (it declared no form elicitation support)"
    )
    assert why in json.dumps(llmock.requests[-1].body)


async def test_bad_input_is_an_error_result_naming_the_value_and_the_fix(
    case: tuple[str, str], llmock: Any, clean_env: Path
) -> None:
    mode, transport = case
    async with _client(mode, transport, _model_flags(llmock), clean_env) as client:
        wrong_agent = await client.call_tool("run_agent", {"task": "t", "agent": "nope"})
        no_task = await client.call_tool("run_agent", {"task": " "})
        zero_steps = await client.call_tool("run_agent", {"task": "t", "max_steps": 0})
        unknown = await client.call_tool("run_agent", {"task": "t", "colour": "red"})
    assert all(r.is_error for r in (wrong_agent, no_task, zero_steps, unknown))
    assert _text(wrong_agent) == (
        "`agent` must be one of toolcall, manus, mcp, browser, got 'nope'; "
        "leave it out for the default (toolcall)"
    )
    assert "`task` must be a non-empty string" in _text(no_task)
    assert "`max_steps` must be a positive integer, got 0" in _text(zero_steps)
    assert "unknown argument 'colour'" in _text(unknown)
    assert llmock.requests == []  # no run started


async def test_a_run_that_errors_returns_its_result_with_the_error(llmock: Any, clean_env: Path) -> None:
    llmock.fail(status=400, times=None)
    async with _client("auto", "stdio", _model_flags(llmock), clean_env) as client:
        result = await client.call_tool("run_agent", {"task": "t"})
        again = await client.call_tool("run_agent", {"task": "t"})  # the server is still there
    assert result.is_error and again.is_error
    assert result.structured_content["state"] == "ERROR"
    assert result.structured_content["error"] and "400" in result.structured_content["error"]


async def test_an_agent_that_cannot_be_built_is_an_error_result(llmock: Any, clean_env: Path) -> None:
    async with _client("auto", "stdio", _model_flags(llmock), clean_env) as client:
        result = await client.call_tool("run_agent", {"task": "t", "agent": "mcp"})
    assert result.is_error
    assert "cannot build the mcp agent: the mcp agent needs an MCP server" in _text(result)


async def test_concurrent_calls_are_runs_of_their_own(llmock: Any, clean_env: Path) -> None:
    async with _client("auto", "http", _model_flags(llmock), clean_env) as client:
        first, second = await asyncio.gather(
            client.call_tool("run_agent", {"task": "task one"}),
            client.call_tool("run_agent", {"task": "task two"}),
        )
    assert first.structured_content["run_id"] != second.structured_content["run_id"]
    bodies = [json.dumps(r.body) for r in llmock.requests]
    assert len(bodies) == 2
    assert sorted("task one" in b for b in bodies) == [False, True]  # each request holds one task
    assert all(("task one" in b) != ("task two" in b) for b in bodies)


async def test_sigterm_stops_the_http_server_with_status_0(llmock: Any, clean_env: Path) -> None:
    async with _serving_http(_model_flags(llmock), clean_env) as (url, process):
        async with Client(url) as client:
            assert (await client.list_tools()).tools[0].name == "run_agent"
        process.terminate()
        assert await asyncio.to_thread(process.wait, 10) == 0


def test_a_non_loopback_host_is_refused_unless_allowed(
    llmock: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    status = cli_main.main(["mcp-serve", "--http", "0.0.0.0:8765", *_model_flags(llmock)])
    err = capfd.readouterr().err
    assert status == 2
    assert "--http 0.0.0.0:8765 serves beyond this machine" in err and "--allow-remote" in err
    assert err.count("\n") == 1


def test_an_address_taken_is_a_usage_error(llmock: Any, capfd: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        status = cli_main.main(["mcp-serve", "--http", str(port), *_model_flags(llmock)])
    err = capfd.readouterr().err
    assert status == 2
    assert f"cannot listen on 127.0.0.1:{port} (Address already in use): choose a free port" in err


@pytest.mark.parametrize("value", ["nope", "127.0.0.1:", "0", "70000"])
def test_a_malformed_http_address_is_a_usage_error(
    value: str, llmock: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    assert cli_main.main(["mcp-serve", "--http", value, *_model_flags(llmock)]) == 2
    assert "expected [HOST:]PORT" in capfd.readouterr().err


def test_a_configuration_error_stops_the_server_before_it_serves(capfd: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(["mcp-serve"]) == 2
    assert "no model configured" in capfd.readouterr().err


class _Counted(ToolCallAgent):
    """A tool-calling agent that counts its releases (`aclose`)."""

    closed = 0

    async def aclose(self) -> None:
        self.closed += 1
        await super().aclose()


class _Built:
    """A factory of tool-calling agents on a scripted model whose `terminate` needs approval."""

    def __init__(self) -> None:
        self.agents: list[_Counted] = []

    def __call__(self, name: str, max_steps: int | None) -> _Counted:
        script = ScriptedLLM([reply(tool_calls=[("terminate", {"status": "success"})])])
        agent = _Counted(llm=script, tools=[Terminate()], require_approval=["terminate"])
        self.agents.append(agent)
        return agent


async def _approve(context: Any, params: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={"approve": True})


async def test_a_paused_run_that_gets_no_answer_in_time_is_cancelled_by_its_own_timer() -> None:
    built = _Built()
    server = AgentServer(built, agents=["toolcall"], default_agent="toolcall", pause_timeout=0.2)
    async with Client(server.server, elicitation_callback=_approve) as client:  # in process
        paused = await client.session.call_tool("run_agent", {"task": "t"}, allow_input_required=True)
        assert isinstance(paused, InputRequiredResult)
        (agent,) = built.agents
        assert agent.fsm_state == "AWAITING_APPROVAL" and agent.closed == 0
        await asyncio.sleep(0.5)  # no call comes meanwhile: the pause's timer ends the run
        expired = agent.last_result
        assert expired is not None and expired.stop_reason == "cancelled"
        assert agent.closed == 1  # released
        with pytest.raises(MCPError, match="Invalid or expired requestState"):
            await client.session.call_tool("run_agent", {"task": "t"}, request_state=paused.request_state)
        finished = await client.call_tool("run_agent", {"task": "t"})
    assert finished.structured_content["stop_reason"] == "terminated"
    await server.aclose()
    assert agent.closed == 1  # released once


async def test_a_retry_in_time_stops_the_pauses_timer() -> None:
    built = _Built()
    server = AgentServer(built, agents=["toolcall"], default_agent="toolcall", pause_timeout=0.3)
    async with Client(server.server, elicitation_callback=_approve) as client:
        finished = await client.call_tool("run_agent", {"task": "t"})  # paused, then retried at once
        await asyncio.sleep(0.5)  # past the timeout: the ended run is not cancelled again
    (agent,) = built.agents
    assert finished.structured_content["stop_reason"] == "terminated"
    assert agent.last_result is not None and agent.last_result.stop_reason == "terminated"
    assert agent.closed == 1


async def test_on_2025_an_approval_never_answered_cancels_the_run_at_the_timeout() -> None:
    built = _Built()
    server = AgentServer(built, agents=["toolcall"], default_agent="toolcall", pause_timeout=0.3)
    never = asyncio.Event()

    async def silent(context: Any, params: Any) -> ElicitResult:
        await never.wait()
        raise AssertionError("unreachable")

    async with Client(server.server, mode="legacy", elicitation_callback=silent) as client:
        started = time.monotonic()
        result = await asyncio.wait_for(client.call_tool("run_agent", {"task": "t"}), 5)
        waited = time.monotonic() - started
    assert 0.25 < waited < 3, waited
    assert result.is_error and result.structured_content["stop_reason"] == "cancelled"
    (agent,) = built.agents
    assert agent.closed == 1
    last = agent.memory.messages[-1]  # the call that waited was answered, never run
    assert (
        last.name == "terminate"
        and last.content == "Error: the run ended before this tool call produced a result"
    )


def test_a_pause_timeout_that_is_no_positive_number_is_refused() -> None:
    with pytest.raises(ValueError, match="pause_timeout must be a positive number of seconds, got 0"):
        AgentServer(_Built(), agents=["toolcall"], default_agent="toolcall", pause_timeout=0)


async def test_closing_the_server_cancels_the_runs_still_paused() -> None:
    built = _Built()
    server = AgentServer(built, agents=["toolcall"], default_agent="toolcall")
    async with Client(server.server, elicitation_callback=_approve) as client:
        paused = await client.session.call_tool("run_agent", {"task": "t"}, allow_input_required=True)
        assert isinstance(paused, InputRequiredResult)
    await server.aclose()
    result = built.agents[0].last_result
    assert result is not None and result.stop_reason == "cancelled"
