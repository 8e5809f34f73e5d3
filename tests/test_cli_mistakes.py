"""A person's mistakes at the command line: each is one line on stderr naming the fix, exit 2, and
nothing runs; and a run they cancelled can be resumed from its checkpoint."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pty_support import Terminal
from sandbox_support import require_docker

from agentfsm.cli.parser import build_parser

KEY = "test-key-9c3b1e"
NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


def agentfsm(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "agentfsm", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def model(llmock: Any) -> list[str]:
    return ["--model", "openai/test-model", "--api-base", llmock.base_url("openai"), "--api-key", KEY]


def one_line(proc: Any, *wanted: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("agentfsm: error: "), proc.stderr
    for text in wanted:
        assert text in proc.stderr


@pytest.mark.http
@pytest.mark.parametrize("task", ["", "   "])
def test_an_empty_task_is_refused_before_the_model_is_called(llmock: Any, task: str) -> None:
    one_line(agentfsm("run", task, *model(llmock)), "TASK is empty: say what the agent should do")
    one_line(agentfsm("debug", task, *model(llmock)), "TASK is empty")
    assert llmock.requests == []


@pytest.mark.parametrize(
    ("path", "wanted"),
    [
        (".", "cannot write the checkpoint .: it is a directory; name a file in it"),
        ("/nonexistent/c.json", "no such folder /nonexistent; create it first"),
    ],
)
def test_a_checkpoint_that_cannot_be_written_is_one_line(path: str, wanted: str) -> None:
    one_line(agentfsm("run", "t", "--model", "openai/m", "--api-key", KEY, "--checkpoint", path), wanted)


def test_a_diagram_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    one_line(agentfsm("diagram", "-o", "/nonexistent/x.mmd"), "cannot write the diagram /nonexistent/x.mmd")
    one_line(agentfsm("diagram", "-o", str(tmp_path)), f"cannot write the diagram {tmp_path}: Is a directory")


def test_a_png_is_not_written_to_a_terminal_but_to_a_pipe() -> None:
    terminal = Terminal([sys.executable, "-m", "agentfsm", "diagram", "--format", "png"])
    try:
        assert terminal.wait() == 2
    finally:
        terminal.close()
    assert terminal.pieces() == [
        "agentfsm: error: --format png is binary and stdout is a terminal: write it to a file with "
        "-o diagram.png, or redirect stdout"
    ]
    piped = subprocess.run(
        [sys.executable, "-m", "agentfsm", "diagram", "--format", "png"], capture_output=True, timeout=60
    )
    assert piped.returncode == 0 and piped.stdout.startswith(b"\x89PNG")


@pytest.mark.http
def test_the_docker_sandbox_asked_for_without_an_engine_is_refused_before_the_run(
    llmock: Any, tmp_path: Path
) -> None:
    env = {**NO_DOCKER, "AGENTFSM_SANDBOX__MODE": "docker"}
    proc = agentfsm("run", "t", "--agent", "manus", *model(llmock), env=env, cwd=tmp_path)
    one_line(proc, '[sandbox] mode = "docker", but cannot reach the Docker engine at unix:///nonexistent')
    assert llmock.requests == []


@pytest.mark.http
def test_the_docker_sandbox_without_its_image_is_refused_before_the_run(llmock: Any, tmp_path: Path) -> None:
    require_docker()  # an engine to ask about images (CI provides one: there it fails, never skips)
    env = {"AGENTFSM_SANDBOX__MODE": "docker", "AGENTFSM_SANDBOX__IMAGE": "agentfsm-no-such-image:0"}
    proc = agentfsm("run", "t", "--agent", "manus", *model(llmock), env=env, cwd=tmp_path)
    one_line(proc, "the sandbox image 'agentfsm-no-such-image:0' is not on this Docker engine")
    assert "agentfsm sandbox build" in proc.stderr
    assert llmock.requests == []


@pytest.mark.http
def test_a_cancelled_run_is_resumed_from_where_it_was(llmock: Any, tmp_path: Path) -> None:
    """Ctrl-C while the model thinks; `resume` asks the model again and the run finishes, its trace
    going on from the same point (`--trace`), so that it replays as one run."""
    checkpoint, trace = tmp_path / "run.jsonl", tmp_path / "trace.jsonl"
    llmock.delay(8).call_tool("terminate", {"status": "success"})  # the first think: interrupted
    process = subprocess.Popen(
        [sys.executable, "-m", "agentfsm", "run", "do the task", *model(llmock), "--json",
         "--checkpoint", str(checkpoint), "--trace", str(trace)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (checkpoint.exists() and "THINKING" in checkpoint.read_text()):  # asking the model
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        time.sleep(1.0)  # well inside the model's 8 s
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130
    assert json.loads(out)["stop_reason"] == "cancelled"

    llmock.call_tool("terminate", {"status": "success"})
    resumed = agentfsm("resume", str(checkpoint), *model(llmock)[2:], "--json", "--trace", str(trace))
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout)
    assert (result["state"], result["stop_reason"], result["steps"]) == ("FINISHED", "terminated", 1)
    assert "already finished" not in resumed.stderr
    assert result["usage"]["llm_calls"] == 1  # the interrupted think was asked again
    replayed = agentfsm("replay", str(trace), "--json")
    assert replayed.returncode == 0, replayed.stderr
    assert '"stop_reason": "terminated"' in replayed.stdout


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """`parser` and every subcommand's parser beneath it, however deep."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases name one parser twice
                found.extend(_parsers(sub))
    return found


def test_no_parser_takes_a_prefix_for_an_option() -> None:
    parsers = _parsers(build_parser())
    assert len(parsers) > 10  # the commands, and the sandbox's actions
    assert [p.prog for p in parsers if p.allow_abbrev] == []


