"""Every way out of a prompt at the terminal leaves the terminal as it was: Ctrl-C (the byte the
terminal driver turns into SIGINT), Ctrl-D and an exception, at the debugger's readline prompt,
while the debugger's run moves, under `replay --step`, and at `run`'s approval question. Ctrl-C
exits 130. Each runs the real command on a pseudo-terminal and reads the pty's modes after the
command has exited."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pty_support import Terminal

from agentfsm import ToolCallAgent
from agentfsm.testing import ScriptedLLM, reply

CTRL_C, CTRL_D = "\x03", "\x04"
COOKED = {"icanon": True, "echo": True, "icrnl": True}
"""A terminal as a shell leaves it for a program: Enter ends a line, typing is echoed."""
PASTE_ON, PASTE_OFF = b"\x1b[?2004h", b"\x1b[?2004l"


def agentfsm(llmock: Any, command: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "agentfsm", command, "do the task",
        "--model", "openai/test-model", "--api-base", llmock.base_url("openai"), "--api-key", "test",
        *extra,
    ]  # fmt: skip


def at_the_prompt(terminal: Terminal, since: int = 0) -> None:
    """Wait for the debugger's prompt, and until readline holds the terminal (its own modes)."""
    terminal.read_until("(agentfsm) ", since=since)
    terminal.read_for(0.3)
    assert terminal.modes() == {"icanon": False, "echo": False, "icrnl": False}  # readline's


def assert_left_as_found(terminal: Terminal) -> None:
    assert terminal.modes() == COOKED, terminal.text()
    seen = bytes(terminal.seen)
    if PASTE_ON in seen:  # readline turned bracketed paste on: it is off again at the end
        assert seen.rfind(PASTE_OFF) > seen.rfind(PASTE_ON), seen[-200:]


@pytest.mark.http
def test_ctrl_c_at_the_debugger_prompt_exits_130_and_gives_the_terminal_back(llmock: Any) -> None:
    llmock.call_tool("terminate", {"status": "success"})
    terminal = Terminal(agentfsm(llmock, "debug"))
    try:
        assert terminal.modes() == COOKED
        at_the_prompt(terminal)
        mark = len(terminal.seen)
        terminal.type("step\n")
        terminal.read_until("IDLE -> THINKING  start  step 1", since=mark)
        at_the_prompt(terminal, since=mark)
        mark = len(terminal.seen)
        terminal.type(CTRL_C)
        assert terminal.wait() == 130
        assert_left_as_found(terminal)
    finally:
        terminal.close()
    after = terminal.pieces(since=mark)
    assert after[-2].startswith("ERROR  stop_reason=cancelled  steps=1  tokens="), after
    assert after[-1] == "agentfsm: interrupted"
    assert not [p for p in after if "agentfsm: error" in p]  # the person ended it: no error line


@pytest.mark.http
def test_ctrl_c_before_the_first_transition_exits_130(llmock: Any) -> None:
    terminal = Terminal(agentfsm(llmock, "debug"))
    try:
        at_the_prompt(terminal)
        terminal.type(CTRL_C)
        assert terminal.wait() == 130
        assert_left_as_found(terminal)
    finally:
        terminal.close()
    assert terminal.pieces()[-1] == "agentfsm: interrupted"


@pytest.mark.http
def test_ctrl_c_while_the_debugger_waits_for_the_model_exits_130(llmock: Any) -> None:
    llmock.delay(5.0).call_tool("terminate", {"status": "success"})
    terminal = Terminal(agentfsm(llmock, "debug"))
    try:
        at_the_prompt(terminal)
        mark = len(terminal.seen)
        terminal.type("step 2\n")  # the second transition asks the model, which takes 5 s
        terminal.read_until("waiting for the model (THINKING, step 1)", since=mark)
        terminal.type(CTRL_C)
        assert terminal.wait() == 130
        assert_left_as_found(terminal)
    finally:
        terminal.close()
    after = terminal.pieces(since=mark)
    assert after[-1] == "agentfsm: interrupted", after
    assert any(p.startswith("ERROR  stop_reason=cancelled  steps=1") for p in after)
    assert not [p for p in after if "agentfsm: error" in p]


