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
    terminal = Terminal(agentfsm(llmock, "run", "-v"))  # -v: the transition lines on the terminal
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


@pytest.mark.parametrize(
    ("flags", "transitions", "debug_events"),
    [((), False, False), (("-v",), True, False), (("-vv",), True, True)],
    ids=["default", "-v", "-vv"],
)
def test_on_a_terminal_the_log_keeps_to_warnings_unless_v_and_stdout_to_the_answer(
    llmock: Any, tmp_path: Any, flags: tuple[str, ...], transitions: bool, debug_events: bool
) -> None:
    """stderr on the terminal, stdout to a file (`> answer`): the answer alone in the file; on the
    screen the live view and the summary, the transition lines only with -v, debug events -vv."""
    llmock.reply("The answer is 42.")
    with open(tmp_path / "answer", "wb") as answer:
        terminal = Terminal(agentfsm(llmock, "run", *flags), stdout=answer)
        try:
            assert terminal.wait() == 0
        finally:
            terminal.close()
    assert (tmp_path / "answer").read_text() == "The answer is 42.\n"
    screen = "\n".join(terminal.pieces())  # without the colours
    assert ("] transition " in screen) is transitions, screen
    assert ("] llm_call " in screen) is debug_events, screen
    assert terminal.pieces()[-1].startswith("FINISHED  stop_reason=final_answer  steps=1")
    assert "The answer is 42." not in screen and "(no output)" not in screen


def test_the_debugger_on_a_terminal_logs_no_transitions_it_prints_itself(llmock: Any) -> None:
    llmock.call_tool("terminate", {"status": "success"})
    terminal = Terminal(agentfsm(llmock, "debug"))
    try:
        terminal.read_until("(agentfsm) ")
        terminal.type("continue\n")
        assert terminal.wait() == 0
    finally:
        terminal.close()
    screen = "\n".join(terminal.pieces())
    assert "run ended: FINISHED (terminated)" in screen
    assert "OBSERVING -> FINISHED  observe_done  step 1" in screen  # the debugger's own line
    assert "] transition " not in screen and "[info" not in screen  # and not the log's too


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


def test_a_key_typed_before_the_approval_prompt_does_not_approve(llmock: Any) -> None:
    llmock.delay(1.5).call_tool("terminate", {"status": "success"})
    terminal = Terminal(agentfsm(llmock, "run", "--require-approval", "terminate"))
    try:
        terminal.read_until("THINKING")
        terminal.type("y\n")  # while the model thinks, nothing is asked yet
        terminal.read_until("approve? [y]es")
        terminal.read_for(1.0)
        assert terminal.proc.poll() is None  # still asking: the early y was thrown away
        assert "FINISHED" not in terminal.text()
        mark = len(terminal.seen)
        terminal.type("y\n")
        assert terminal.wait() == 0
        assert "stop_reason=terminated" in terminal.text()[mark:]
    finally:
        terminal.close()
    pieces = terminal.pieces()
    assert sum("terminate(" in p for p in pieces) == 1, pieces  # the call is shown once: in the question
    assert any(p.startswith("Approval needed: terminate(") for p in pieces)


def test_with_stderr_redirected_the_question_is_asked_on_the_terminal(llmock: Any, tmp_path: Any) -> None:
    llmock.call_tool("terminate", {"status": "success"})
    with open(tmp_path / "log", "wb") as log:
        terminal = Terminal(agentfsm(llmock, "run", "--require-approval", "terminate"), stderr=log)
        try:
            terminal.read_until("approve? [y]es")
            terminal.type("y\n")
            assert terminal.wait() == 0
        finally:
            terminal.close()
    assert "Approval needed: terminate(" in terminal.text()
    logged = (tmp_path / "log").read_text()
    assert "approve?" not in logged and "] transition " in logged  # the log went to the file
    assert "stop_reason=terminated" in logged  # and the summary, said of the run, with it


UP = "\x1b[A"


def test_the_debugger_edits_lines_recalls_commands_and_quits_with_130(llmock: Any) -> None:
    llmock.delay(2.5).call_tool("terminate", {"status": "success"})
    terminal = Terminal(agentfsm(llmock, "debug"))
    try:
        terminal.read_until("(agentfsm) ")
        for command, expect in (("stat\n", "unknown command 'stat'"), ("step\n", "IDLE -> THINKING")):
            mark = len(terminal.seen)
            terminal.type(command)
            terminal.read_until(expect, since=mark)
            terminal.read_until("(agentfsm) ", since=mark)
        mark = len(terminal.seen)
        terminal.type("state" + "\x7f" * 5 + UP + "\n")  # typed, erased, then the last command again
        terminal.read_until("waiting for the model (THINKING, step 1)", since=mark)  # it was `step`
        terminal.read_until("THINKING -> ACTING  think_done  step 1", since=mark)
        terminal.read_until("(agentfsm) ", since=mark)
        mark = len(terminal.seen)
        terminal.type(UP + UP + "\n")  # two back: the misspelt command, recalled as it was typed
        terminal.read_until("unknown command 'stat'", since=mark)
        terminal.read_until("(agentfsm) ", since=mark)
        mark = len(terminal.seen)
        terminal.type("quit\n")
        assert terminal.wait() == 130
    finally:
        terminal.close()
    after_quit = terminal.pieces(since=mark)
    assert after_quit[-1].startswith("ERROR  stop_reason=cancelled  steps=1")
    assert not [p for p in after_quit if p.startswith(("agentfsm: error", "error:"))]  # no error line


def test_the_debugger_takes_a_number_of_steps(llmock: Any) -> None:
    llmock.call_tool("terminate", {"status": "success"})
    terminal = Terminal(agentfsm(llmock, "debug"))
    try:
        terminal.read_until("(agentfsm) ")
        mark = len(terminal.seen)
        terminal.type("step 3\n")
        terminal.read_until("ACTING -> OBSERVING  act_done  step 1", since=mark)
        terminal.read_until("(agentfsm) ", since=mark)
        shown = terminal.text()[mark:]
        assert "IDLE -> THINKING" in shown and "THINKING -> ACTING" in shown
        assert "OBSERVING -> FINISHED" not in shown  # three transitions, not four
        mark = len(terminal.seen)
        terminal.type("step x\n")
        terminal.read_until("usage: step [N]", since=mark)
        terminal.type("continue\n")
        assert terminal.wait() == 0
    finally:
        terminal.close()


def test_with_stdin_redirected_ask_human_asks_on_the_terminal(llmock: Any, tmp_path: Any) -> None:
    llmock.call_tool("ask_human", {"inquire": "Which number?"})
    llmock.call_tool("terminate", {"status": "success"})
    env = {**os.environ, "AGENTFSM_SANDBOX__MODE": "local"}
    with open(os.devnull, "rb") as nothing:
        terminal = Terminal(
            agentfsm(llmock, "run", "--agent", "manus"), env=env, cwd=str(tmp_path), stdin=nothing
        )
        try:
            terminal.read_until("Bot: Which number?")
            terminal.read_until("You: ")
            terminal.type("forty-two\n")
            assert terminal.wait() == 0
        finally:
            terminal.close()
    answered = [m["content"] for m in llmock.requests[1].body["messages"] if m["role"] == "tool"]
    assert answered == ["Observed output of cmd `ask_human` executed:\nforty-two"]
