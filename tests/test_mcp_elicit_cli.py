"""`agentfsm run --agent mcp` with a server that asks for input: the person at the terminal answers."""

from __future__ import annotations

import io
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from pty_support import Terminal

from agentfsm.cli import commands as cli_main
from agentfsm.cli.terminal import TerminalInputHandler
from agentfsm.messages import ToolCall
from agentfsm.questions import Answer, Question

pytestmark = pytest.mark.usefixtures("clean_env")

SERVER = Path(__file__).with_name("mcp_elicit_server.py")
CALL = ToolCall.create("call_1", "mcp_el_greet", {})
FORM = Question(
    key="q1",
    message="Who?",
    schema={
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name"],
    },
)


@pytest.mark.parametrize("revision", ["modern", "legacy"])
def test_the_terminal_answers_the_servers_question(
    revision: str, llmock: Any, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("Ada\n"))
    llmock.call_tool("mcp_el_greet", {})
    llmock.call_tool("terminate", {"status": "success"})
    command = shlex.join([sys.executable, str(SERVER), revision, "stdio"])
    args = ["run", "greet me", "--model", "openai/test-model", "--api-base", llmock.base_url("openai"),
            "--api-key", "k", "--json", "--agent", "mcp", "--mcp-server", f"el={command}"]  # fmt: skip
    status = cli_main.main(args)
    captured = capfd.readouterr()
    assert status == 0, captured.err
    assert json.loads(captured.out)["stop_reason"] == "terminated"
    assert "Input needed by mcp_el_greet" in captured.err and "What is your name?" in captured.err
    assert "hello Ada" in json.dumps(llmock.requests[-1].body)


async def test_the_terminal_handler_types_the_fields_and_declines_or_cancels(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    handler = TerminalInputHandler()
    monkeypatch.setattr(sys, "stdin", io.StringIO("Ada\nold\n42\n"))
    assert await handler(CALL, FORM) == Answer.accept({"name": "Ada", "age": 42})
    assert "'old' is not an integer; asking again" in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdin", io.StringIO("Ada\n\n"))
    assert await handler(CALL, FORM) == Answer.accept({"name": "Ada"})  # the optional field left out
    monkeypatch.setattr(sys, "stdin", io.StringIO("d\n"))
    assert await handler(CALL, FORM) == Answer.decline()
    monkeypatch.setattr(sys, "stdin", io.StringIO("c\n"))
    assert await handler(CALL, FORM) == Answer.cancel()
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert await handler(CALL, FORM) == Answer.cancel()  # nobody there
    link = Question(key="q2", message="Sign in", url="https://example.invalid/login")
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    assert await handler(CALL, link) == Answer.accept()
    assert "open: https://example.invalid/login" in capsys.readouterr().err


def _answer(terminal: Terminal, keys: str, since: int, *shown: str) -> int:
    """Wait until the terminal has shown each of `shown`, in order, after offset `since` (keys typed
    before the prompt would be thrown away), then type `keys` and Enter; the offset typed at."""
    for text in shown:
        terminal.read_until(text, since=since)
        since = terminal.seen.index(text.encode(), since) + len(text.encode())
    at = len(terminal.seen)
    terminal.type(keys + "\r")
    return at


@pytest.mark.http
def test_on_a_terminal_the_form_shows_choices_and_defaults_checks_each_answer_and_asks_again(
    llmock: Any, tmp_path: Path
) -> None:
    llmock.call_tool("mcp_el_profile", {})
    llmock.call_tool("mcp_el_survey", {})
    llmock.call_tool("terminate", {"status": "success"})
    command = shlex.join([sys.executable, str(SERVER), "legacy", "stdio"])
    argv = [sys.executable, "-m", "agentfsm", "run", "ask me", "--model", "openai/test-model",
            "--api-base", llmock.base_url("openai"), "--api-key", "k", "--agent", "mcp",
            "--mcp-server", f"el={command}"]  # fmt: skip
    terminal = Terminal(argv, cwd=str(tmp_path))
    again = "; asking again"
    try:
        at = 0
        for prompt in ('Name (string, Enter for "John Doe"): ', "Age (integer, Enter for 30): ",
                       "Score (number, Enter for 95.5): ", 'Status (number or value, Enter for "active"): ',
                       "Verified (boolean, Enter for true): "):  # fmt: skip
            at = _answer(terminal, "", at, prompt)  # Enter: each default
        at = _answer(terminal, "A", at, "Name (string): ")
        at = _answer(
            terminal, "Ada", at, "Name takes at least 2 characters (got 1)" + again, "Name (string): "
        )
        at = _answer(terminal, "", at, "Age (integer): ")
        at = _answer(terminal, "200", at, "Age is required" + again, "Age (integer): ")
        at = _answer(terminal, "old", at, "Age is at most 150 (got 200)" + again, "Age (integer): ")
        at = _answer(terminal, "36", at, "'old' is not an integer" + again, "Age (integer): ")
        colours = "Colours (numbers or values, Enter for red): "
        at = _answer(
            terminal,
            "2, purple",
            at,
            "Colours, choose any, comma separated: 1) Red  2) Green  3) Blue",
            colours,
        )
        at = _answer(terminal, "2, blue", at, "'purple' is not one of the choices of Colours", colours)
        at = _answer(
            terminal,
            "",
            at,
            "Plan, choose one: 1) free  2) pro",
            'Plan (number or value, Enter for "free"): ',
        )
        assert terminal.wait() == 0, terminal.text()
    finally:
        terminal.close()
    sent = [m["content"] for m in llmock.requests[-1].body["messages"] if m["role"] == "tool"]
    profile, survey = (json.loads(text.split("\n", 1)[1]) for text in sent)
    assert profile == {"name": "John Doe", "age": 30, "score": 95.5, "status": "active", "verified": True}
    assert survey == {"name": "Ada", "age": 36, "colours": ["green", "blue"], "plan": "free"}


async def test_the_terminal_handler_reads_titled_choices_booleans_and_formats(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    plans = [{"const": "free", "title": "Free plan"}, {"const": "pro", "title": "Pro plan"}]
    form = Question(
        key="q1",
        message="Sign up",
        schema={
            "type": "object",
            "properties": {
                "plan": {"type": "string", "oneOf": plans},
                "size": {"type": "string", "enum": ["s", "l"], "enumNames": ["Small", "Large"]},
                "email": {"type": "string", "format": "email"},
                "news": {"type": "boolean", "default": False},
            },
            "required": ["plan", "size", "email"],
        },
    )
    monkeypatch.setattr(sys, "stdin", io.StringIO("3\nPro plan\nlarge\nada\nada@example.org\n\n"))
    assert await TerminalInputHandler()(CALL, form) == Answer.accept(
        {"plan": "pro", "size": "l", "email": "ada@example.org", "news": False}
    )
    err = capsys.readouterr().err
    assert (
        "plan, choose one: 1) Free plan  2) Pro plan" in err and "size, choose one: 1) Small  2) Large" in err
    )
    assert "'3' is not one of the choices of plan: 1 Free plan, 2 Pro plan; asking again" in err
    assert "email takes an email (like name@example.org), not 'ada'; asking again" in err
    assert "news (boolean, Enter for false): " in err
