"""`agentfsm run --agent mcp --mcp-server NAME=COMMAND_OR_URL`, on llmock's model, with
`mcp-server-time` from PyPI over stdio."""

from __future__ import annotations

import json
import sys
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
