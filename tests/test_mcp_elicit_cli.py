"""`agentfsm run --agent mcp` with a server that asks for input: the person at the terminal answers."""

from __future__ import annotations

import io
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

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
    assert "not a integer: 'old'" in capsys.readouterr().err
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
