"""Elicitation as a pause: an MCP server's question stops the run in AWAITING_INPUT, on both revisions.

The server is the suite's elicit server (tests/mcp_elicit_server.py, built with the SDK),
over stdio and streamable HTTP on 127.0.0.1: on 2026-07-28 its question is an
``input_required`` result and the call is retried with the answer; on 2025-11-25 it is an
``elicitation/create`` request while the call is held open.
"""

from __future__ import annotations

import gc
import json
import logging
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_mcp import _serve_http

from agentfsm import StopReason, ToolCallAgent
from agentfsm.agent.mcp import MCPAgent
from agentfsm.agent.replay import replay
from agentfsm.mcp import MCPServerSettings
from agentfsm.messages import Role, ToolCall
from agentfsm.questions import Answer, Question
from agentfsm.testing import ScriptedLLM, reply

SERVER = Path(__file__).with_name("mcp_elicit_server.py")
CHILD = Path(__file__).with_name("elicit_child.py")
CASES = [("modern", "stdio"), ("legacy", "stdio"), ("modern", "http"), ("legacy", "http")]
TERMINATE = reply(tool_calls=[("terminate", {"status": "success"})])
NAME = {"name": "Ada"}


def _stdio(revision: str) -> MCPServerSettings:
    return MCPServerSettings(command=sys.executable, args=(str(SERVER), revision, "stdio"), timeout=10)


def _http(revision: str) -> tuple[subprocess.Popen[bytes], str]:
    import test_mcp

    saved, test_mcp.SERVER = test_mcp.SERVER, SERVER  # the same start-up, for this server
    try:
        return _serve_http(revision)
    finally:
        test_mcp.SERVER = saved


@pytest.fixture(params=CASES, ids=[f"{r}-{t}" for r, t in CASES])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, MCPServerSettings]]:
    revision, transport = request.param
    if transport == "stdio":
        yield revision, _stdio(revision)
        return
    process, url = _http(revision)
    try:
        yield revision, MCPServerSettings(url=url, timeout=10)
    finally:
        process.kill()
        process.wait()


@pytest.fixture(params=["modern", "legacy"])
def stdio_server(request: pytest.FixtureRequest) -> MCPServerSettings:
    return _stdio(request.param)


def calls(*names_and_args: tuple[str, dict[str, Any]]) -> Any:
    return reply("calling", list(names_and_args))


def tool_texts(agent: ToolCallAgent) -> list[str]:
    return [m.content or "" for m in agent.memory.messages if m.role is Role.TOOL]


async def test_a_servers_question_pauses_the_run_and_the_answer_finishes_it(server):
    revision, settings = server
    llm = ScriptedLLM([calls(("mcp_el_greet", {}), ("mcp_el_echo", {"text": "x"})), TERMINATE])
    async with MCPAgent(llm=llm, servers={"el": settings}) as agent:
        expected = "2026-07-28" if revision == "modern" else "2025-11-25"
        assert agent.servers.connections["el"].protocol_version == expected
        paused = await agent.run("greet me")
        assert paused.paused and paused.stop_reason is StopReason.AWAITING_INPUT
        assert agent.fsm_state == "AWAITING_INPUT"
        ((call, question),) = paused.pending_input
        assert (call.name, question.message) == ("mcp_el_greet", "What is your name?")
        assert question.schema["properties"]["name"]["type"] == "string"
        agent.answer(call.id, NAME)
        result = await agent.resume()
        assert result.stop_reason is StopReason.TERMINATED
        assert tool_texts(agent)[:2] == [
            "Observed output of cmd `mcp_el_greet` executed:\nhello Ada",
            "Observed output of cmd `mcp_el_echo` executed:\necho: x",
        ]