@pytest.mark.parametrize(
    ("argv", "refused"),
    [
        (["run", "--tool-ch", "x", "hi"], "--tool-ch"),  # was taken for --tool-choice, then refused x
        (["run", "hi", "--tool-c", "auto"], "--tool-c auto"),  # was taken for --tool-choice auto
        (["run", "hi", "--max-step", "3"], "--max-step 3"),
        (["run", "hi", "--conf", "agentfsm.toml"], "--conf"),  # nor by the configuration's first look
        (["replay", "trace.jsonl", "--js"], "--js"),
        (["diagram", "--form", "mermaid"], "--form mermaid"),
        (["sandbox", "build", "--forc"], "--forc"),
    ],
)
def test_an_option_prefix_is_a_usage_error_not_the_option(
    argv: list[str], refused: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentfsm.cli import commands

    assert commands.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert f"unrecognized arguments: {refused} " in err, err


def test_tool_is_not_taken_for_tool_choice_by_the_command() -> None:
    """`--tool` is an option of its own (your function as a tool), never `--tool-choice`'s prefix."""
    proc = agentfsm("run", "hi", "--tool", "auto", "--model", "openai/m", "--api-key", KEY)
    one_line(proc, "--tool 'auto': give MODULE:FUNCTION (e.g. myagents:build)")
    assert "Traceback" not in proc.stderr


def _recordings(folder: Path) -> dict[str, Path]:
    """An agent's trace and checkpoint, and a flow's, of scripted runs."""
    import asyncio

    from agentfsm import ToolCallAgent
    from agentfsm.flow import PlanningFlow
    from agentfsm.testing import ScriptedLLM, reply

    paths = {kind: folder / name for kind, name in [
        ("trace", "run.trace.jsonl"), ("checkpoint", "run.ckpt.jsonl"),
        ("flow trace", "flow.trace.jsonl"), ("flow checkpoint", "flow.ckpt.json"),
    ]}  # fmt: skip
    plan = reply(tool_calls=[("planning", {"command": "create", "title": "T", "steps": ["[coder] a"]})])

    async def record() -> None:
        agent = ToolCallAgent(llm=ScriptedLLM([reply("done")]))
        await agent.run("go", trace=paths["trace"], checkpoint=paths["checkpoint"])
        coder = ToolCallAgent(llm=ScriptedLLM([reply("a done")]), name="coder")
        flow = PlanningFlow(agents={"coder": coder}, planner_llm=ScriptedLLM([plan, reply("all done")]))
        await flow.execute("task", trace=paths["flow trace"], checkpoint=paths["flow checkpoint"])

    asyncio.run(record())
    return paths


def test_a_checkpoint_given_to_replay_and_a_trace_to_resume_say_what_they_are(tmp_path: Path) -> None:
    """Not "trace schema 2 is not supported": the file's kind, and the command that reads it."""
    paths = _recordings(tmp_path)
    for kind in ("checkpoint", "flow checkpoint"):
        path = paths[kind]
        described = "an agent's checkpoint" if kind == "checkpoint" else "a flow's checkpoint"
        for command in (
            ["replay", str(path)],
            ["replay", "--step", str(path)],
            ["diagram", "--trace", str(path)],
        ):
            proc = agentfsm(*command)
            one_line(proc, f"{path} is {described}, not a trace: resume it with `agentfsm resume {path}`")
            assert "schema" not in proc.stderr
    for kind in ("trace", "flow trace"):
        path = paths[kind]
        described = "an agent's trace" if kind == "trace" else "a flow's trace"
        proc = agentfsm("resume", str(path))
        one_line(
            proc, f"{path} is {described}, not an agent's checkpoint: replay it with `agentfsm replay {path}`"
        )
        assert "schema" not in proc.stderr


async def test_the_readers_say_what_kind_of_file_they_were_given(tmp_path: Path) -> None:
    """The Python API's readers say it too, each naming what reads the file instead."""
    import asyncio

    from agentfsm import ToolCallAgent
    from agentfsm.agent.replay import replay
    from agentfsm.errors import CheckpointError, TraceError
    from agentfsm.flow import PlanningFlow
    from agentfsm.recording.kinds import file_kind
    from agentfsm.testing import ScriptedLLM

    paths = await asyncio.to_thread(_recordings, tmp_path)
    assert {kind: file_kind(path) for kind, path in paths.items()} == {kind: kind for kind in paths}
    assert file_kind(tmp_path / "missing") is None
    (tmp_path / "other.json").write_text('{"a": 1}')
    assert file_kind(tmp_path / "other.json") is None

    with pytest.raises(TraceError, match="is an agent's checkpoint, not a trace: resume it with"):
        await replay(paths["checkpoint"])
    with pytest.raises(CheckpointError, match="is an agent's trace, not an agent's checkpoint: replay it"):
        await ToolCallAgent(llm=ScriptedLLM([])).resume(paths["trace"])
    with pytest.raises(
        CheckpointError, match=r"is a flow's checkpoint, not an agent's checkpoint: .* the flow's"
    ):
        await ToolCallAgent(llm=ScriptedLLM([])).resume(paths["flow checkpoint"])
    flow = PlanningFlow(
        agents={"coder": ToolCallAgent(llm=ScriptedLLM([]), name="coder")}, planner_llm=ScriptedLLM([])
    )
    with pytest.raises(
        CheckpointError, match=r"is an agent's checkpoint, not a flow's checkpoint: .* the agent's"
    ):
        await flow.resume(checkpoint=paths["checkpoint"])
    with pytest.raises(CheckpointError, match="is a flow's trace, not a flow's checkpoint: replay it"):
        await flow.resume(checkpoint=paths["flow trace"])
