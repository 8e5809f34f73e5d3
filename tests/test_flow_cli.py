"""`agentfsm run --flow planning` over real HTTP (llmock on 127.0.0.1), and `diagram --agent planning`."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import flow_state_of

from agentfsm.cli import commands as cli_main
from agentfsm.flow.checkpoint import read_flow_checkpoint
from agentfsm.flow.table import FLOW_TABLE
from agentfsm.fsm.diagram import to_mermaid
from agentfsm.recording.trace import read_trace

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
    out, err = capfd.readouterr()
    assert "Plan: Fallback plan for: write and check" in out
    assert "1. [✓] [toolcall] write and check" in out
    assert out.rstrip().splitlines()[-1] == "Summary: done."
    assert err.rstrip().splitlines()[-1].startswith("FINISHED  stop_reason=completed  steps=1")


def test_the_flow_traces_and_a_reviewer_on_the_terminal_edits_the_plan(
    llmock: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name, value in NO_DOCKER.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("sys.stdin", io.StringIO("e\n[toolcall] the edited step\n\n"))
    llmock.call_tool("planning", {"command": "create", "title": "T", "steps": ["[toolcall] planned"]})
    llmock.reply("edited step done")
    llmock.reply("Summary.")
    trace = tmp_path / "flow.jsonl"

    assert cli_main.main(flow_args(llmock, "--review", "--json", "--trace", str(trace))) == 0

    captured = capfd.readouterr()
    result = json.loads(captured.out)
    assert [(s["text"], s["status"]) for s in result["plan"]["steps"]] == [("the edited step", "completed")]
    assert "1. [ ] [toolcall] planned" in captured.err and "[a]pprove / [e]dit" in captured.err
    header, records = read_trace(trace)
    assert header["config"]["reviewing"] is True
    edges = [(r["source"], r["dest"]) for r in records if r["kind"] == "transition"]
    assert ("PLANNING", "AWAITING_PLAN_REVIEW") in edges and ("AWAITING_PLAN_REVIEW", "EXECUTING") in edges

    # replayed offline: the edited plan again, from the recorded decision and replies, no request sent
    sent = len(llmock.requests)
    assert cli_main.main(["replay", str(trace), "--json"]) == 0
    replayed = json.loads(capfd.readouterr().out)
    assert (replayed["plan"], replayed["summary"]) == (result["plan"], result["summary"])
    assert len(llmock.requests) == sent


def test_review_without_a_flow_is_bad_usage(llmock: Any, capfd: pytest.CaptureFixture[str]) -> None:
    args = ["run", "t", "--model", "openai/m", "--api-base", llmock.base_url("openai"), "--api-key", KEY]
    assert cli_main.main([*args, "--review"]) == 2
    assert "use it with --flow planning" in capfd.readouterr().err


def test_diagram_draws_the_flow_table(capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    assert cli_main.main(["diagram", "--agent", "planning"]) == 0
    assert capfdbinary.readouterr().out.decode() == to_mermaid(FLOW_TABLE)


def test_resume_continues_a_flow_killed_while_its_plan_waited_for_review(
    llmock: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name, value in NO_DOCKER.items():
        monkeypatch.setenv(name, value)
    checkpoint = tmp_path / "flow.json"
    llmock.call_tool("planning", {"command": "create", "title": "T", "steps": ["[toolcall] one"]})
    command = [
        sys.executable,
        "-m",
        "agentfsm",
        *flow_args(llmock, "--review", "--checkpoint", str(checkpoint)),
    ]
    process = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # no terminal: the question is asked on the pipes
    )
    try:  # the terminal's question waits for an answer that never comes
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if flow_state_of(checkpoint) == "AWAITING_PLAN_REVIEW":
                break
            time.sleep(0.05)
        process.kill()  # SIGKILL while the plan waits for review
    finally:
        process.wait(timeout=30)
        assert process.stderr is not None and process.stdin is not None
        process.stderr.close()
        process.stdin.close()
    assert read_flow_checkpoint(checkpoint)["run_state"]["state"] == "AWAITING_PLAN_REVIEW"

    llmock.reply("one done")
    llmock.reply("Resumed and done.")
    monkeypatch.setattr("sys.stdin", io.StringIO("a\n"))
    resume = ["resume", str(checkpoint), "--model", "openai/test-model", "--api-base",
              llmock.base_url("openai"), "--api-key", KEY, "--json"]  # fmt: skip
    assert cli_main.main([*resume, "--trace", str(tmp_path / "t.jsonl")]) == 2  # an agent's, not a flow's
    assert "is a flow's checkpoint: --trace goes on with an agent's trace" in capfd.readouterr().err
    assert cli_main.main(resume) == 0
    captured = capfd.readouterr()
    result = json.loads(captured.out)
    assert (result["stop_reason"], result["summary"]) == ("completed", "Resumed and done.")
    assert [s["status"] for s in result["plan"]["steps"]] == ["completed"]
    assert "[a]pprove / [e]dit" in captured.err  # asked again after the restart


def test_diagram_draws_the_flow_with_review_and_refuses_approvals(
    capfdbinary: pytest.CaptureFixture[bytes],
) -> None:
    from agentfsm.flow.review import with_review

    assert cli_main.main(["diagram", "--agent", "planning", "--review"]) == 0
    assert capfdbinary.readouterr().out.decode() == to_mermaid(with_review(FLOW_TABLE))
    assert cli_main.main(["diagram", "--agent", "planning", "--approvals"]) == 2
    assert b"has no approvals; try --review" in capfdbinary.readouterr().err
    assert cli_main.main(["diagram", "--review"]) == 2


def test_a_step_s_call_that_needs_approval_is_asked_on_the_terminal_for_the_flow(
    llmock: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name, value in NO_DOCKER.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    llmock.call_tool("planning", {"command": "create", "title": "T", "steps": ["[toolcall] finish"]})
    llmock.call_tool("terminate", {"status": "success"})
    llmock.reply("Finished after the approval.")
    trace = tmp_path / "flow.jsonl"

    args = flow_args(llmock, "--require-approval", "terminate", "--json", "--trace", str(trace))
    assert cli_main.main(args) == 0

    captured = capfd.readouterr()
    result = json.loads(captured.out)
    assert result["stop_reason"] == "completed" and result["summary"] == "Finished after the approval."
    assert [r["result"]["stop_reason"] for r in result["runs"]] == ["terminated"]
    assert "approve? [y]es" in captured.err
    _, records = read_trace(trace)
    flow_edges = [r for r in records if r["kind"] == "transition" and r.get("agent") is None]
    edges = [(r["source"], r["dest"]) for r in flow_edges]
    assert ("EXECUTING", "AWAITING_AGENT") in edges and ("AWAITING_AGENT", "EXECUTING") in edges


@pytest.mark.http
def test_a_flow_interrupted_with_ctrl_c_is_resumed_from_where_it_was(llmock: Any, tmp_path: Path) -> None:
    """Ctrl-C while the step's agent thinks: exit 130, the checkpoint says `cancelled`, and
    `agentfsm resume` runs that step again, from where the flow was, and the flow ends done."""
    import os
    import signal

    from llmock.scenarios import Delay, Match

    checkpoint = tmp_path / "flow.json"
    # The steps' agent on a model of its own, so that only its think is held back.
    (tmp_path / "agentfsm.toml").write_text(
        '[llm]\nmodel = "openai/test-model"\n\n[llm.toolcall]\nmodel = "openai/step-model"\n'
    )
    server = ["--api-base", llmock.base_url("openai"), "--api-key", KEY, "--json"]
    steps = ["[toolcall] one", "[toolcall] two"]
    llmock.call_tool("planning", {"command": "create", "title": "T", "steps": steps})
    llmock.add(Delay(8, match=Match(model="step-model")))  # the first step's think: interrupted
    llmock.reply("never seen")
    process = subprocess.Popen(
        [sys.executable, "-m", "agentfsm", "run", "--flow", "planning", "write and check", *server,
         "--checkpoint", str(checkpoint)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**os.environ, **NO_DOCKER},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )  # fmt: skip

    def planned() -> bool:  # the edge into EXECUTING: the first step's agent asks its model next
        return flow_state_of(checkpoint) == "EXECUTING"

    try:
        deadline = time.monotonic() + 60
        while not planned():
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        time.sleep(1.0)  # well inside the model's 8 s
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, err
    saved = read_flow_checkpoint(checkpoint)
    assert (saved["run_state"]["state"], saved["run_state"]["stop_reason"]) == ("ERROR", "cancelled")

    llmock.reply("one done")
    llmock.reply("two done")
    llmock.reply("Both done after the restart.")
    resumed_at = time.monotonic()
    resumed = subprocess.run(
        [sys.executable, "-m", "agentfsm", "resume", str(checkpoint), *server],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env={**os.environ, **NO_DOCKER},
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout)
    assert (result["state"], result["stop_reason"]) == ("FINISHED", "completed")
    assert result["summary"] == "Both done after the restart."
    assert [(s["status"], s["attempts"], s["notes"]) for s in result["plan"]["steps"]] == [
        ("completed", 1, "one done"),
        ("completed", 1, "two done"),
    ]
    assert [r["result"]["output"] for r in result["runs"]] == ["one done", "two done"]
    asked = [r.body["model"] for r in llmock.requests if r.started_at > resumed_at]
    assert asked == ["step-model", "step-model", "test-model"]  # each model as recorded
    assert read_flow_checkpoint(checkpoint)["run_state"]["state"] == "DONE"
    assert "already finished" not in resumed.stderr

    again_at = time.monotonic()
    again = subprocess.run(
        [sys.executable, "-m", "agentfsm", "resume", str(checkpoint), *server],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env={**os.environ, **NO_DOCKER},
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "agentfsm: the flow already finished; its result:" in again.stderr
    assert json.loads(again.stdout)["summary"] == "Both done after the restart."
    assert [r for r in llmock.requests if r.started_at > again_at] == []  # nothing ran