async def test_an_input_handler_answers_each_round_inline(stdio_server):
    asked: list[str] = []

    async def handler(call: ToolCall, question: Question) -> Answer:
        asked.append(question.message)
        return Answer.accept(NAME if len(asked) == 1 else {"colour": "red"})

    llm = ScriptedLLM([calls(("mcp_el_favourite", {})), TERMINATE])
    async with MCPAgent(llm=llm, servers={"el": stdio_server}, input_handler=handler) as agent:
        result = await agent.run("what do I like?")
        assert result.stop_reason is StopReason.TERMINATED
        assert asked == ["What is your name?", "Which colour do you like, Ada?"]
        assert tool_texts(agent)[0] == "Observed output of cmd `mcp_el_favourite` executed:\nAda likes red"


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_a_decline_or_cancel_reaches_the_model_as_the_servers_answer(stdio_server, action):
    llm = ScriptedLLM([calls(("mcp_el_greet", {})), TERMINATE])
    async with MCPAgent(llm=llm, servers={"el": stdio_server}) as agent:
        paused = await agent.run("greet me")
        agent.answer(paused.pending_input[0][0].id, action=action)
        result = await agent.resume()
        assert result.ok
        assert tool_texts(agent)[0] == (
            f"Observed output of cmd `mcp_el_greet` executed:\nthe user would not say their name ({action})"
        )


async def test_past_the_rounds_cap_the_call_is_an_error_and_the_server_goes_on(stdio_server):
    async def handler(call: ToolCall, question: Question) -> Answer:
        return Answer.accept(NAME)

    llm = ScriptedLLM([calls(("mcp_el_favourite", {})), calls(("mcp_el_echo", {"text": "after"})), TERMINATE])
    agent = MCPAgent(llm=llm, servers={"el": stdio_server}, input_handler=handler, max_input_rounds=1)
    async with agent:
        result = await agent.run("what do I like?")
        assert result.ok
        texts = tool_texts(agent)
        assert texts[0] == (
            "Error: `mcp_el_favourite` asked for input 2 times in one call, more than the agent's "
            "`max_input_rounds` (1) allows; it was stopped. Raise `max_input_rounds` to allow more."
        )
        assert texts[1].endswith("echo: after")  # the call held open (2025) was let go, the server serves on
        assert agent.servers.connections["el"]._held == {}


PROFILE = {"name": "John Doe", "age": 30, "score": 95.5, "status": "active", "verified": True}
"""What the elicit server's ``profile`` form gives each field by default (SEP-1034)."""


def received(text: str) -> Any:
    """The form content the elicit server says it received (its tool's JSON output)."""
    return json.loads(text.split("\n", 1)[1])


async def test_an_accepted_form_carries_the_defaults_of_the_fields_left_out(server):
    """The server takes the form only with every field sent: the defaults are the client's to fill in."""
    llm = ScriptedLLM([calls(("mcp_el_profile", {})), TERMINATE])
    async with MCPAgent(llm=llm, servers={"el": server[1]}) as agent:
        paused = await agent.run("my profile")
        ((call, question),) = paused.pending_input
        assert question.schema["properties"]["name"]["default"] == "John Doe"
        agent.answer(call.id, {"age": 41})  # one field given, the others left to their defaults
        result = await agent.resume()
        assert result.ok
        assert received(tool_texts(agent)[0]) == PROFILE | {"age": 41}


async def test_an_input_handler_accepting_with_no_fields_sends_every_default(stdio_server):
    async def handler(call: ToolCall, question: Question) -> Answer:
        return Answer.accept() if call.id == "c1" else Answer.accept({})

    profile = [ToolCall.create("c1", "mcp_el_profile", {}), ToolCall.create("c2", "mcp_el_profile", {})]
    llm = ScriptedLLM([reply("asking", profile), TERMINATE])
    async with MCPAgent(llm=llm, servers={"el": stdio_server}, input_handler=handler) as agent:
        result = await agent.run("my profile")
        assert result.ok
        assert [received(text) for text in tool_texts(agent)[:2]] == [PROFILE, PROFILE]


@pytest.mark.parametrize("tool", ["roots", "sample"])
async def test_sampling_and_roots_are_refused(stdio_server, tool):
    llm = ScriptedLLM([calls((f"mcp_el_{tool}", {})), TERMINATE])
    async with MCPAgent(llm=llm, servers={"el": stdio_server}) as agent:
        result = await agent.run("ask")
        assert result.ok
        capability = "roots" if tool == "roots" else "sampling"
        assert f"did not declare the {capability} capability" in tool_texts(agent)[0]


