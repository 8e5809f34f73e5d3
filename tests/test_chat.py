"""`agentfsm chat`: a conversation at the terminal, its memory kept between turns and, with
`--session`, between chats; its commands; Ctrl-C cancelling one turn. As a user runs it:
`python -m agentfsm chat` with lines piped in, the model a real HTTP server on 127.0.0.1 (llmock)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from postgres_support import either_db, pg_url, postgres_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.usefixtures("clean_env")


def model(llmock: Any) -> list[str]:
    return ["--model", "openai/test-model", "--api-base", llmock.base_url("openai"), "--api-key", "k"]


def chat(llmock: Any, lines: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentfsm", "chat", *model(llmock), *flags],
        input=lines,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "XDG_DATA_HOME": os.getcwd()},
    )


def users(request: Any) -> list[str]:
    return [
        m["content"]
        for m in request.body["messages"]
        if m["role"] == "user" and "terminate" not in m["content"]
    ]


def test_each_line_is_a_turn_that_goes_on_from_the_ones_before(llmock: Any):
    llmock.reply("Hello, Ada.")
    llmock.reply("Your name is Ada.")
    done = chat(llmock, "my name is Ada\nwhat is my name?\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["Hello, Ada.", "Your name is Ada."]
    assert users(llmock.requests[1]) == ["my name is Ada", "what is my name?"]
    assert [m["role"] for m in llmock.requests[1].body["messages"]].count("assistant") == 1


def test_a_session_goes_on_in_the_next_chat_and_reset_forgets_it(llmock: Any, clean_env: Path):
    llmock.reply("Noted: blue.")
    assert chat(llmock, "my colour is blue\n", "--session", "colours").returncode == 0
    assert (clean_env / "agentfsm" / "sessions" / "colours.json").exists()
    llmock.reply("Blue.")
    done = chat(llmock, "what is my colour?\n", "--session", "colours")
    assert done.returncode == 0, done.stderr
    assert "(2 messages of FileSession(" in done.stderr
    assert users(llmock.requests[-1]) == ["my colour is blue", "what is my colour?"]
    llmock.reply("I do not know.")
    done = chat(llmock, "/reset\nwhat is my colour?\n", "--session", "colours")
    assert "(the conversation starts afresh)" in done.stderr
    assert users(llmock.requests[-1]) == ["what is my colour?"]


def test_the_configurations_stream_holds_unless_stream_is_flagged(llmock: Any, clean_env: Path):
    """``[llm] stream = true`` streams a chat's model as it does a run's (not printing the text as it
    comes: that is --stream's); leaving --stream out does not turn the configuration's off."""
    (clean_env / "agentfsm.toml").write_text("[llm]\nstream = true\n")
    llmock.reply("Streamed.")
    done = chat(llmock, "hello\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["Streamed."]
    assert llmock.requests[-1].body.get("stream") is True


def test_the_commands_say_what_they_do(llmock: Any):
    llmock.reply("Hi.")
    done = chat(llmock, "hello\n/usage\n/diagram\n/save\n/nope\n/help\n/quit\nnever sent\n")
    assert done.returncode == 0, done.stderr
    assert "(1 turns: " in done.stderr and "1 model calls" in done.stderr
    assert "stateDiagram-v2" in done.stdout
    assert "(no session to save to: start the chat with --session NAME)" in done.stderr
    assert "(no command /nope; /help lists them)" in done.stderr
    assert "/diagram" in done.stderr  # the help
    assert len(llmock.requests) == 1  # /quit ended it before the last line


def test_ctrl_c_in_a_turn_cancels_it_and_the_conversation_goes_on(llmock: Any):
    llmock.delay(30)
    llmock.reply("too late")
    llmock.reply("Here now.")
    process = subprocess.Popen(
        [sys.executable, "-m", "agentfsm", "chat", *model(llmock)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdin is not None and process.stderr is not None
    process.stdin.write("a slow question\n")
    process.stdin.flush()
    seen = ""
    while "dest=THINKING" not in seen:  # the turn's first edge is logged: its model call is under way
        line = process.stderr.readline()
        assert line, f"chat ended first: {seen}"
        seen += line
    time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    out, rest = process.communicate("are you there?\n", timeout=60)
    err = seen + rest
    assert process.returncode == 0, err
    assert "(the turn was cancelled; the conversation goes on (Ctrl-D ends it))" in err
    assert out.strip().splitlines()[-1] == "Here now." or "Here now." in out
    assert "a slow question" in users(llmock.requests[-1])


def test_a_bad_session_name_is_refused_in_one_line_and_a_json_path_is_a_file(llmock: Any, clean_env: Path):
    done = chat(llmock, "", "--session", "../elsewhere")
    assert done.returncode == 2
    assert "session name '../elsewhere' cannot name a file" in done.stderr.strip().splitlines()[-1]
    llmock.reply("Kept.")
    assert chat(llmock, "keep this\n", "--session", "talks/mine.json").returncode == 0
    assert (clean_env / "talks" / "mine.json").exists()


def test_a_session_in_the_durable_database_goes_on_in_the_next_chat(
    llmock: Any,
    clean_env: Path,
    either_db: str,  # noqa: F811 (the fixture)
):
    db = either_db
    llmock.reply("Noted: green.")
    assert chat(llmock, "my colour is green\n", "--session", "colours", "--db", db).returncode == 0
    assert not (clean_env / "agentfsm").exists()  # no file: the row is in the database
    llmock.reply("Green.")
    done = chat(llmock, "what is my colour?\n", "--session", "colours", "--db", db)
    assert done.returncode == 0, done.stderr
    assert users(llmock.requests[-1]) == ["my colour is green", "what is my colour?"]
    refused = chat(llmock, "", "--db", db)
    assert refused.returncode == 2 and "give --session NAME too" in refused.stderr


def test_a_turn_asks_its_approvals_on_the_terminal_as_run_does(llmock: Any):
    llmock.call_tool("terminate", {"status": "success"})
    llmock.reply("Stopped as asked.")
    done = chat(llmock, "finish up\ny\nthanks\n", "--require-approval", "terminate")
    assert done.returncode == 0, done.stderr
    assert "terminate" in done.stderr  # the question, asked on stderr
    assert done.stdout.splitlines()[-1] == "Stopped as asked."
    assert users(llmock.requests[-1])[-1] == "thanks"  # the approval's answer was not taken as a turn
