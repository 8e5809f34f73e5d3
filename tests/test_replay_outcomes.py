"""`agentfsm replay` checks outcomes: a trace whose recorded outcome was edited does not replay.

Real traces of real runs over HTTP (llmock on 127.0.0.1), an agent's and a flow's; each test edits
one recorded outcome (a run's output, state or error; a flow step's state, output or error; the
flow's final output, state or error) and replays the file through the command line: exit 2 and
one line saying what differs. And `replay -q` of a flow writes no info logs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentfsm.cli import commands

KEY = "test-key-4f9a7c"

pytestmark = pytest.mark.usefixtures("clean_env")

Edit = Callable[[dict[str, Any]], None]


def _model(llmock: Any) -> list[str]:
    return ["--model", "openai/test-model", "--api-base", llmock.base_url("openai"), "--api-key", KEY]


def _records(trace: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]


def _edited(trace: Path, edit: Edit, tmp_path: Path) -> Path:
    """A copy of `trace` whose last record (the result) went through `edit`."""
    records = _records(trace)
    edit(records[-1])
    copy = tmp_path / "edited.jsonl"
    copy.write_text("".join(json.dumps(r) + "\n" for r in records))
    return copy


def _refused(trace: Path, capfd: pytest.CaptureFixture[str]) -> str:
    code = commands.main(["replay", str(trace), "--json", "-q"])
    out, err = capfd.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert (code, out) == (2, ""), (code, out, err)
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def agent_trace(llmock: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> Path:
    llmock.call_tool("terminate", {"status": "success"})
    trace = tmp_path / "run.jsonl"
    assert (
        commands.main(
            ["run", "finish", "--agent", "toolcall", *_model(llmock), "--json", "--trace", str(trace)]
        )
        == 0
    )
    capfd.readouterr()
    assert commands.main(["replay", str(trace), "--json", "-q"]) == 0  # the intact trace replays
    capfd.readouterr()
    return trace


def _set(*path: str | int, value: Any) -> Edit:
    def edit(record: dict[str, Any]) -> None:
        target: Any = record
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value

    return edit


AGENT_EDITS = {
    "output": (_set("result", "output", value="a forged answer"), "output"),
    "state": (_set("result", "state", value="ERROR"), "state"),
    "error": (_set("result", "error", value="RuntimeError: forged"), "error"),
}


@pytest.mark.parametrize("field", list(AGENT_EDITS))
def test_an_agent_trace_with_an_edited_outcome_does_not_replay(
    field: str, agent_trace: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    edit, named = AGENT_EDITS[field]
    line = _refused(_edited(agent_trace, edit, tmp_path), capfd)
    assert f"the replayed run's {named} is" in line and "differs from its replay" in line, line


@pytest.fixture
def flow_trace(
    llmock: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Path:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    llmock.call_tool("planning", {"command": "create", "title": "T", "steps": ["[toolcall] one"]})
    llmock.reply("one done")
    llmock.reply("All done.")
    trace = tmp_path / "flow.jsonl"
    argv = ["run", "--flow", "planning", "do it", *_model(llmock), "--json", "--trace", str(trace)]
    assert commands.main(argv) == 0
    capfd.readouterr()
    assert commands.main(["replay", str(trace), "--json", "-q"]) == 0
    capfd.readouterr()
    return trace


FLOW_EDITS = {
    "step state": (
        _set("flow", "runs", 0, "result", "state", value="ERROR"),
        "step 1 (toolcall, attempt 1)'s state",
    ),
    "step output": (
        _set("flow", "runs", 0, "result", "output", value="forged"),
        "step 1 (toolcall, attempt 1)'s output",
    ),
    "step error": (
        _set("flow", "runs", 0, "result", "error", value="X: forged"),
        "step 1 (toolcall, attempt 1)'s error",
    ),
    "final output": (_set("result", "output", value="forged summary"), "flow's output"),
    "final state": (_set("flow", "state", value="ERROR"), "flow's state"),
    "final state of the flow's run": (_set("result", "state", value="ERROR"), "flow's state"),
    "flow error": (_set("flow", "error", value="X: forged"), "flow's error"),
}


@pytest.mark.parametrize("field", list(FLOW_EDITS))
def test_a_flow_trace_with_an_edited_outcome_does_not_replay(
    field: str, flow_trace: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    edit, named = FLOW_EDITS[field]
    line = _refused(_edited(flow_trace, edit, tmp_path), capfd)
    assert f"the replayed {named} is" in line and str(tmp_path / "edited.jsonl") in line, line


def test_replay_quiet_of_a_flow_writes_no_info_logs(
    flow_trace: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert commands.main(["replay", str(flow_trace), "-q"]) == 0
    err = capfd.readouterr().err
    assert "[info" not in err and "transition" not in err, err
    assert commands.main(["replay", str(flow_trace)]) == 0  # without -q, to a pipe: the transitions
    assert "transition" in capfd.readouterr().err
