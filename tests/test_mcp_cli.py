"""`agentfsm run --agent mcp --mcp-server NAME=COMMAND_OR_URL`, on llmock's model, with
`mcp-server-time` from PyPI over stdio."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agentfsm.cli import commands as cli_main

pytestmark = pytest.mark.usefixtures("clean_env")

TIME_SERVER = Path(sys.executable).with_name("mcp-server-time")


def _args(llmock: Any, *extra: str) -> list[str]:
    return ["run", "what time is it in UTC?", "--model", "openai/test-model", "--api-base",
            llmock.base_url("openai"), "--api-key", "k", "--json", *extra]  # fmt: skip


def test_the_mcp_agent_runs_a_server_given_on_the_command_line(
    llmock: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    assert TIME_SERVER.exists(), f"{TIME_SERVER} is missing: install the dev extra (tools/dev-env)"
    llmock.call_tool("mcp_time_get_current_time", {"timezone": "UTC"})
    llmock.call_tool("terminate", {"status": "success"})
    status = cli_main.main(_args(llmock, "--agent", "mcp", "--mcp-server", f"time={TIME_SERVER}"))
    out = capfd.readouterr().out
    assert status == 0, out
    assert json.loads(out)["stop_reason"] == "terminated"
    first, second = llmock.requests[-2:]
    sent = json.dumps(second.body)
    assert "mcp_time_get_current_time" in json.dumps(first.body) and '\\"timezone\\": \\"UTC\\"' in sent


def test_the_mcp_agent_without_a_server_is_a_usage_error(
    llmock: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    assert cli_main.main(_args(llmock, "--agent", "mcp")) == 2
    assert (
        "the mcp agent needs an MCP server: pass --mcp-server NAME=COMMAND_OR_URL" in capfd.readouterr().err
    )


def test_a_malformed_mcp_server_flag_is_a_usage_error(llmock: Any, capfd: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(_args(llmock, "--agent", "mcp", "--mcp-server", "no-equals-sign")) == 2
    assert "expected NAME=COMMAND_OR_URL" in capfd.readouterr().err


def test_a_server_that_cannot_start_ends_the_run_naming_it(
    llmock: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    status = cli_main.main(_args(llmock, "--agent", "mcp", "--mcp-server", "bad=/nonexistent/mcp-server"))
    err = capfd.readouterr().err
    assert status == 1
    assert "cannot connect to MCP server 'bad' (/nonexistent/mcp-server)" in err
    assert llmock.requests == []  # the model was never asked


def test_a_killed_mcp_run_resumes_from_the_command_line(
    llmock: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """`agentfsm run --agent mcp --checkpoint`, killed with SIGKILL inside a slow server call, then
    `agentfsm resume CHECKPOINT --mcp-server ...`: the interrupted call is not run again, the
    model is told so, and the run finishes."""
    server = f"t={sys.executable} {Path(__file__).with_name('mcp_test_server.py')} modern stdio"
    checkpoint = tmp_path / "run.checkpoint.jsonl"
    llmock.call_tool("mcp_t_echo", {"text": "first"})
    llmock.call_tool("mcp_t_slow", {"seconds": 60})
    llmock.call_tool("terminate", {"status": "success"})
    args = [*_args(llmock, "--agent", "mcp", "--mcp-server", server), "--checkpoint", str(checkpoint)]
    child = subprocess.Popen([sys.executable, "-m", "agentfsm", *args], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while '"mcp_t_slow"' not in (checkpoint.read_text() if checkpoint.exists() else ""):
            assert child.poll() is None and time.monotonic() < deadline, "the run never reached the slow call"
            time.sleep(0.05)
        time.sleep(0.3)  # inside the call
    finally:
        child.kill()
        child.wait()
    resume = ["resume", str(checkpoint), "--api-base", llmock.base_url("openai"), "--api-key", "k"]
    status = cli_main.main([*resume, "--mcp-server", server, "--json"])
    out, err = capfd.readouterr()
    assert status == 0, err
    result = json.loads(out)
    assert result["stop_reason"] == "terminated" and result["steps"] == 3
    last = json.dumps(llmock.requests[-1].body)
    assert "may or may not have taken effect" in last and "echo: first" in last  # not run again
    assert [r for r in llmock.requests if "mcp_t_slow" in json.dumps(r.body)]  # offered again on resume


def test_resuming_an_mcp_run_without_its_servers_is_a_usage_error(
    llmock: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    server = f"t={sys.executable} {Path(__file__).with_name('mcp_test_server.py')} modern stdio"
    checkpoint = tmp_path / "run.checkpoint.jsonl"
    llmock.call_tool("terminate", {"status": "success"})
    args = [*_args(llmock, "--agent", "mcp", "--mcp-server", server), "--checkpoint", str(checkpoint)]
    assert cli_main.main(args) == 0
    capfd.readouterr()
    assert cli_main.main(["resume", str(checkpoint), "--api-base", llmock.base_url("openai")]) == 2
    assert "the mcp agent needs an MCP server" in capfd.readouterr().err
