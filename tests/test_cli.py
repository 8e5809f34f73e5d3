"""The `agentfsm` command: exit statuses, stdout purity, logs on stderr, configuration first.

Runs the CLI both as a subprocess (`python -m agentfsm`, what users run) and
in-process through `main([...])` (fast, and lets a test swap the model).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentfsm.cli import commands as cli_main
from agentfsm.cli import config
from agentfsm.cli.config import NO_MODEL_MESSAGE
from agentfsm.cli.demo import TASK, demo_sandbox
from agentfsm.testing import FunctionLLM, ModelRequest, ScriptedLLM, reply

KEY = "test-key-4f9a7c"
STEP = [("THINKING", "ACTING", "think_done"), ("ACTING", "OBSERVING", "act_done")]
DEMO_EDGES = [
    ("IDLE", "THINKING", "start"),
    *[*STEP, ("OBSERVING", "THINKING", "observe_done")] * 3,
    *STEP,
    ("OBSERVING", "FINISHED", "observe_done"),
]
NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
EDGE_LINE = re.compile(r"^(\w+) -> (\w+)  (\w+)  step (\d+)")


pytestmark = pytest.mark.usefixtures("clean_env")


def agentfsm(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`python -m agentfsm ARGS` in the test's working directory."""
    return subprocess.run(
        [sys.executable, "-m", "agentfsm", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def run_args(llmock: Any, *extra: str) -> list[str]:
    return ["run", "do the task", "--model", "openai/test-model", "--api-base", llmock.base_url("openai"),
            "--api-key", KEY, *extra]  # fmt: skip


# -- import cost ------------------------------------------------------------------------


def test_importing_the_cli_does_not_import_litellm() -> None:
    code = "import sys, agentfsm.cli.commands; print('litellm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# -- demo ---------------------------------------------------------------------------------


def check_demo_output(proc: subprocess.CompletedProcess[str], sandbox_line: str) -> None:
    stdout = proc.stdout
    lines = stdout.splitlines()
    assert lines[:3] == [f"task: {TASK}", sandbox_line, ""]
    edges = [m.groups()[:3] for m in map(EDGE_LINE.match, lines) if m]
    assert edges == DEMO_EDGES
    calls = [line.strip() for line in lines if line.startswith("    call ")]
    assert [call.split("(", 1)[0] for call in calls] == [
        "call str_replace_editor", "call python_execute", "call bash", "call terminate"
    ]  # fmt: skip
    results = [line.strip() for line in lines if line.startswith(("    result ", "    error "))]
    assert results[0].startswith("result str_replace_editor: File created successfully at: /")
    assert results[0].endswith("/squares.py")
    assert results[1:] == [
        "result python_execute: wrote 10 squares, the last is 100",
        "result bash: 1 4 9 16 25 36 49 64 81 100",
        "result terminate: The interaction has been completed with status: success",
    ]
    assert "guards: terminated=yes" in stdout
    assert lines[-1] == "squares.txt holds the squares of 1 to 10: 1 4 9 16 25 36 49 64 81 100."
    # the answer ends stdout; the summary is on stderr
    assert proc.stderr.splitlines()[-1].startswith("FINISHED  stop_reason=terminated  steps=4")
    assert "run_id" not in stdout  # logs are on stderr, never on stdout


def test_demo_runs_manus_in_the_docker_sandbox_when_there_is_one() -> None:
    _, described = demo_sandbox()
    if os.environ.get("AGENTFSM_REQUIRE_DOCKER") == "1":
        assert described.startswith("docker, image "), described
    proc = agentfsm("demo")
    assert proc.returncode == 0, proc.stderr
    check_demo_output(proc, f"sandbox: {described}")
    assert "] transition " not in proc.stderr  # each transition is shown once: on stdout
    verbose = agentfsm("demo", "-v")
    assert verbose.stderr.count("] transition ") == len(DEMO_EDGES)  # -v logs them too


def test_demo_falls_back_to_a_local_sandbox_without_docker() -> None:
    proc = agentfsm("demo", env=NO_DOCKER)
    assert proc.returncode == 0, proc.stderr
    sandbox_line = proc.stdout.splitlines()[1]
    assert sandbox_line.startswith(
        "sandbox: local, a temporary directory on this machine (no Docker sandbox: "
    )
    assert "unix:///nonexistent/docker.sock" in sandbox_line
    check_demo_output(proc, sandbox_line)


def test_demo_json_prints_one_object_and_logs_json_lines_on_stderr() -> None:
    proc = agentfsm("demo", "--json", "--log-format", "json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["state"], result["stop_reason"], result["steps"]) == ("FINISHED", "terminated", 4)
    assert result["usage"]["tool_calls"] == 4
    events = json_lines(proc.stderr)
    transitions = [e for e in events if e["event"] == "transition"]
    assert [(t["source"], t["dest"], t["trigger"]) for t in transitions] == DEMO_EDGES
    for t in transitions:
        assert {"trigger", "source", "dest", "guards", "step", "run_id", "level", "timestamp"} <= set(t)
        assert t["run_id"] == result["run_id"]
    assert transitions[-1]["guards"] == {"terminated": True}
    assert transitions[-1]["stop_reason"] == "terminated"
    names = [e["event"] for e in events]
    last_transition = max(i for i, name in enumerate(names) if name == "transition")
    assert names[last_transition + 1] == "run_finished"
    if "sandbox_started" in names:  # docker: made at the first tool call, destroyed after the run
        assert names.index("sandbox_started") < names.index("run_finished") < names.index("sandbox_destroyed")


def test_demo_in_process_restores_logging(capsys: pytest.CaptureFixture[str]) -> None:
    library, root = logging.getLogger("agentfsm"), logging.getLogger()
    before = (library.level, root.level, list(root.handlers), list(library.handlers))
    assert cli_main.main(["demo", "--verbose"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("task: ") and "OBSERVING -> FINISHED  observe_done  step 4  [terminated]" in out
    assert "[info" in err and "[info" not in out
    assert (library.level, root.level, list(root.handlers), list(library.handlers)) == before


# -- usage and configuration errors: exit 2, one line --------------------------------------


def test_run_without_a_model_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(["run", "hello"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"agentfsm: error: {NO_MODEL_MESSAGE}\n"


def test_run_without_a_model_exits_2_as_a_command() -> None:
    proc = agentfsm("run", "hello")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"agentfsm: error: {NO_MODEL_MESSAGE}\n"


@pytest.mark.parametrize(
    "args",
    [
        ["run", "task", "--config", "missing.toml"],
        ["run", "--config", "missing.toml", "--max-steps", "x", "--tool-choice", "sometimes"],  # and no TASK
        ["run", "--bogus", "--config=missing.toml"],
    ],
)
def test_missing_config_file_is_reported_first(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "agentfsm: error: config file not found: missing.toml\n"


def test_bad_config_value_is_reported_before_other_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "agentfsm.toml").write_text('[agent]\ntool_choice = "sometimes"\n')
    assert cli_main.main(["run", "--max-steps", "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "[agent] tool_choice = 'sometimes' (in agentfsm.toml)" in err


def test_bad_environment_value_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENTFSM_AGENT__MAX_STEPS", "many")
    assert cli_main.main(["run", "task", "--model", "openai/x"]) == 2
    assert "[agent] max_steps = 'many' (from AGENTFSM_AGENT__MAX_STEPS)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "t", "--trace", "no/such/dir/t.jsonl"], "cannot write the trace no/such/dir/t.jsonl"),
        (["run", "t", "--api-base", "localhost:1"], "`api_base` must be a URL"),
    ],
)
def test_unavailable_or_invalid_options_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main.main([*args, "--model", "openai/m"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "args", [[], ["fly"], ["run"], ["run", "t", "--max-steps", "0"], ["demo", "--log-format", "xml"]]
)
def test_argparse_usage_errors_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(args) == 2
    assert capsys.readouterr().out == ""


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(["run", "--help"]) == 0
    assert "--tool-choice" in capsys.readouterr().out


# -- run against an OpenAI-compatible server on 127.0.0.1 ------------------------------------


@pytest.mark.http
def test_run_terminated_prints_only_json_as_a_command(llmock: Any) -> None:
    llmock.call_tool("terminate", {"status": "success"})
    proc = agentfsm(*run_args(llmock, "--json", "--log-format", "json"))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)  # the whole of stdout is one object
    assert (result["state"], result["stop_reason"], result["steps"]) == ("FINISHED", "terminated", 1)
    assert result["usage"]["llm_calls"] == 1
    events = json_lines(proc.stderr)  # every stderr line is a JSON log line
    assert [e["dest"] for e in events if e["event"] == "transition"] == [
        "THINKING",
        "ACTING",
        "OBSERVING",
        "FINISHED",
    ]
    assert KEY not in proc.stdout + proc.stderr
    assert llmock.last_request.model == "test-model"


@pytest.mark.http
@pytest.mark.parametrize("verbose", [False, True], ids=["default", "-v"])
def test_piped_stdout_is_the_answer_and_the_log_a_line_per_transition(llmock: Any, verbose: bool) -> None:
    """Not a terminal (pipes): stdout holds the answer alone; stderr the log, a line per transition
    by default as ever (`-v`: the debug events too), then the summary."""
    llmock.reply("The answer is 42.")
    proc = agentfsm(*run_args(llmock, *(["-v"] * verbose)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "The answer is 42.\n"
    assert proc.stderr.count("] transition ") == 2  # IDLE -> THINKING, THINKING -> FINISHED
    assert ("] llm_call " in proc.stderr) is verbose
    assert proc.stderr.splitlines()[-1].startswith("FINISHED  stop_reason=final_answer  steps=1")


@pytest.mark.http
def test_run_final_answer_human_readable(llmock: Any, capfd: pytest.CaptureFixture[str]) -> None:
    llmock.reply("The answer is 42.")
    assert cli_main.main(run_args(llmock)) == 0
    out, err = capfd.readouterr()
    assert out == "The answer is 42.\n"  # stdout: the answer alone
    summary = err.splitlines()[-1]
    assert summary.startswith("FINISHED  stop_reason=final_answer  steps=1  tokens=")
    assert "cost=" in summary
    assert "transition" in err


@pytest.mark.http
def test_run_final_answer_json(llmock: Any, capfd: pytest.CaptureFixture[str]) -> None:
    llmock.reply("The answer is 42.")
    assert cli_main.main(run_args(llmock, "--json")) == 0
    out, _ = capfd.readouterr()
    result = json.loads(out)
    assert (result["stop_reason"], result["output"]) == ("final_answer", "The answer is 42.")


@pytest.mark.http
def test_run_max_steps_exits_3(llmock: Any, capfd: pytest.CaptureFixture[str]) -> None:
    llmock.call_tool("search", {"query": "anything"})  # a tool the agent does not have: not terminating
    assert cli_main.main(run_args(llmock, "--json", "--max-steps", "1")) == 3
    result = json.loads(capfd.readouterr().out)
    assert (result["state"], result["stop_reason"], result["steps"]) == ("FINISHED", "max_steps", 1)


@pytest.mark.http
def test_run_provider_error_exits_1_with_the_error(llmock: Any, capfd: pytest.CaptureFixture[str]) -> None:
    llmock.fail(400, message="bad request from the test")
    assert cli_main.main(run_args(llmock, "--json")) == 1
    out, err = capfd.readouterr()
    result = json.loads(out)  # nothing else on stdout, not even litellm's banners
    assert (result["state"], result["stop_reason"]) == ("ERROR", "error")
    assert result["error"]
    assert KEY not in out + err


@pytest.mark.http
def test_config_file_agent_table_and_env_reach_the_request(
    tmp_path: Path, llmock: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "run.toml").write_text(
        f'[llm]\nmodel = "openai/general"\napi_key = "{KEY}"\napi_base = "{llmock.base_url("openai")}"\n'
        '[llm.toolcall]\nmodel = "openai/toolcall-model"\n'
        '[llm.manus]\nmodel = "openai/manus-model"\n'
        "[agent]\nmax_steps = 1\n"
    )
    llmock.reply("done")
    assert cli_main.main(["run", "t", "--config", "run.toml", "--json"]) == 0
    assert llmock.last_request.model == "toolcall-model"

    monkeypatch.setenv("AGENTFSM_LLM__TOOLCALL__MODEL", "openai/env-model")
    llmock.reply("done")
    assert cli_main.main(["run", "t", "--config", "run.toml", "--json"]) == 0
    assert llmock.last_request.model == "env-model"

    llmock.reply("done")
    assert cli_main.main(["run", "t", "--config", "run.toml", "--json", "--model", "openai/flag-model"]) == 0
    assert llmock.last_request.model == "flag-model"
    capfd.readouterr()


@pytest.mark.http
def test_run_manus_with_its_toolbox_its_llm_table_and_the_sandbox_settings(
    tmp_path: Path, llmock: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "run.toml").write_text(
        f'[llm.manus]\nmodel = "openai/manus-model"\napi_key = "{KEY}"\n'
        f'api_base = "{llmock.base_url("openai")}"\n'
        '[agent]\nmax_steps = 5\n[sandbox]\nmode = "local"\nlocal_dir = "ws"\n'
    )
    llmock.call_tool("ask_human", {"inquire": "Which number?"})
    llmock.call_tool("python_execute", {"code": "open('out.txt', 'w').write(str(6 * 7)); print(6 * 7)"})
    llmock.call_tool("terminate", {"status": "success"})
    assert cli_main.main(["run", "compute", "--agent", "manus", "--config", "run.toml", "--json"]) == 0
    result = json.loads(capfd.readouterr().out)
    assert (result["state"], result["stop_reason"], result["steps"]) == ("FINISHED", "terminated", 3)
    assert (tmp_path / "ws" / "out.txt").read_text() == "42"  # [sandbox] local_dir was used, and kept
    sent = [record.body for record in llmock.requests]
    assert sent[0]["model"] == "manus-model"
    assert [t["function"]["name"] for t in sent[0]["tools"]] == [
        "python_execute", "bash", "browser_use", "str_replace_editor", "ask_human", "terminate"
    ]  # fmt: skip
    system = json.dumps(sent[0]["messages"][0])
    assert f"The initial directory is: {os.path.realpath(tmp_path / 'ws')}" in system
    observed = [json.dumps(m["content"]) for m in sent[2]["messages"] if m["role"] == "tool"]
    assert "Error: No human is available to answer: 'Which number?'" in observed[0]  # stdin is no tty
    assert observed[1].endswith('executed:\\n42"')


# -- Ctrl-C ------------------------------------------------------------------------------------


@pytest.fixture
def ctrl_c_delivered() -> Iterator[None]:
    """SIGINT as in a terminal: a shell starts background jobs with it ignored, and then
    Python installs no KeyboardInterrupt handler and asyncio.run none of its own."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_ends_the_run_cancelled_with_status_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], ctrl_c_delivered: None
) -> None:
    async def interrupted(request: ModelRequest) -> Any:
        signal.raise_signal(signal.SIGINT)  # what Ctrl-C sends; asyncio.run cancels the run's task
        await asyncio.sleep(30)

    monkeypatch.setattr(config, "build_llm", lambda settings: FunctionLLM(interrupted))
    assert cli_main.main(["run", "t", "--model", "openai/unused", "--json"]) == 130
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert (result["state"], result["stop_reason"]) == ("ERROR", "cancelled")
    assert err.endswith("agentfsm: interrupted\n")
    assert "error: CancelledError" not in err  # one line says it: no second one naming the cancel


def test_ctrl_c_during_a_manus_tool_call_kills_it_and_removes_the_sandbox(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    ctrl_c_delivered: None,
) -> None:
    marker = tmp_path / "started"
    code = (  # the sandboxed process presses Ctrl-C for us, then would run for a minute
        f"import os, signal, time\nopen({str(marker)!r}, 'w').write(f'{{os.getpid()}} {{os.getcwd()}}')\n"
        "os.kill(os.getppid(), signal.SIGINT)\ntime.sleep(60)"
    )
    script = ScriptedLLM([reply(tool_calls=[("python_execute", {"code": code})])])
    monkeypatch.setattr(config, "build_llm", lambda settings: script)
    monkeypatch.setenv("AGENTFSM_SANDBOX__MODE", "local")
    started = time.monotonic()
    assert cli_main.main(["run", "t", "--agent", "manus", "--model", "openai/unused", "--json"]) == 130
    assert time.monotonic() - started < 30
    result = json.loads(capsys.readouterr().out)
    assert (result["state"], result["stop_reason"]) == ("ERROR", "cancelled")
    pid, workspace = marker.read_text().split(" ", 1)
    assert not Path(workspace).exists()
    assert dead(int(pid))


def dead(pid: int) -> bool:
    """Gone, or a zombie waiting to be reaped."""
    try:
        return "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


@pytest.mark.http
@pytest.mark.parametrize(("flags", "adapter"), [((), "OpenAICompatible"), (("--client", "litellm"), "LLM")])
def test_client_flag_picks_the_adapter_that_runs(
    tmp_path: Path, llmock: Any, capfd: pytest.CaptureFixture[str], flags: tuple[str, ...], adapter: str
) -> None:
    llmock.reply("done")
    trace = tmp_path / "run.jsonl"
    assert cli_main.main(run_args(llmock, "--json", "--trace", str(trace), *flags)) == 0
    header = json_lines(trace.read_text())[0]
    assert header["config"]["llm"]["class"] == adapter
    assert llmock.last_request.model == "test-model"
    capfd.readouterr()


@pytest.mark.http
def test_a_run_on_an_openai_model_never_loads_litellm(llmock: Any) -> None:
    code = f"import sys; from agentfsm.cli import main; rc = main({run_args(llmock, '--json')!r}); "
    code += "print('EXIT', rc, 'litellm' in sys.modules, file=sys.stderr)"
    llmock.call_tool("terminate", {"status": "success"})
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "EXIT 0 False" in proc.stderr, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["stop_reason"] == "terminated"
