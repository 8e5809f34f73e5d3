"""Streaming at the command line and on the terminal: `agentfsm run --stream` (the model's text on
stdout, nothing else there), `[llm] stream = true`, the live view and the debugger showing a turn
as it arrives."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from llmock.scenarios import Reply, StreamFault
from llmock.scenarios import ToolCall as MockCall
from rich.console import Console

from agentfsm import TextDelta, ToolCallAgent, Transition
from agentfsm.cli.config import Settings, build_llm
from agentfsm.cli.debugger import Debugger
from agentfsm.cli.live import LiveView
from agentfsm.testing import ScriptedLLM, reply

pytestmark = pytest.mark.usefixtures("clean_env")

ANSWER = "The answer is 42, and that is all."


def agentfsm(llmock: Any, *extra: str) -> subprocess.CompletedProcess[str]:
    args = ["run", "answer", "--model", "openai/test-model", "--api-base", llmock.base_url("openai"),
            "--api-key", "test", *extra]  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "agentfsm", *args], capture_output=True, text=True, timeout=120, env=os.environ
    )


@pytest.mark.http
@pytest.mark.parametrize("client", ["native", "litellm"])
def test_run_stream_prints_the_model_s_text_on_stdout_alone(llmock: Any, client: str) -> None:
    llmock.add(Reply(text="Let me look first.", tool_calls=(MockCall("look", {"at": "it"}),)))
    llmock.add(Reply(text=ANSWER))

    proc = agentfsm(llmock, "--stream", "--client", client, "--log-format", "json")

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"Let me look first.\n{ANSWER}\n"  # each turn's text, and nothing else
    assert "stop_reason=final_answer" in proc.stderr and "llm_calls=2" in proc.stderr
    assert all(request.body["stream"] is True for request in llmock.requests)


@pytest.mark.http
def test_run_stream_starts_a_broken_reply_again_on_a_new_line(llmock: Any) -> None:
    llmock.add(Reply(text=ANSWER, times=2))
    llmock.add(StreamFault("disconnect", after_chunks=3))

    proc = agentfsm(llmock, "--stream")

    assert proc.returncode == 0, proc.stderr
    partial, whole, end = proc.stdout.split("\n")
    assert ANSWER.startswith(partial) and partial != ANSWER
    assert (whole, end) == (ANSWER, "")
    assert "the model's reply broke off; asking again" in proc.stderr


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--json", "--stream prints the model's text on stdout, --json the result: choose one"),
        (
            "--flow=planning",
            "--stream prints one agent's text; a flow's runs are not streamed: drop --stream",
        ),
    ],
)
def test_stream_is_refused_with_json_and_with_a_flow(
    flag: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentfsm.cli.commands import main

    code = main(["run", "x", "--model", "openai/m", "--api-base", "http://127.0.0.1:9/v1", "--stream", flag])

    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == f"agentfsm: error: {message}\n"


def test_the_config_and_the_environment_turn_streaming_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "agentfsm.toml"
    config.write_text('[llm]\nmodel = "openai/m"\napi_base = "http://127.0.0.1:9/v1"\nstream = true\n')
    assert build_llm(Settings.load(config).llm_for("toolcall")).stream is True
    config.write_text('[llm]\nmodel = "openai/m"\n')
    assert build_llm(Settings.load(config).llm_for("toolcall")).stream is False
    monkeypatch.setenv("AGENTFSM_LLM__STREAM", "true")
    assert build_llm(Settings.load(config).llm_for("toolcall")).stream is True


async def test_the_debugger_shows_a_turn_as_it_streams(toolbox) -> None:
    script = [
        reply("adding them", tool_calls=[("add", {"a": 2, "b": 3})]),
        reply(tool_calls=[("terminate", {"status": "success"})]),
    ]
    agent = ToolCallAgent(llm=ScriptedLLM(script, stream=True), tools=toolbox)
    commands = ["step", "step", "continue"]

    async def read(prompt: str) -> str | None:
        return commands.pop(0) if commands else None

    out = io.StringIO()
    await Debugger(agent, "add 2 and 3", read_line=read, out=out).run()

    text = out.getvalue()
    assert 'model: adding them\n    call add {"a": 2, "b": 3}\nTHINKING -> ACTING  think_done  step 1' in text
    assert 'model: \n    call terminate {"status": "success"}\n' in text


async def test_the_debugger_says_why_a_turn_waits_when_the_model_call_is_retried(llmock: Any) -> None:
    from agentfsm import OpenAICompatible

    llmock.fail(503, times=1, retry_after=0.05)
    llmock.reply(ANSWER)
    llm = OpenAICompatible("openai/test-model", api_base=llmock.base_url("openai"), api_key="k", stream=True)
    agent = ToolCallAgent(llm=llm)
    commands = ["continue"]

    async def read(prompt: str) -> str | None:
        return commands.pop(0) if commands else None

    out = io.StringIO()
    try:
        result = await Debugger(agent, "the answer?", read_line=read, out=out).run()
    finally:
        await llm.aclose()

    assert result is not None and result.output == ANSWER
    text = out.getvalue()
    retried = text.index("model: attempt 1 failed (ProviderError: HTTP 503")
    assert "; retrying in 0.1 s\n" in text[retried:]
    assert text.index(f"model: {ANSWER}") > retried  # the answer streams after the retry


async def test_the_live_view_shows_the_model_s_text_as_it_arrives(toolbox) -> None:
    script = [reply("adding two and three now", tool_calls=[("add", {"a": 2, "b": 3})]), reply("five")]
    agent = ToolCallAgent(llm=ScriptedLLM(script, stream=True), tools=toolbox)
    view = LiveView(agent, console=Console(file=io.StringIO(), force_terminal=True, width=120))
    while_streaming: list[str] = []
    after_edges: list[str] = []
    agent.on_event(lambda e: while_streaming.append(view.status_line()) if isinstance(e, TextDelta) else None)
    agent.on_event(lambda e: after_edges.append(view.status_line()) if isinstance(e, Transition) else None)

    with view:
        await agent.run("add")

    assert while_streaming[0].endswith("\nadding")  # the first piece, under the status
    assert any(status.endswith("\nadding two and three now") for status in while_streaming)
    assert while_streaming[-1].endswith("\nfive")  # a new turn starts its text again
    assert all("adding" not in status for status in after_edges)  # an edge ends the turn's text
