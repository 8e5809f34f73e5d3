"""`agentfsm debug` on a real pseudo-terminal and with piped input, against a loopback model server."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.http


def cli(llmock, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "agentfsm", "debug", "finish the task",
        "--model", "openai/test-model", "--api-base", llmock.base_url("openai"), "--api-key", "test",
        *extra,
    ]  # fmt: skip


def read_until(fd: int, marker: bytes, seen: bytearray, timeout: float = 60.0) -> bytes:
    deadline = time.monotonic() + timeout
    while marker not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {marker!r} within {timeout} s; got:\n{seen.decode(errors='replace')}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                break
            seen.extend(chunk)
    return bytes(seen)


def test_debug_on_a_pseudo_terminal(llmock):
    llmock.call_tool("terminate", {"status": "success"})
    main, child = pty.openpty()
    proc = subprocess.Popen(cli(llmock, "--break", "ACTING"), stdin=child, stdout=child, stderr=child)
    os.close(child)
    seen = bytearray()
    try:
        read_until(main, b"(agentfsm) ", seen)
        assert b"paused before the first transition of: finish the task" in seen
        for command, expect in (
            (b"continue\n", b"THINKING -> ACTING  think_done  step 1"),
            (b"calls\n", b"0: terminate("),
            (b"request\n", b"tools [terminate], tool_choice auto"),
            (b"diagram\n", b"class ACTING current"),
            (b"continue\n", b"run ended: FINISHED (terminated)"),
        ):
            del seen[:]
            os.write(main, command)
            read_until(main, expect, seen)
        read_until(main, b"stop_reason=terminated", seen)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        os.close(main)


def test_debug_with_piped_commands_and_quit(llmock):
    llmock.call_tool("terminate", {"status": "success"})
    proc = subprocess.run(
        cli(llmock), input="step\nstate\nquit\n", capture_output=True, text=True, timeout=120
    )
    assert "IDLE -> THINKING  start  step 1" in proc.stdout
    assert "state RUNNING, phase THINKING, step 1 of 30" in proc.stdout
    assert "stop_reason=cancelled" in proc.stderr  # the summary: stdout is the session's
    assert proc.returncode == 130  # the person ended it: interrupted, not failed
    assert "agentfsm: error" not in proc.stderr  # and no error line


def test_debug_refuses_an_unknown_breakpoint(llmock):
    proc = subprocess.run(cli(llmock, "--break", "NAPPING"), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "no trigger 'NAPPING'" in proc.stderr


def test_debug_manus_with_an_approval_on_piped_input(llmock, tmp_path):
    """Manus under the debugger, in a local sandbox; the approval question reads the same input."""
    llmock.call_tool("python_execute", {"code": "print(6 * 7)"})
    llmock.call_tool("terminate", {"status": "success"})
    env = {**os.environ, "AGENTFSM_SANDBOX__MODE": "local"}
    args = cli(llmock, "--agent", "manus", "--break", "OBSERVING", "--require-approval", "python_execute")
    answers = "continue\ny\nstate\ncontinue\ncontinue\n"
    proc = subprocess.run(
        args,
        input=answers,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
        start_new_session=True,  # no terminal: the approval is asked on the pipes
    )
    assert proc.returncode == 0, proc.stderr
    assert "source=THINKING dest=AWAITING_APPROVAL" in proc.stderr  # the transition log line
    assert "Approval needed: python_execute(" in proc.stderr
    assert "state RUNNING, phase OBSERVING, step 1 of 20" in proc.stdout
    assert "stop_reason=terminated" in proc.stderr
    observed = [m["content"] for m in llmock.requests[1].body["messages"] if m["role"] == "tool"]
    assert observed == ["Observed output of cmd `python_execute` executed:\n42\n"] or observed == [
        "Observed output of cmd `python_execute` executed:\n42"
    ]
