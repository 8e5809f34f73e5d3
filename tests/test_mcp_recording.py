"""MCP runs are recorded like every run: each call carries the run's trace context in `_meta`, a
trace replays without the server, a checkpointed run killed with SIGKILL resumes in a new process,
and cancelling a run over streamable HTTP leaves nothing behind. Real servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_mcp import CASES, SERVER, _children, _serve_http

from agentfsm.agent.mcp import MCPAgent
from agentfsm.agent.replay import replay
from agentfsm.mcp import MCPServers, MCPServerSettings
from agentfsm.messages import Role
from agentfsm.testing import ScriptedLLM, reply
from agentfsm.toolbox.call_context import ToolCallContext

CHILD = Path(__file__).with_name("mcp_checkpoint_child.py")


@pytest.fixture(params=CASES, ids=[f"{r}-{t}" for r, t in CASES])
def server(request: pytest.FixtureRequest) -> Iterator[MCPServerSettings]:
    revision, transport = request.param
    if transport == "stdio":
        yield MCPServerSettings(command=sys.executable, args=(str(SERVER), revision, "stdio"), timeout=5)
        return
    process, url = _serve_http(revision)
    try:
        yield MCPServerSettings(url=url, timeout=5)
    finally:
        process.kill()
        process.wait()


def _metas(agent: MCPAgent) -> dict[str, dict[str, str]]:
    """The `_meta` the server saw, by the id of the call that asked for it."""
    return {
        m.tool_call_id or "": json.loads(m.content.partition("\n")[2])  # after "Observed output ..."
        for m in agent.memory.messages
        if m.role is Role.TOOL and m.name == "mcp_t_meta"
    }


async def test_each_call_carries_the_runs_trace_context_in_meta(server):
    llm = ScriptedLLM(
        [
            reply(tool_calls=[("mcp_t_meta", {}), ("mcp_t_meta", {})]),  # two calls, in parallel
            reply(tool_calls=[("mcp_t_meta", {})]),
            reply(tool_calls=[("terminate", {"status": "success"})]),
        ]
    )
    async with MCPAgent(llm=llm, servers={"t": server}, name="tracer") as agent:
        result = await agent.run("show the meta")
        metas = _metas(agent)
        turns = [m for m in agent.memory.messages if m.role is Role.ASSISTANT]
    assert result.stop_reason == "terminated"
    calls = [(step, c.id) for step, m in enumerate(turns[:2], 1) for c in m.tool_calls or ()]
    assert len(metas) == 3 and {call_id for _, call_id in calls} == set(metas)
    for step, call_id in calls:
        expected = ToolCallContext("tracer", result.run_id, step, call_id, "mcp_t_meta")
        seen = metas[call_id]
        assert seen["traceparent"] == expected.traceparent
        assert seen["agentfsm/run_id"] == result.run_id and seen["agentfsm/call_id"] == call_id
        assert seen["agentfsm/step"] == str(step) and seen["agentfsm/agent"] == "tracer"
    parents = [m["traceparent"].split("-") for m in metas.values()]
    assert len({p[1] for p in parents}) == 1  # one trace for the run
    assert len({p[2] for p in parents}) == 3  # a span per call


async def test_a_tool_called_outside_a_run_sends_no_trace_context():
    settings = MCPServerSettings(command=sys.executable, args=(str(SERVER), "modern", "stdio"), timeout=5)
    async with MCPServers({"t": settings}) as servers:
        (meta,) = [t for t in servers.tools if t.remote_name == "meta"]
        seen = json.loads(str((await meta()).output))
    assert not any(key.startswith("agentfsm/") or key == "traceparent" for key in seen)


async def test_an_mcp_run_replays_from_its_trace_without_the_server(server, tmp_path):
    llm = ScriptedLLM(
        [
            reply("echoing", tool_calls=[("mcp_t_echo", {"text": "hi"}), ("mcp_t_picture", {})]),
            reply(tool_calls=[("mcp_t_fail", {"reason": "r"})]),
            reply(tool_calls=[("terminate", {"status": "success"})]),
        ]
    )
    trace = tmp_path / "run.trace.jsonl"
    async with MCPAgent(llm=llm, servers={"t": server}) as agent:
        result = await agent.run("echo, picture, fail", trace=trace)
    # the servers are closed (a stdio server's process is gone): replay needs neither them nor the model
    replayed = await replay(trace)
    assert replayed.ended_early is None and replayed.result is not None
    assert replayed.result.stop_reason == result.stop_reason == "terminated"
    assert (replayed.result.steps, replayed.result.output) == (result.steps, result.output)
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    edges = [(r["source"], r["dest"]) for r in records if r["kind"] == "transition"]
    assert [(t.source, t.dest) for t in replayed.transitions] == edges
    observed = {r["name"]: r for r in records if r["kind"] == "tool"}
    assert "echo: hi" in observed["mcp_t_echo"]["observation"]
    assert observed["mcp_t_picture"]["base64_image"] is not None
    assert observed["mcp_t_fail"]["is_error"] is True


def _child(action: str, workdir: Path, kill_after: int, revision: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHILD), action, str(workdir), str(kill_after), revision],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def writes(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], int]:
    """A reference run to its end, and how many checkpoint writes it made."""
    workdir = tmp_path_factory.mktemp("reference")
    done = _child("run", workdir, 0, "modern")
    assert done.returncode == 0, done.stderr
    lines = (workdir / "run.checkpoint.jsonl").read_text().splitlines()
    return json.loads(done.stdout.splitlines()[-1]), len(lines)


@pytest.mark.parametrize("revision", ["modern", "legacy"])
@pytest.mark.parametrize("at", [0.3, 0.6, 0.9])
def test_an_mcp_run_killed_with_sigkill_resumes_in_a_new_process(writes, revision, at, tmp_path):
    reference, count = writes
    kill_after = max(2, int(count * at))
    killed = _child("run", tmp_path, kill_after, revision)
    assert killed.returncode == -9, killed.stderr  # SIGKILL, right after that write
    resumed = _child("resume", tmp_path, 0, revision)
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout.splitlines()[-1])
    for key in ("state", "stop_reason", "steps", "output"):
        assert result[key] == reference[key], key
    # the `meta` call of the resumed run (or of the killed one, recorded before the kill) names the run
    memory = [json.loads(line) for line in (tmp_path / "meta.jsonl").read_text().splitlines()]
    assert [m["agentfsm/run_id"] for m in memory] == [result["run_id"]]


@pytest.mark.parametrize("revision", ["modern", "legacy"])
async def test_cancelling_a_run_mid_call_over_http_leaves_nothing_behind(revision, caplog):
    process, url = _serve_http(revision)
    try:
        calls = [("mcp_t_slow", {"seconds": 30}), ("mcp_t_echo", {"text": "x"})]
        llm = ScriptedLLM([reply(tool_calls=calls)])
        before = set(_children())
        with caplog.at_level(logging.DEBUG):
            agent = MCPAgent(llm=llm, servers={"t": MCPServerSettings(url=url, timeout=30)})
            await agent.connect()
            run = asyncio.create_task(agent.run("wait"))
            while agent.fsm_state != "ACTING":
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.3)  # inside the slow call; the echo has answered
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run
            assert agent.fsm_state == "ERROR" and agent.run_state.stop_reason == "cancelled"
            await agent.aclose()
        assert set(_children()) - before == set()
        assert not [r for r in caplog.records if "in a different task" in r.getMessage()]  # anyio's error
        assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("mcp-")]
        # the server was left in a state to serve the next client
        async with MCPServers({"t": MCPServerSettings(url=url, timeout=5)}) as servers:
            echo = next(t for t in servers.tools if t.remote_name == "echo")
            assert (await echo(text="after")).output == "echo: after"
    finally:
        process.kill()
        process.wait()