@pytest.mark.http
def test_ctrl_d_at_the_debugger_prompt_quits_with_130(llmock: Any) -> None:
    llmock.call_tool("terminate", {"status": "success"})
    terminal = Terminal(agentfsm(llmock, "debug"))
    try:
        at_the_prompt(terminal)
        terminal.type(CTRL_D)
        assert terminal.wait() == 130
        assert_left_as_found(terminal)
    finally:
        terminal.close()
    assert "end of input: quitting" in terminal.text()


def test_ctrl_c_at_the_replay_step_prompt_exits_130(tmp_path: Path, toolbox: Any) -> None:
    trace = tmp_path / "run.jsonl"
    script = [reply("adding", tool_calls=[("add", {"a": 2, "b": 3})])]
    script.append(reply(tool_calls=[("terminate", {"status": "success"})]))
    asyncio.run(ToolCallAgent(llm=ScriptedLLM(script), tools=toolbox).run("do it", trace=trace))
    terminal = Terminal([sys.executable, "-m", "agentfsm", "replay", str(trace), "--step"])
    try:
        at_the_prompt(terminal)
        mark = len(terminal.seen)
        terminal.type("step 2\n")
        terminal.read_until("THINKING -> ACTING  think_done  step 1", since=mark)
        at_the_prompt(terminal, since=mark)
        terminal.type(CTRL_C)
        assert terminal.wait() == 130
        assert_left_as_found(terminal)
    finally:
        terminal.close()
    assert terminal.pieces()[-1] == "agentfsm: interrupted"
    assert "the trace ends early" not in terminal.text()  # the person stopped it, not the trace


FAILING_SESSION = textwrap.dedent(
    """
    import asyncio, sys
    from agentfsm import Terminate, ToolCallAgent, ToolCollection
    from agentfsm.cli.debugger import debug_command, read_stdin_line
    from agentfsm.testing import ScriptedLLM, reply

    async def fails_while_the_prompt_waits(prompt):
        asyncio.ensure_future(read_stdin_line(prompt))  # the real prompt: readline takes the terminal
        await asyncio.sleep(float(sys.argv[1]))
        raise RuntimeError("the session broke while the person was at the prompt")

    agent = ToolCallAgent(llm=ScriptedLLM([reply("done")]), tools=ToolCollection(Terminate()))
    sys.exit(debug_command(agent, "do it", [], read_line=fails_while_the_prompt_waits))
    """
)


def test_an_exception_at_the_debugger_prompt_gives_the_terminal_back(tmp_path: Path) -> None:
    script = tmp_path / "failing_session.py"
    script.write_text(FAILING_SESSION)
    terminal = Terminal([sys.executable, str(script), "2.0"])
    try:
        terminal.read_until("(agentfsm) ")
        terminal.read_for(0.3)
        assert terminal.modes()["icanon"] is False  # readline holds the terminal when it fails
        assert terminal.wait() == 1
        assert_left_as_found(terminal)
    finally:
        terminal.close()
    assert "RuntimeError: the session broke while the person was at the prompt" in terminal.text()


@pytest.mark.http
def test_ctrl_c_at_the_approval_question_of_run_exits_130(llmock: Any) -> None:
    llmock.call_tool("terminate", {"status": "success"})
    terminal = Terminal(agentfsm(llmock, "run", "--require-approval", "terminate"))
    try:
        terminal.read_until("approve? [y]es")
        terminal.read_for(0.3)
        terminal.type(CTRL_C)
        assert terminal.wait() == 130
        assert terminal.modes() == COOKED
    finally:
        terminal.close()
    assert terminal.pieces()[-1] == "agentfsm: interrupted"
    assert "agentfsm: error" not in terminal.text()


@pytest.mark.http
def test_ctrl_c_at_an_approval_question_in_the_debugger_exits_130(llmock: Any) -> None:
    """The approval question after readline's prompt: read as a plain line, then Ctrl-C there."""
    llmock.call_tool("terminate", {"status": "success"})
    terminal = Terminal(agentfsm(llmock, "debug", "--require-approval", "terminate"))
    try:
        at_the_prompt(terminal)
        terminal.type("continue\n")
        terminal.read_until("approve? [y]es")
        terminal.read_for(0.3)
        assert terminal.modes() == COOKED  # the question reads lines: Enter ends one
        terminal.type(CTRL_C)
        assert terminal.wait() == 130
        assert_left_as_found(terminal)
    finally:
        terminal.close()
    assert terminal.pieces()[-1] == "agentfsm: interrupted"
