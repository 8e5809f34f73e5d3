"""The command as a person at a terminal meets it, on a real pseudo-terminal with logging on: the
live view and the log sharing one screen, approval prompts, the debugger's line editing."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest
from pty_support import Terminal

pytestmark = pytest.mark.http

KEY = "test-key-5e1d0b"
STATUS = " tool calls"
"""The end of every status line of the live view."""


def agentfsm(llmock: Any, command: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "agentfsm", command, "do the task",
        "--model", "openai/test-model", "--api-base", llmock.base_url("openai"), "--api-key", KEY,
        *extra,
    ]  # fmt: skip


def test_the_live_view_and_the_log_share_the_screen(llmock: Any) -> None:
    llmock.delay(1.5).call_tool("search", {"query": "x"})  # a slow think, then a tool it does not have
    llmock.call_tool("terminate", {"status": "success"})
    terminal = Terminal(agentfsm(llmock, "run"))
    try:
        assert terminal.wait() == 0
    finally:
        terminal.close()
    pieces = terminal.pieces()
    statuses = [p for p in pieces if p.endswith(STATUS)]
    logs = [p for p in pieces if "[info" in p]
    assert logs and statuses
    glued = [p for p in pieces if (STATUS in p or "waiting for" in p) and ("[info" in p or "agentfsm]" in p)]
    assert glued == []  # no log text inside a status line
    # While the model thinks, the status says so, and its clock moves.
    waiting = [p for p in statuses if "THINKING · step 1/30 · " in p and "waiting for the model" in p]
    assert len({p.split(" · ")[2] for p in waiting}) >= 5, pieces
    # Each event updates it: the state after each tool call is the one the run is in.
    after_search = pieces.index(next(p for p in pieces if p.startswith("✗ search (")))
    next_status = next(p for p in pieces[after_search:] if p.endswith(STATUS))
    assert "OBSERVING · step 1/30" in next_status and "1 tool calls" in next_status
    assert any(p.startswith("FINISHED · step 2/30 · ") for p in statuses)
    assert sum(p.startswith("→ search(") for p in pieces) == 1  # each call once
    assert pieces[-1].startswith("FINISHED  stop_reason=terminated  steps=2")


def test_quiet_keeps_the_log_to_warnings(llmock: Any) -> None:
    llmock.call_tool("terminate", {"status": "success"})
    terminal = Terminal(agentfsm(llmock, "run", "-q"))
    try:
        assert terminal.wait() == 0
    finally:
        terminal.close()
    assert "[info" not in terminal.text()
    assert terminal.pieces()[-1].startswith("FINISHED  stop_reason=terminated")


def test_demo_shows_each_transition_once() -> None:
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    terminal = Terminal([sys.executable, "-m", "agentfsm", "demo"], env=env)
    try:
        assert terminal.wait() == 0
    finally:
        terminal.close()
    pieces = terminal.pieces()
    assert sum(p.startswith("THINKING -> ACTING  think_done") for p in pieces) == 4
    assert "transition" not in terminal.text() and STATUS not in terminal.text()
