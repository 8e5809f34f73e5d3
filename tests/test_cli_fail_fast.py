"""Mistakes fail fast through the real `agentfsm` command, and say why: a missing key, a dead
port, a refused key. Errors go to stderr, never stdout; the model settings' flags apply."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

import pytest

from agentfsm.cli import commands as cli_main
from agentfsm.cli.parser import build_parser

pytestmark = pytest.mark.usefixtures("clean_env")

_KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")


def agentfsm(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """`python -m agentfsm ARGS` with no provider keys in the environment; the result and seconds."""
    env = {k: v for k, v in os.environ.items() if k not in _KEY_VARIABLES}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "agentfsm", *args], capture_output=True, text=True, timeout=120, env=env
    )
    return proc, time.monotonic() - started


def dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("model", "variable"),
    [("openai/gpt-4o-mini", "OPENAI_API_KEY"), ("anthropic/claude-sonnet-4-5", "ANTHROPIC_API_KEY")],
)
def test_a_missing_key_exits_2_naming_the_variable_before_any_run(model: str, variable: str) -> None:
    proc, seconds = agentfsm("run", "hi", "--model", model, "--json")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == (
        f"agentfsm: error: {variable} is not set (model {model!r}): export it or pass --api-key\n"
    )
    assert seconds < 5


def test_a_missing_key_of_another_provider_is_named_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The variable of each provider is named (in-process, two in a row)."""
    for name in _KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert cli_main.main(["run", "hi", "--model", "anthropic/claude-sonnet-4-5"]) == 2
    assert cli_main.main(["run", "hi", "--model", "gemini/gemini-2.5-flash"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "agentfsm: error: ANTHROPIC_API_KEY is not set (model 'anthropic/claude-sonnet-4-5'): "
        "export it or pass --api-key",
        "agentfsm: error: GEMINI_API_KEY (or GOOGLE_API_KEY) is not set (model 'gemini/gemini-2.5-flash'): "
        "export it or pass --api-key",
    ]


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_dead_port_ends_in_seconds_naming_the_url_on_stderr(as_json: bool) -> None:
    base = f"http://127.0.0.1:{dead_port()}/v1"
    proc, seconds = agentfsm("run", "hi", "--model", "openai/x", "--api-base", base, *(["--json"] * as_json))
    assert proc.returncode == 1
    assert seconds < 5
    message = (
        f"agentfsm: error: LLMError: openai/x: cannot connect to {base}/chat/completions "
        "(connection refused) after 2 attempts; the server has never answered: "
        "check the URL and that it is running"
    )
    assert proc.stderr.splitlines()[-1] == message
    if as_json:
        result = json.loads(proc.stdout)  # the object keeps the error; nothing else on stdout
        assert result["state"] == "ERROR" and "cannot connect to" in result["error"]
    else:
        assert proc.stdout == ""  # no answer: nothing on stdout, what is said of the run on stderr
        assert proc.stderr.splitlines()[-3:] == [
            "(no output)",
            "ERROR  stop_reason=error  steps=1  tokens=0 (0 in, 0 out)  llm_calls=0  tool_calls=0  cost=n/a",
            message,
        ]


@pytest.mark.http
def test_api_base_without_a_key_reaches_a_server_that_wants_none(llmock: Any) -> None:
    """A local vLLM or llama.cpp server needs no key: `--api-base` alone works (a placeholder is sent)."""
    llmock.reply("hello from a keyless server")
    proc, _ = agentfsm(
        "run", "hi", "--model", "openai/local", "--api-base", llmock.base_url("openai"), "--json"
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["output"] == "hello from a keyless server"


@pytest.mark.http
def test_a_refused_key_is_one_attempt_and_says_to_check_it(
    llmock: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    llmock.fail(401, times=None)
    args = ["run", "hi", "--model", "openai/x", "--api-base", llmock.base_url("openai"), "--api-key", "wrong"]
    assert cli_main.main(args) == 1
    out, err = capfd.readouterr()
    assert len(llmock.requests) == 1
    assert "HTTP 401" in err and "check the API key" in err
    assert "HTTP 401" not in out
    assert "wrong" not in out + err


@pytest.mark.http
def test_model_flags_reach_the_request(llmock: Any, capfd: pytest.CaptureFixture[str]) -> None:
    llmock.reply("ok")
    args = ["run", "hi", "--model", "openai/x", "--api-base", llmock.base_url("openai"), "--api-key", "k"]
    args += ["--extra", "seed=7", "--extra", 'extra_body={"team": "blue"}', "--retry-timeout", "7", "--json"]
    assert cli_main.main(args) == 0
    body = llmock.requests[0].body
    assert (body["seed"], body["team"]) == (7, "blue")
    capfd.readouterr()


def test_model_flags_parse_into_the_llm_options() -> None:
    args = build_parser().parse_args(
        [
            "run",
            "t",
            "--api-version",
            "2024-10-21",
            "--extra",
            "seed=7",
            "--extra",
            "n=1",
            "--retry-timeout",
            "2.5",
        ]
    )
    assert (args.api_version, args.extra, args.retry_timeout) == ("2024-10-21", {"seed": 7, "n": 1}, 2.5)


@pytest.mark.parametrize(
    "flags",
    [["--extra", "no-equals-sign"], ["--extra", "=1"], ["--retry-timeout", "0"], ["--retry-timeout", "x"]],
)
def test_bad_model_flags_exit_2(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main.main(["run", "t", "--model", "openai/x", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentfsm run: error: argument") and err.count("\n") == 1


def test_api_version_extra_and_retry_timeout_from_the_file_and_per_agent(tmp_path: Any) -> None:
    from agentfsm.cli.config import Settings, build_llm

    path = tmp_path / "c.toml"
    path.write_text(
        '[llm]\nmodel = "azure/dep"\napi_version = "2024-06-01"\nretry_timeout = 30\n'
        "[llm.extra]\nseed = 7\n"
        '[llm.toolcall]\napi_version = "2024-10-21"\n'
        '[llm.toolcall.extra]\nextra_headers = {X-Team = "blue"}\n'
    )
    settings = Settings.load(path)
    manus, toolcall = build_llm(settings.llm_for("manus")), build_llm(settings.llm_for("toolcall"))
    assert (manus.api_version, manus.extra, manus.retry_timeout) == ("2024-06-01", {"seed": 7}, 30.0)
    assert (toolcall.api_version, toolcall.extra) == ("2024-10-21", {"extra_headers": {"X-Team": "blue"}})


def test_ctrl_c_during_the_credential_check_exits_130_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentfsm.model import credentials

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt  # what Ctrl-C does while litellm imports

    monkeypatch.setattr(credentials, "check_credentials", interrupted)
    assert cli_main.main(["run", "hi", "--model", "anthropic/claude-sonnet-4-5"]) == 130
    assert capsys.readouterr() == ("", "agentfsm: interrupted\n")


_NO_LITELLM = (
    "import sys; from agentfsm.cli.commands import main; status = main(sys.argv[1:]); "
    "print('litellm' in sys.modules); sys.exit(status)"
)


@pytest.mark.http
def test_a_bare_model_name_for_a_local_server_says_to_write_openai_before_the_run(llmock: Any) -> None:
    """``--model gpt-oss --api-base http://127.0.0.1:PORT/v1`` was a missing-key message after
    litellm's import (seconds): now one line naming the fix, litellm never imported, no request."""
    env = {k: v for k, v in os.environ.items() if k not in _KEY_VARIABLES}
    base = llmock.base_url("openai")
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", _NO_LITELLM, "run", "hi", "--model", "gpt-oss", "--api-base", base, "--json"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    seconds = time.monotonic() - started
    assert proc.returncode == 2
    assert proc.stdout == "False\n"  # litellm was not imported: nothing but the result's line
    assert proc.stderr == (
        f"agentfsm: error: model 'gpt-oss' names no provider: for the OpenAI-compatible server at {base} "
        "write it 'openai/gpt-oss'; for another provider, PROVIDER/NAME (litellm's providers: "
        "https://docs.litellm.ai/docs/providers)\n"
    )
    assert llmock.requests == []
    assert seconds < 3  # a Python start and agentfsm's import (about half a second here)


def test_a_bare_name_the_map_files_under_openai_is_openai_s_offline() -> None:
    """``gpt-4o-mini`` is OpenAI's to litellm too: its missing key is named without importing litellm."""
    env = {k: v for k, v in os.environ.items() if k not in _KEY_VARIABLES}
    proc = subprocess.run(
        [sys.executable, "-c", _NO_LITELLM, "run", "hi", "--model", "gpt-4o-mini"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (2, "False\n")
    assert proc.stderr == (
        "agentfsm: error: OPENAI_API_KEY is not set (model 'gpt-4o-mini'): export it or pass --api-key\n"
    )


_UNKNOWN = (
    "model 'nosuch/x': 'nosuch' is not a provider litellm knows; its providers are listed at "
    "https://docs.litellm.ai/docs/providers, and 'openai/NAME' reaches any OpenAI-compatible server"
)


@pytest.mark.parametrize(
    ("model", "wanted"),
    [
        ("nosuch/x", _UNKNOWN),
        (
            "antropic/claude-sonnet-4-5",
            "'antropic' is not a provider litellm knows (did you mean 'anthropic'",
        ),
    ],
)
def test_an_unknown_provider_exits_2_before_the_run_naming_it(model: str, wanted: str) -> None:
    proc, _ = agentfsm("run", "hi", "--model", model, "--json")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("agentfsm: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert wanted in proc.stderr
    assert "transition" not in proc.stderr and "Traceback" not in proc.stderr  # no run started
