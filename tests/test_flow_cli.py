"""`agentfsm run --flow planning` over real HTTP (llmock on 127.0.0.1), and `diagram --agent planning`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentfsm.cli import commands as cli_main
from agentfsm.flow.table import FLOW_TABLE
from agentfsm.fsm.diagram import to_mermaid

KEY = "test-key-4f9a7c"
NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}

pytestmark = pytest.mark.usefixtures("clean_env")


def flow_args(llmock: Any, *extra: str) -> list[str]:
    return ["run", "--flow", "planning", "write and check", "--model", "openai/test-model",
            "--api-base", llmock.base_url("openai"), "--api-key", KEY, *extra]  # fmt: skip


def test_a_flow_over_http_plans_runs_both_steps_and_sums_up(
    llmock: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    for name, value in NO_DOCKER.items():
        monkeypatch.setenv(name, value)
    steps = ["[toolcall] write the text", "[toolcall] check the text"]
    llmock.call_tool("planning", {"command": "create", "plan_id": "p", "title": "Write", "steps": steps})
    llmock.reply("written")
    llmock.call_tool("terminate", {"status": "success"})
    llmock.reply("The text was written and checked.")

    assert cli_main.main(flow_args(llmock, "--json")) == 0

    out = capfd.readouterr().out
    result = json.loads(out)  # one JSON object, nothing else on stdout
    assert result["stop_reason"] == "completed" and result["state"] == "FINISHED"
    assert [(s["agent"], s["status"]) for s in result["plan"]["steps"]] == [
        ("toolcall", "completed"),
        ("toolcall", "completed"),
    ]
    assert [r["result"]["stop_reason"] for r in result["runs"]] == ["final_answer", "terminated"]
    assert result["summary"] == "The text was written and checked."
    assert result["usage"]["llm_calls"] == 4
    bodies = [r.body for r in llmock.requests]
    assert [t["function"]["name"] for t in bodies[0]["tools"]] == ["planning"]
    assert "CURRENT PLAN STATUS" in json.dumps(bodies[1]["messages"])


def test_the_flow_prints_its_plan_and_result_as_run_does(
    llmock: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    for name, value in NO_DOCKER.items():
        monkeypatch.setenv(name, value)
    llmock.reply("no plan from me", times=2)
    llmock.reply("done it")
    llmock.reply("Summary: done.")
    assert cli_main.main(flow_args(llmock)) == 0
    out = capfd.readouterr().out
    assert "Plan: Fallback plan for: write and check" in out
    assert "1. [✓] [toolcall] write and check" in out
    assert out.rstrip().splitlines()[-2] == "Summary: done."
    assert out.rstrip().splitlines()[-1].startswith("FINISHED  stop_reason=completed  steps=1")


def test_flow_refuses_trace_and_checkpoint(llmock: Any, capfd: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(flow_args(llmock, "--trace", "t.jsonl")) == 2
    assert "drop them with --flow" in capfd.readouterr().err


def test_diagram_draws_the_flow_table(capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    assert cli_main.main(["diagram", "--agent", "planning"]) == 0
    assert capfdbinary.readouterr().out.decode() == to_mermaid(FLOW_TABLE)
