"""The Manus toolbox called directly, in local mode: python_execute, bash, str_replace_editor, ask_human.

Each tool goes through `Tool.__call__` (schema validation, then `execute`),
as the agent calls it. The sandbox is a real `LocalSandbox` in a temporary
workspace; the Docker variants run through the agent in test_manus_docker.py.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentfsm import AskHuman, Bash, PythonExecute, StrReplaceEditor, ToolResult
from agentfsm.cli.terminal import ask_on_terminal
from agentfsm.sandbox.local import LocalSandbox
from agentfsm.toolbox.editor_files import CLIPPED
from agentfsm.toolbox.sandboxed import as_provider
from agentfsm.toolbox.tool import ArgumentError

TEN_MB = 10 * 1024 * 1024


@pytest.fixture
async def sandbox() -> AsyncIterator[LocalSandbox]:
    box = LocalSandbox(timeout=20)
    await box.start()
    try:
        yield box
    finally:
        await box.close()


@pytest.fixture
def ws(sandbox: LocalSandbox) -> Path:
    return Path(sandbox.workspace)


def text(result: ToolResult) -> str:
    return str(result)


# -- schemas: upstream's names and parameters ------------------------------------------------


def test_schemas_follow_upstream(sandbox: LocalSandbox) -> None:
    tools = [PythonExecute(sandbox), Bash(sandbox), StrReplaceEditor(sandbox), AskHuman()]
    assert [t.name for t in tools] == ["python_execute", "bash", "str_replace_editor", "ask_human"]
    params = {t.name: t.parameters for t in tools}
    assert params["python_execute"]["required"] == ["code"]
    assert set(params["python_execute"]["properties"]) == {"code", "timeout"}
    assert params["bash"]["required"] == ["command"]
    editor = params["str_replace_editor"]
    assert editor["required"] == ["command", "path"]
    assert editor["properties"]["command"]["enum"] == ["view", "create", "str_replace", "insert", "undo_edit"]
    assert set(editor["properties"]) == {
        "command", "path", "file_text", "old_str", "new_str", "insert_line", "view_range"
    }  # fmt: skip
    assert params["ask_human"]["required"] == ["inquire"]


async def test_arguments_are_checked_against_the_schema_before_anything_runs(sandbox: LocalSandbox) -> None:
    with pytest.raises(ArgumentError, match="'delete' is not one of"):
        await StrReplaceEditor(sandbox)(command="delete", path="x")
    with pytest.raises(ArgumentError, match="timeout"):
        await PythonExecute(sandbox, max_timeout=30)(code="print(1)", timeout=31)


def test_a_tool_needs_a_sandbox_or_a_provider() -> None:
    with pytest.raises(TypeError, match="expected a Sandbox or a sandbox provider"):
        as_provider("/tmp")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`timeout` must be positive"):
        PythonExecute(LocalSandbox(), timeout=0)


# -- python_execute ---------------------------------------------------------------------------


async def test_python_returns_stdout_and_stderr(sandbox: LocalSandbox) -> None:
    result = await PythonExecute(sandbox)(code="import sys\nprint('out')\nprint('warn', file=sys.stderr)")
    assert result.error is None
    assert text(result) == "out\nstderr:\nwarn"


async def test_python_runs_in_the_worker_unless_an_interpreter_is_named(sandbox: LocalSandbox) -> None:
    code = "import os, sys; print(os.getppid() == os.getpid(), sys.executable.endswith('python3'))"
    ppid = "import os; print(os.getppid())"
    worker = [text(await PythonExecute(sandbox)(code=ppid)) for _ in range(2)]
    assert worker[0] == worker[1]  # both forked from the one worker
    own = [text(await PythonExecute(sandbox, python="python3")(code=ppid)) for _ in range(2)]
    assert own[0] != own[1] and worker[0] not in own  # each a process of its own, under its own supervisor
    assert text(await PythonExecute(sandbox, python="python3")(code=code)) == "False True"


async def test_python_exception_is_an_error_with_the_output_before_it(sandbox: LocalSandbox) -> None:
    result = await PythonExecute(sandbox)(code="print('before')\n1 / 0")
    assert result.error is not None
    assert result.error.startswith("Python failed (exit code 1):\nbefore\nstderr:\nTraceback")
    assert result.error.endswith("ZeroDivisionError: division by zero")


async def test_python_runs_in_the_workspace(sandbox: LocalSandbox, ws: Path) -> None:
    result = await PythonExecute(sandbox)(
        code="import os; open('made.txt', 'w').write('x'); print(os.getcwd())"
    )
    assert text(result) == str(ws)
    assert (ws / "made.txt").read_text() == "x"


async def test_python_infinite_loop_is_killed_at_the_timeout_and_the_next_call_works(
    sandbox: LocalSandbox,
) -> None:
    tool = PythonExecute(sandbox)
    started = time.monotonic()
    result = await tool(code="print('started', flush=True)\nwhile True: pass", timeout=1)
    assert time.monotonic() - started < 10
    assert result.error is not None
    assert result.error.startswith("Execution timeout after 1 seconds: the process was killed.")
    assert "started" in result.error
    assert text(await tool(code="print(6 * 7)")) == "42"


async def test_python_ten_megabytes_of_output_are_clipped_with_the_marker(sandbox: LocalSandbox) -> None:
    result = await PythonExecute(sandbox)(code=f"print('x' * {TEN_MB})")
    assert "[output truncated:" in text(result)
    assert len(text(result)) < 2 * sandbox.output_limit


# -- bash --------------------------------------------------------------------------------------


async def test_bash_session_keeps_cwd_and_environment(sandbox: LocalSandbox, ws: Path) -> None:
    tool = Bash(sandbox)
    assert text(await tool(command="mkdir sub && cd sub && export GREETING=hello")) == ""
    assert text(await tool(command='pwd; echo "$GREETING"')) == f"{ws}/sub\nhello"


async def test_bash_nonzero_exit_is_reported_not_an_error(sandbox: LocalSandbox) -> None:
    result = await Bash(sandbox)(command="echo some; ls /no/such/dir")
    assert result.error is None
    out = text(result)
    assert out.startswith("some\nstderr:\n") and "No such file or directory" in out
    assert out.endswith("[exit code 2]")


async def test_bash_timeout_kills_restarts_the_session_and_says_so(sandbox: LocalSandbox, ws: Path) -> None:
    tool = Bash(sandbox, timeout=1)
    await tool(command="cd /tmp && export KEPT=no")
    result = await tool(command="echo waiting; sleep 30")
    assert result.error is not None
    assert result.error.startswith("Command timed out after 1 seconds: it was killed and the shell session")
    assert "working directory and environment variables are reset" in result.error
    assert "waiting" in result.error
    assert text(await tool(command='pwd; echo "[$KEPT]"')) == f"{ws}\n[]"


async def test_bash_ten_megabytes_of_output_are_clipped(sandbox: LocalSandbox) -> None:
    result = await Bash(sandbox)(command=f"head -c {TEN_MB} /dev/zero | tr '\\0' y")
    assert "[output truncated:" in text(result)


# -- str_replace_editor -----------------------------------------------------------------------


async def test_editor_create_view_replace_insert_undo(sandbox: LocalSandbox, ws: Path) -> None:
    ed = StrReplaceEditor(sandbox)
    created = await ed(command="create", path="notes/a.txt", file_text="one\ntwo\nthree\n")
    assert text(created) == f"File created successfully at: {ws}/notes/a.txt"
    assert text(await ed(command="view", path=f"{ws}/notes/a.txt")) == (
        f"Here's the result of running `cat -n` on {ws}/notes/a.txt:\n"
        "     1\tone\n     2\ttwo\n     3\tthree\n"
    )
    replaced = text(await ed(command="str_replace", path="notes/a.txt", old_str="two\n", new_str="2\n2b\n"))
    assert replaced.startswith(f"The file {ws}/notes/a.txt has been edited.")
    assert "     2\t2\n     3\t2b\n" in replaced
    assert (ws / "notes/a.txt").read_text() == "one\n2\n2b\nthree\n"
    inserted = text(await ed(command="insert", path="notes/a.txt", insert_line=4, new_str="four"))
    assert "     5\tfour\n" in inserted
    assert (ws / "notes/a.txt").read_text() == "one\n2\n2b\nthree\nfour\n"
    await ed(command="undo_edit", path="notes/a.txt")
    assert (ws / "notes/a.txt").read_text() == "one\n2\n2b\nthree\n"
    undone = text(await ed(command="undo_edit", path="notes/a.txt"))
    assert undone.startswith(f"Last edit to {ws}/notes/a.txt undone successfully.")
    assert (ws / "notes/a.txt").read_text() == "one\ntwo\nthree\n"
    assert (await ed(command="undo_edit", path="notes/a.txt")).error == (
        f"No edit history found for {ws}/notes/a.txt."
    )


async def test_editor_unique_match_rule(sandbox: LocalSandbox, ws: Path) -> None:
    (ws / "f.py").write_text("x = 1\ny = 1\nx = 1\n")
    ed = StrReplaceEditor(sandbox)
    missing = await ed(command="str_replace", path="f.py", old_str="z = 1", new_str="z = 2")
    assert (
        missing.error
        == f"No replacement was performed, old_str `z = 1` did not appear verbatim in {ws}/f.py."
    )
    twice = await ed(command="str_replace", path="f.py", old_str="x = 1", new_str="x = 2")
    assert twice.error == (
        "No replacement was performed. Multiple occurrences of old_str `x = 1` in lines [1, 3]. "
        "Please ensure it is unique"
    )
    overlapping = await ed(command="str_replace", path="f.py", old_str="1\n", new_str="")
    assert overlapping.error is not None and "in lines [1, 2, 3]" in overlapping.error
    assert (ws / "f.py").read_text() == "x = 1\ny = 1\nx = 1\n"  # nothing was written
    await ed(command="str_replace", path="f.py", old_str="x = 1\ny", new_str="x = 0\ny")
    assert (ws / "f.py").read_text() == "x = 0\ny = 1\nx = 1\n"


async def test_editor_keeps_tabs_and_files_without_final_newline(sandbox: LocalSandbox, ws: Path) -> None:
    (ws / "Makefile").write_text("all:\n\techo hi")
    ed = StrReplaceEditor(sandbox)
    await ed(command="str_replace", path="Makefile", old_str="hi", new_str="there")
    await ed(command="insert", path="Makefile", insert_line=2, new_str="\techo end")
    assert (ws / "Makefile").read_text() == "all:\n\techo there\n\techo end\n"


async def test_editor_view_range(sandbox: LocalSandbox, ws: Path) -> None:
    (ws / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    ed = StrReplaceEditor(sandbox)
    assert text(await ed(command="view", path="f.txt", view_range=[9, -1])).endswith(
        "     9\tline 9\n    10\tline 10\n"
    )
    assert "     1\t" not in text(await ed(command="view", path="f.txt", view_range=[2, 3]))
    cases = {
        (0, 3): "Its first element `0` should be within the range of lines of the file: [1, 10]",
        (2, 11): "Its second element `11` should be smaller than the number of lines in the file: `10`",
        (5, 4): "Its second element `4` should be larger or equal than its first `5`",
    }
    for (first, last), message in cases.items():
        result = await ed(command="view", path="f.txt", view_range=[first, last])
        assert result.error is not None and message in result.error
    result = await ed(command="view", path="f.txt", view_range=[1])
    assert result.error == "Invalid `view_range`. It should be a list of two integers."


async def test_editor_lists_a_directory_two_levels_deep_without_hidden_items(
    sandbox: LocalSandbox, ws: Path
) -> None:
    for name in ("a/b/c/deep.txt", "a/one.txt", ".hidden/x.txt", "a/.secret", "top.txt"):
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text("x")
    listing = text(await StrReplaceEditor(sandbox)(command="view", path=str(ws)))
    assert listing == (
        f"Here's the files and directories up to 2 levels deep in {ws}, excluding hidden items:\n"
        f"{ws}\n{ws}/a\n{ws}/a/b\n{ws}/a/one.txt\n{ws}/top.txt\n"
    )
    refused = await StrReplaceEditor(sandbox)(command="view", path=".", view_range=[1, 2])
    assert refused.error == "The `view_range` parameter is not allowed when `path` points to a directory."


async def test_editor_refuses_paths_leaving_the_workspace(
    sandbox: LocalSandbox, ws: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    os.symlink(outside, ws / "link.txt")
    os.symlink(tmp_path, ws / "linkdir")
    ed = StrReplaceEditor(sandbox)
    for path in ("../../etc/passwd", "/etc/passwd", "link.txt", "linkdir/new.txt", f"{ws}/../x"):
        for arguments in (
            {"command": "view", "path": path},
            {"command": "create", "path": path, "file_text": "pwned"},
            {"command": "str_replace", "path": path, "old_str": "secret", "new_str": "pwned"},
        ):
            result = await ed(**arguments)
            assert result.error is not None and "is outside the sandbox workspace" in result.error, (
                path,
                result,
            )
            assert result.error.endswith("Use a path inside the workspace.")
    assert outside.read_text() == "secret"
    assert not (tmp_path / "new.txt").exists()


async def test_editor_refusals_name_the_problem(sandbox: LocalSandbox, ws: Path) -> None:
    (ws / "f.txt").write_text("text\n")
    (ws / "bin.dat").write_bytes(b"\xff\xfe\x00")
    ed = StrReplaceEditor(sandbox)
    cases = [
        ({"command": "create", "path": "f.txt", "file_text": "x"}, "File already exists at: {ws}/f.txt."),
        ({"command": "create", "path": "g.txt"}, "Parameter `file_text` is required for command: create"),
        ({"command": "view", "path": "nope.txt"}, "The path {ws}/nope.txt does not exist."),
        (
            {"command": "str_replace", "path": ".", "old_str": "a"},
            "is a directory and only the `view` command",
        ),
        ({"command": "str_replace", "path": "f.txt"}, "Parameter `old_str` is required"),
        ({"command": "insert", "path": "f.txt", "new_str": "x"}, "Parameter `insert_line` is required"),
        ({"command": "insert", "path": "f.txt", "insert_line": 1}, "Parameter `new_str` is required"),
        (
            {"command": "insert", "path": "f.txt", "insert_line": 3, "new_str": "x"},
            "Invalid `insert_line` parameter: 3. It should be within the range of lines of the file: [0, 1]",
        ),
        ({"command": "view", "path": "bin.dat"}, "The file {ws}/bin.dat is not UTF-8 text (byte 0)"),
    ]
    for arguments, message in cases:
        result = await ed(**arguments)
        assert result.error is not None and message.format(ws=ws) in result.error, (arguments, result)
    assert (ws / "f.txt").read_text() == "text\n"


async def test_editor_clips_a_ten_megabyte_view_with_a_visible_marker(
    sandbox: LocalSandbox, ws: Path
) -> None:
    (ws / "big.txt").write_text("0123456789abcdef\n" * (TEN_MB // 17))
    (ws / "one-line.txt").write_text("z" * TEN_MB)
    ed = StrReplaceEditor(sandbox, max_response=2000)
    started = time.monotonic()
    big = text(await ed(command="view", path="big.txt"))
    assert len(big) < 2400 and CLIPPED in big
    assert f"(lines 1-{big.count(chr(9))} of {TEN_MB // 17} shown)" in big
    line = text(await ed(command="view", path="one-line.txt"))
    assert len(line) < 2400 and "line 1 cut after" in line
    assert time.monotonic() - started < 5


async def test_editor_undo_history_belongs_to_one_sandbox(ws: Path) -> None:
    class Switching:
        def __init__(self) -> None:
            self.current = LocalSandbox()

        async def get(self) -> LocalSandbox:
            await self.current.start()
            return self.current

    provider = Switching()
    ed = StrReplaceEditor(provider)
    await ed(command="create", path="f.txt", file_text="a\n")
    await ed(command="str_replace", path="f.txt", old_str="a", new_str="b")
    await provider.current.close()
    provider.current = LocalSandbox()
    try:
        await ed(command="create", path="f.txt", file_text="c\n")
        result = await ed(command="undo_edit", path="f.txt")
        assert result.error is not None and result.error.startswith("No edit history found")
    finally:
        await provider.current.close()


# -- ask_human -------------------------------------------------------------------------------------


async def test_ask_human_uses_the_callback() -> None:
    asked: list[str] = []

    async def ask(question: str) -> str:
        asked.append(question)
        return "  blue \n"

    assert text(await AskHuman(ask)(inquire="Which colour?")) == "blue"
    assert asked == ["Which colour?"]


async def test_ask_human_without_a_human_says_so_at_once() -> None:
    result = await AskHuman()(inquire="Which colour?")
    assert result.error is not None
    assert result.error.startswith("No human is available to answer: 'Which colour?'")

    async def closed(question: str) -> str:
        raise EOFError

    result = await AskHuman(closed)(inquire="Still there?")
    assert result.error is not None and "No human is available to answer: 'Still there?'" in result.error


async def test_ask_on_terminal_reads_stdin_without_blocking_the_loop(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    read_end, write_end = os.pipe()
    with os.fdopen(read_end, "r") as stdin, os.fdopen(write_end, "w") as feed:
        monkeypatch.setattr(sys, "stdin", stdin)
        question = asyncio.create_task(AskHuman(ask_on_terminal)(inquire="Name?"))
        ticks = 0
        while ticks < 5:  # the loop keeps running while the question waits for a line
            await asyncio.sleep(0.01)
            ticks += 1
        assert not question.done()
        feed.write("Ada\n")
        feed.flush()
        assert text(await asyncio.wait_for(question, 5)) == "Ada"
        feed.close()
        result = await asyncio.wait_for(AskHuman(ask_on_terminal)(inquire="More?"), 5)
    assert result.error is not None and "No human is available" in result.error
    assert "Bot: Name?" in capsys.readouterr().err