async def test_a_run_with_an_answered_question_traces_and_replays(stdio_server, tmp_path):
    path = tmp_path / "run.jsonl"
    llm = ScriptedLLM([calls(("mcp_el_greet", {}), ("mcp_el_echo", {"text": "x"})), TERMINATE])
    async with MCPAgent(llm=llm, servers={"el": stdio_server}) as agent:
        seen: list[Any] = []
        agent.on_transition(seen.append)
        paused = await agent.run("greet me", trace=path)
        agent.answer(paused.pending_input[0][0].id, NAME)
        result = await agent.resume(trace=path)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    edits = [(r["edit"], r["after"]) for r in records if r["kind"] == "edit"]
    assert edits == [("answer", {"action": "accept", "content": NAME})]
    replayed = await replay(path)  # no server: the recorded results stand in
    assert [(t.source, t.dest) for t in replayed.transitions] == [(t.source, t.dest) for t in seen]
    assert replayed.result is not None
    assert replace(replayed.result, run_id="") == replace(result, run_id="")


@pytest.mark.parametrize("case", ["modern-http", "modern-stdio", "legacy-stdio", "legacy-http"])
def test_a_pause_answered_after_a_sigkill_resumes_in_a_new_process(tmp_path, case):
    """The first process answers the first question, pauses at the second and is SIGKILLed; a new
    process resumes the checkpoint, answers the second, and the call finishes with both answers:
    on 2026-07-28 through the server's request state, on 2025 by calling again and answering the
    server's first question from the answer given before the kill."""
    revision, transport = case.split("-")
    process = None
    if transport == "http":
        process, target = _http(revision)
    else:
        target = f"stdio:{revision}"
    try:
        first = subprocess.Popen(
            [sys.executable, str(CHILD), "run", str(tmp_path), target],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert first.stdout is not None
        line = first.stdout.readline()
        first.send_signal(signal.SIGKILL)
        _, err = first.communicate(timeout=30)
        assert line.startswith("paused ") and "Which colour do you like, Ada?" in line, err
        assert first.returncode == -signal.SIGKILL
        second = subprocess.run(
            [sys.executable, str(CHILD), "resume", str(tmp_path), target],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 0, second.stderr
        outcome = json.loads(second.stdout.splitlines()[-1])
        assert outcome["result"]["stop_reason"] == "terminated"
        assert outcome["tools"][:2] == [
            "Observed output of cmd `mcp_el_favourite` executed:\nAda likes red",
            "Observed output of cmd `mcp_el_echo` executed:\necho: x",
        ]
    finally:
        if process is not None:
            process.kill()
            process.wait()


def test_an_input_required_asking_for_sampling_or_roots_is_refused_without_a_server():
    """A 2026-07-28 server that asks for them anyway (an SDK-built one never does, see above)."""
    import mcp_types as types

    from agentfsm.mcp.client import MCPConnection

    connection = MCPConnection("odd", MCPServerSettings(url="http://127.0.0.1:9/mcp"))
    sampling = types.CreateMessageRequest(params=types.CreateMessageRequestParams(messages=[], max_tokens=5))
    asked = types.InputRequiredResult(input_requests={"a": sampling, "b": types.ListRootsRequest()})
    result = connection._answer("draw", asked)
    assert result.input_required is None
    assert result.error == (
        "MCP server 'odd' asked for roots/list, sampling/createMessage during `draw`; agentfsm takes no "
        "part in sampling or roots (deprecated in 2026-07-28), so the call was refused"
    )
    form = types.ElicitRequestFormParams(
        message="Size?", requested_schema={"type": "object", "properties": {}}
    )
    result = connection._answer(
        "order",
        types.InputRequiredResult(input_requests={"k": types.ElicitRequest(params=form)}, request_state="s1"),
    )
    assert result.input_required is not None
    assert [(q.key, q.message) for q in result.input_required.questions] == [("k", "Size?")]
    assert json.loads(result.input_required.token) == {"revision": "2026-07-28", "request_state": "s1"}


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_server_everythings_elicitation_pauses_and_is_answered(request, transport):
    """A server not built with the Python SDK (npm's server-everything, 2025-11-25), which offers
    its elicitation tool only to a client that declares the capability, as this one does."""
    if transport == "stdio":
        params = request.getfixturevalue("everything_stdio")
        settings = MCPServerSettings(
            command=params.command, args=tuple(params.args), env=dict(params.env or {})
        )
    else:
        settings = MCPServerSettings(type="http", url=request.getfixturevalue("everything_http"))
    llm = ScriptedLLM([calls(("mcp_everything_trigger-elicitation-request", {})), TERMINATE])
    async with MCPAgent(llm=llm, servers={"everything": settings}) as agent:
        paused = await agent.run("ask me")
        ((call, question),) = paused.pending_input
        assert question.message == "Please provide inputs for the following fields:"
        assert question.schema["required"] == ["name"] and "email" in question.schema["properties"]
        agent.answer(call.id, {"name": "Ada Lovelace", "check": True, "integer": 7})
        result = await agent.resume()
        assert result.ok
        text = tool_texts(agent)[0]
        assert "User provided the requested information" in text
        assert "- Name: Ada Lovelace" in text and "- Favorite Integer: 7" in text


async def test_a_legacy_call_held_for_an_answer_is_let_go_cleanly(caplog):
    """Cancelling the paused run tells the server the question was cancelled, and the server
    serves on; closing the agent while paused waits for the server's answer to that before the
    transport goes (no error from the SDK's stream, nothing left held)."""
    process, url = _http("legacy")
    try:
        settings = MCPServerSettings(url=url, timeout=10)
        llm = ScriptedLLM([calls(("mcp_el_greet", {})), calls(("mcp_el_echo", {"text": "again"})), TERMINATE])
        with caplog.at_level(logging.WARNING):
            async with MCPAgent(llm=llm, servers={"el": settings}) as agent:
                connection = agent.servers.connections["el"]
                await agent.run("greet me")
                assert len(connection._held) == 1
                cancelled = await agent.cancel()
                assert cancelled.stop_reason is StopReason.CANCELLED and connection._held == {}
                result = await agent.run("echo")
                assert result.ok and tool_texts(agent)[-2].endswith("echo: again")
                agent.llm = ScriptedLLM([calls(("mcp_el_favourite", {}))])
                assert (await agent.run("greet me")).paused  # closed while paused, below
        assert connection._held == {}
        assert [r.getMessage() for r in caplog.records if r.name.startswith("mcp")] == []
    finally:
        process.kill()
        process.wait()


async def test_manus_with_a_server_that_asks_pauses_and_resumes_from_its_checkpoint(tmp_path, stdio_server):
    """Manus.create gives the machine AWAITING_INPUT once the servers' tools are in, so a Manus
    built again (and created, connecting its servers) resumes a checkpoint paused there."""
    from agentfsm import Manus
    from agentfsm.sandbox.settings import SandboxSettings

    sandbox = SandboxSettings(mode="local", local_dir=str(tmp_path))
    path = tmp_path / "run.checkpoint.jsonl"
    first = await Manus.create(
        llm=ScriptedLLM([calls(("mcp_el_greet", {}))]), mcp_servers={"el": stdio_server}, sandbox=sandbox
    )
    try:
        assert "AWAITING_INPUT" in first.table.by_name
        paused = await first.run("greet me", checkpoint=path)
        assert paused.paused and paused.pending_input[0][1].message == "What is your name?"
    finally:
        await first.aclose()
    del first  # its process ends: the paused run's lease goes with it
    gc.collect()
    second = await Manus.create(
        llm=ScriptedLLM([TERMINATE]), mcp_servers={"el": stdio_server}, sandbox=sandbox
    )
    try:
        again = await second.resume(path)
        assert again.paused
        second.answer(again.pending_input[0][0].id, NAME)
        result = await second.resume()
        assert result.ok and "hello Ada" in tool_texts(second)[0]
    finally:
        await second.aclose()
