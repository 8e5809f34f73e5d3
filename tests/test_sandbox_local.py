"""The local sandbox (no Docker), the shared output and shell protocol, and the sandbox session.

Real subprocesses in a real temporary workspace: infinite loops, escaping
children, 10 MB of output, path traversal, cancellation.
"""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path

import pytest

from agentfsm.sandbox import Sandbox
from agentfsm.sandbox.base import OutputCapture, SandboxError, WorkerRequest, truncation_marker
from agentfsm.sandbox.local import TEMP_PREFIX, LocalSandbox
from agentfsm.sandbox.session import SandboxSession
from agentfsm.sandbox.settings import SandboxSettings

TEN_MB = 10_000_000
LIMIT = 100_000


@pytest.fixture
async def box() -> AsyncIterator[LocalSandbox]:
    sandbox = LocalSandbox(timeout=20)
    await sandbox.start()
    try:
        yield sandbox
    finally:
        await sandbox.close()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


async def pid_from(box: Sandbox, name: str) -> int:
    return int((await box.read_file(name)).decode())


# -- the output capture and the shell protocol ---------------------------------------------


def test_capture_keeps_the_head_counts_the_rest_and_marks_it() -> None:
    capture = OutputCapture(10)
    for chunk in (b"0123456", b"789abc", b"def"):
        capture.feed(chunk)
    assert capture.text() == "0123456789" + truncation_marker(6)
    assert OutputCapture(10).text() == ""


def test_capture_never_splits_a_character() -> None:
    capture = OutputCapture(3)
    capture.feed("aaé!".encode())  # é is 2 bytes: the cut falls inside it
    assert capture.text() == "aa" + truncation_marker(2)


def test_capture_finds_a_marker_split_across_chunks() -> None:
    capture = OutputCapture(1000, "__END__")
    data = b"output\n__END__ 7\ntrailing junk"
    assert not any(capture.feed(data[i : i + 1]) for i in range(12))
    for i in range(12, len(data)):
        capture.feed(data[i : i + 1])
    assert capture.found and capture.status == 7
    assert capture.text() == "output"


def test_capture_marker_after_clipped_output_counts_only_the_command_output() -> None:
    capture = OutputCapture(5, "__END__")
    capture.feed(b"x" * 50)
    capture.feed(b"\n__END__ 0\n")
    assert capture.found and capture.text() == "xxxxx" + truncation_marker(45)


def test_capture_ends_at_either_marker_and_says_which() -> None:
    request = WorkerRequest("print(1)", 5.0)
    out, err = request.captures(1000, "__WORKER_ENDED__")
    out.feed(b"bye\n\n__WORKER_ENDED__ 137\n")
    err.feed(f"\n{request.marker}\n".encode())
    assert out.found and out.marker == "__WORKER_ENDED__" and out.status == 137 and out.text() == "bye\n"
    assert err.marker == request.marker and not request.answered(out, err)
    out, err = request.captures(1000, "__WORKER_ENDED__")
    out.feed(f"1\n\n{request.marker} 0\n".encode())
    err.feed(f"\n{request.marker}\n".encode())
    assert request.answered(out, err) and out.status == 0 and out.text() == "1\n"


# -- commands --------------------------------------------------------------------------------


async def test_exec_runs_in_the_workspace_with_stdin_and_exit_code(box: LocalSandbox) -> None:
    result = await box.exec(["sh", "-c", "pwd; cat; echo oops >&2; exit 3"], stdin="hello\n")
    assert result.exit_code == 3 and not result.timed_out
    assert result.stdout == f"{box.workspace}\nhello\n" and result.stderr == "oops\n"


async def test_environment_is_minimal(box: LocalSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-do-not-leak")
    result = await box.exec(["env"])
    assert "sk-do-not-leak" not in result.stdout
    assert f"HOME={box.workspace}" in result.stdout


async def test_infinite_loop_is_killed_at_the_timeout_and_the_next_call_works(box: LocalSandbox) -> None:
    began = time.monotonic()
    result = await box.exec([box.python, "-c", "while True: pass"], timeout=1)
    assert result.timed_out and result.exit_code is None
    assert "ran longer than its 1 s timeout" in result.stderr
    assert time.monotonic() - began < 4
    assert (await box.exec(["echo", "next"])).stdout == "next\n"


async def test_children_that_leave_the_process_group_are_killed_too(box: LocalSandbox) -> None:
    script = "setsid sh -c 'echo $$ > escaped.pid; exec sleep 300' & sleep 300"
    result = await box.exec(["sh", "-c", script], timeout=1)
    assert result.timed_out
    assert not alive(await pid_from(box, "escaped.pid"))


async def test_background_leftovers_die_with_their_command(box: LocalSandbox) -> None:
    await box.exec(["sh", "-c", "sleep 300 & echo $! > bg.pid"])
    pid = await pid_from(box, "bg.pid")
    for _ in range(50):
        if not alive(pid):
            break
        await asyncio.sleep(0.05)
    assert not alive(pid)


async def test_close_kills_what_commands_left_running_anywhere() -> None:
    box = LocalSandbox()
    async with box:
        daemon = "setsid sh -c 'echo $$ > daemon.pid; exec sleep 300' >/dev/null 2>&1 &"
        wait = "until [ -s daemon.pid ]; do sleep 0.01; done"  # it has left the group before we return
        assert (await box.exec(["sh", "-c", f"{daemon} {wait}"])).exit_code == 0
        await box.bash("sleep 300 & echo $! > job.pid")
        pids = [await pid_from(box, "daemon.pid"), await pid_from(box, "job.pid")]
        assert all(alive(pid) for pid in pids)  # a finished command's daemon lives on, until close
    assert not any(alive(pid) for pid in pids)


async def test_close_kills_daemons_that_left_the_session_and_cleared_their_environment() -> None:
    """`setsid env -i` drops both the process group and the tag: the supervisor still holds the daemon."""
    daemon = "setsid env -i sh -c 'sleep 300 & echo $! > {name}' >/dev/null 2>&1 &"
    wait = "until [ -s {name} ]; do sleep 0.01; done"
    box = LocalSandbox()
    async with box:
        for call, name in ((box.exec, "exec.pid"), (box.bash, "bash.pid")):
            command = f"{daemon} {wait}".format(name=name)
            result = await (box.exec(["sh", "-c", command]) if call is box.exec else box.bash(command))
            assert result.exit_code == 0
        timed_out = await box.exec(
            ["sh", "-c", f"{daemon} {wait}; sleep 300".format(name="timed.pid")], timeout=1
        )
        assert timed_out.timed_out
        assert not alive(await pid_from(box, "timed.pid"))  # a timeout kills what the command started
        pids = [await pid_from(box, "exec.pid"), await pid_from(box, "bash.pid")]
        assert all(alive(pid) for pid in pids)
        assert all(b"AGENTFSM_EXEC" not in Path(f"/proc/{pid}/environ").read_bytes() for pid in pids)
    assert [pid for pid in pids if alive(pid)] == []


async def test_a_command_that_cannot_start_says_so(box: LocalSandbox) -> None:
    result = await box.exec(["agentfsm-no-such-command"])
    assert result.exit_code == 127 and "cannot run 'agentfsm-no-such-command'" in result.stderr


def test_the_supervisors_kill_what_they_hold_when_the_sandbox_process_dies(tmp_path: Path) -> None:
    """A process killed outright runs no cleanup: its commands' supervisors are told and do it."""
    script = f"""
import asyncio, os, signal
from agentfsm.sandbox.local import LocalSandbox
async def main():
    box = LocalSandbox({str(tmp_path)!r})
    await box.exec(["sh", "-c", "setsid env -i sh -c 'sleep 300 & echo $! > d.pid' >/dev/null 2>&1 &"
                    " until [ -s d.pid ]; do sleep 0.01; done"])
    os.kill(os.getpid(), signal.SIGKILL)
asyncio.run(main())
"""
    subprocess.run([sys.executable, "-c", script], check=False, timeout=30)
    pid = int((tmp_path / "d.pid").read_text())
    for _ in range(100):
        if not alive(pid):
            break
        time.sleep(0.02)
    assert not alive(pid)


async def test_ten_megabytes_of_output_are_clipped_with_a_marker_without_hanging(box: LocalSandbox) -> None:
    code = f"import sys; sys.stdout.write('x' * {TEN_MB}); sys.stderr.write('y' * {TEN_MB})"
    began = time.monotonic()
    result = await box.exec([box.python, "-c", code])
    assert time.monotonic() - began < 10
    assert result.exit_code == 0 and result.truncated
    assert result.stdout == "x" * LIMIT + truncation_marker(TEN_MB - LIMIT)
    assert result.stderr == "y" * LIMIT + truncation_marker(TEN_MB - LIMIT)

    shell = await box.bash(f"head -c {TEN_MB} /dev/zero | tr '\\0' z")
    assert shell.truncated and shell.stdout == "z" * LIMIT + truncation_marker(TEN_MB - LIMIT)
    assert (await box.bash("echo still in sync")).stdout == "still in sync\n"


async def test_bash_session_keeps_state_and_restarts_after_a_timeout(box: LocalSandbox) -> None:
    await box.bash("mkdir -p sub && cd sub && export GREETING=hi")
    kept = await box.bash('pwd; echo "$GREETING"; printf no-newline')
    assert kept.stdout == f"{box.workspace}/sub\nhi\nno-newline" and kept.exit_code == 0
    assert (await box.bash("cat")).exit_code == 0  # stdin is /dev/null: the protocol is not eaten
    assert (await box.bash("echo 'unbalanced")).exit_code == 2  # a syntax error, not a hung shell

    stuck = await box.bash("sleep 300", timeout=1)
    assert stuck.timed_out and "session was restarted" in stuck.stderr
    fresh = await box.bash('pwd; echo "[$GREETING]"')
    assert fresh.stdout == f"{box.workspace}\n[]\n"

    exited = await box.bash("exit 4")
    assert exited.exit_code == 4 and "the shell exited" in exited.stderr
    assert (await box.bash("echo back")).stdout == "back\n"


async def test_cancelling_mid_exec_kills_the_process_and_close_removes_the_workspace() -> None:
    box = LocalSandbox()
    started = asyncio.Event()

    async def work() -> None:
        async with box:
            started.set()
            await box.exec(["sh", "-c", "echo $$ > me.pid; exec sleep 300"])

    task = asyncio.create_task(work())
    await started.wait()
    pid_file = Path(box.workspace) / "me.pid"
    while not pid_file.exists() or not pid_file.read_text().strip():
        await asyncio.sleep(0.02)
    pid = int(pid_file.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not alive(pid)
    assert not Path(box.workspace).exists()
    with pytest.raises(SandboxError, match="closed"):
        await box.exec(["true"])


# -- the Python worker -----------------------------------------------------------------------


async def worker_pid(box: LocalSandbox) -> int:
    return int((await box.run_python("import os; print(os.getppid())")).stdout)


async def test_snippets_run_in_fresh_children_of_one_worker(box: LocalSandbox) -> None:
    first = await worker_pid(box)
    leaky = (
        "import os\nopen('mymod.py', 'w').write('V = 1')\nimport mymod\nx = mymod.V\n"
        "os.chdir('/')\nos.environ['LEAK'] = '1'"
    )
    assert (await box.run_python(leaky)).exit_code == 0
    seen = await box.run_python(
        "import os, sys\nprint('x' in dir(), 'mymod' in sys.modules, os.getcwd(), os.environ.get('LEAK'))"
    )
    assert seen.stdout == f"False False {box.workspace} None\n"
    failed = await box.run_python("print('before')\n1 / 0")
    assert failed.exit_code == 1 and failed.stdout == "before\n"
    assert failed.stderr.startswith(
        'Traceback (most recent call last):\n  File "<stdin>", line 2, in <module>'
    )
    assert await worker_pid(box) == first


async def test_the_worker_kills_a_snippet_and_what_left_its_group_at_the_timeout_and_stays(
    box: LocalSandbox,
) -> None:
    first = await worker_pid(box)
    code = (
        "import subprocess, time\n"
        "subprocess.Popen(['setsid', 'sh', '-c', 'echo $$ > escaped.pid; exec sleep 300'])\n"
        "subprocess.Popen(['sh', '-c', 'echo $$ > grouped.pid; exec sleep 300'])\n"
        "time.sleep(300)"
    )
    began = time.monotonic()
    result = await box.run_python(code, timeout=1)
    assert result.timed_out and result.exit_code is None and time.monotonic() - began < 4
    assert not alive(await pid_from(box, "escaped.pid")) and not alive(await pid_from(box, "grouped.pid"))
    assert await worker_pid(box) == first


async def test_a_worker_killed_by_its_snippet_is_an_observation_and_the_next_call_starts_another(
    box: LocalSandbox,
) -> None:
    first = await worker_pid(box)
    killed = await box.run_python(  # (locally the snippet is the worker's own user: it can kill it)
        "import os, time\nprint('bye', flush=True)\ntime.sleep(0.2)\nos.kill(os.getppid(), 9)"
    )
    assert killed.exit_code == -9 and killed.stdout == "bye\n"
    assert "the Python worker ended during this call" in killed.stderr
    assert await worker_pid(box) != first
    stopped = await box.run_python(
        "import os, signal, time\nos.kill(os.getppid(), signal.SIGSTOP)\ntime.sleep(60)", timeout=1
    )
    assert stopped.timed_out
    assert (await box.run_python("print('back')")).stdout == "back\n"


async def test_a_call_ends_what_it_left_and_close_kills_the_worker() -> None:
    box = LocalSandbox()
    async with box:
        worker = await worker_pid(box)
        # The snippet returns once the shell has left its group (it writes its pid after setsid):
        # a snippet that returned at once could be ended with its group before setsid ran.
        daemon = (
            "import os, subprocess, time\n"
            "subprocess.Popen(['setsid', 'sh', '-c', 'echo $$ > d.pid; exec sleep 300'])\n"
            "for _ in range(500):\n"
            "    if os.path.exists('d.pid') and open('d.pid').read().strip():\n"
            "        break\n"
            "    time.sleep(0.02)\n"
        )
        await box.run_python(daemon)
        left = await pid_from(box, "d.pid")
        assert not alive(left)  # a call's process that left its group ends with its call all the same
        assert alive(worker)
    assert not alive(worker)


# -- a sandbox never closed ------------------------------------------------------------------


async def test_a_sandbox_dropped_without_close_is_destroyed_all_the_same() -> None:
    box = LocalSandbox()
    await box.start()
    await box.run_python("print(1)")
    await box.bash("setsid sleep 300 >/dev/null 2>&1 & echo $! > bg.pid")
    workspace, pid = box.workspace, await pid_from(box, "bg.pid")
    assert alive(pid)
    del box
    gc.collect()
    assert not Path(workspace).exists() and not alive(pid)


def test_a_kept_sandbox_never_closed_is_closed_with_its_event_loop() -> None:
    script = textwrap.dedent("""
        import asyncio
        from agentfsm.sandbox.session import SandboxSession
        from agentfsm.sandbox.settings import SandboxSettings

        KEPT = []

        async def main():
            session = SandboxSession(SandboxSettings(mode="local"))  # keep_alive by default
            KEPT.append(session)  # alive until the interpreter exits, never closed
            box = await session.get()
            await box.run_python("print(1)")
            pid = (await box.bash("setsid sleep 300 >/dev/null 2>&1 & echo $!")).stdout
            await session.end_run()  # the run went well: kept
            print(box.workspace, pid, flush=True)

        asyncio.run(main())
        assert not KEPT[0].active  # closed by the loop's end, before the interpreter's
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    workspace, pid = done.stdout.split()
    assert workspace.startswith(tempfile.gettempdir()) and not Path(workspace).exists()
    assert not alive(int(pid))
    assert "Exception ignored" not in done.stderr and "Event loop is closed" not in done.stderr


# -- files and paths -------------------------------------------------------------------------


async def test_files_round_trip_and_parents_are_created(box: LocalSandbox) -> None:
    await box.write_file("deep/er/file.bin", b"\x00\xffdata")
    assert await box.read_file("deep/er/file.bin") == b"\x00\xffdata"
    assert await box.read_file(f"{box.workspace}/deep/er/file.bin") == b"\x00\xffdata"
    with pytest.raises(FileNotFoundError):
        await box.read_file("missing.txt")


@pytest.mark.parametrize("path", ["../outside", "/etc/passwd", "a/../../outside", "..", "/"])
async def test_paths_outside_the_workspace_are_refused(box: LocalSandbox, path: str) -> None:
    with pytest.raises(PermissionError, match="outside the sandbox workspace"):
        await box.resolve(path)
    with pytest.raises(PermissionError):
        await box.write_file(path, b"x")


async def test_symlinks_out_of_the_workspace_are_refused(box: LocalSandbox, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    ws = Path(box.workspace)
    (ws / "dir_link").symlink_to(tmp_path)
    (ws / "file_link").symlink_to(secret)
    (ws / "dangling").symlink_to(tmp_path / "not-yet")
    for path in ("dir_link/secret.txt", "file_link", "dangling", "dir_link/new.txt"):
        with pytest.raises(PermissionError):
            await box.read_file(path)
        with pytest.raises(PermissionError):
            await box.write_file(path, b"overwritten")
    assert secret.read_text() == "secret" and not (tmp_path / "not-yet").exists()


async def test_a_given_workspace_is_kept_on_close(tmp_path: Path) -> None:
    async with LocalSandbox(tmp_path / "mine") as box:
        await box.write_file("kept.txt", b"1")
    assert (tmp_path / "mine" / "kept.txt").read_bytes() == b"1"


# -- the session -----------------------------------------------------------------------------


def local_settings(**overrides: object) -> SandboxSettings:
    return SandboxSettings.model_validate({"mode": "local", **overrides})


async def test_session_creates_once_under_concurrency_and_destroys_at_the_end_of_a_run() -> None:
    session = SandboxSession(local_settings(keep_alive=False))
    assert not session.active
    boxes = await asyncio.gather(*(session.get() for _ in range(5)))
    assert all(b is boxes[0] for b in boxes) and session.active
    workspace = Path(boxes[0].workspace)
    assert workspace.name.startswith(TEMP_PREFIX)
    await session.end_run()
    assert not session.active and not workspace.exists()
    again = await session.get()  # the next run gets a fresh sandbox
    assert again is not boxes[0]
    await session.close()
    await session.close()  # idempotent
    assert not Path(again.workspace).exists()


async def test_keep_alive_survives_runs_but_not_errors_or_close() -> None:
    async with SandboxSession(local_settings(keep_alive=True)) as session:
        box = await session.get()
        await session.end_run()
        assert session.active and await session.get() is box
        await session.end_run(failed=True)  # an error or a cancellation always destroys it
        assert not session.active and not Path(box.workspace).exists()
        second = await session.get()
    assert not session.active and not Path(second.workspace).exists()


async def test_auto_mode_without_an_engine_falls_back_to_local_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, agentfsm_events, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    async with SandboxSession(SandboxSettings(mode="auto")) as session:
        box = await session.get()
        assert box.kind == "local"
    [warning] = agentfsm_events.named("sandbox_fallback_local")
    assert "no-engine.sock" in str(warning["reason"]) and "mode = 'docker'" in str(warning["hint"])


async def test_docker_mode_without_an_engine_names_docker_host_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    session = SandboxSession(SandboxSettings(mode="docker"))
    with pytest.raises(SandboxError) as info:
        await session.get()
    message = str(info.value)
    assert "no-engine.sock" in message and "DOCKER_HOST" in message and "mode = 'local'" in message
    assert not session.active


# -- cancelled twice -------------------------------------------------------------------------

RUNS = 10
LEAVE_PROCESSES = (
    "setsid sh -c 'echo $$ > daemon.pid; exec sleep 300' >/dev/null 2>&1 & "
    "until [ -s daemon.pid ]; do sleep 0.01; done; sleep 300 & echo $! > job.pid"
)


async def _one_run(session: SandboxSession, ready: asyncio.Event) -> None:
    """An agent's run as Manus makes it: the sandbox is used, then `end_run` in a `finally`."""
    try:
        await (await session.get()).bash(LEAVE_PROCESSES)
        ready.set()
        await asyncio.sleep(300)  # the cancellation arrives here: all of it lands in the cleanup
    finally:
        await session.end_run(failed=True)


async def _start_runs(
    wrap: Callable[[Coroutine[None, None, None]], Coroutine[None, None, None]],
) -> tuple[list[asyncio.Task[None]], list[Path], list[int]]:
    """Ten runs, each with a daemon and a background job: the tasks, workspaces and processes."""
    sessions = [SandboxSession(local_settings()) for _ in range(RUNS)]
    readies = [asyncio.Event() for _ in range(RUNS)]
    tasks = [asyncio.create_task(wrap(_one_run(s, r))) for s, r in zip(sessions, readies, strict=True)]
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 20)
    workspaces = [Path((await s.get()).workspace) for s in sessions]
    pids = [int((w / name).read_text()) for w in workspaces for name in ("daemon.pid", "job.pid")]
    assert all(alive(pid) for pid in pids)
    return tasks, workspaces, pids


async def _as_is(run: Coroutine[None, None, None]) -> None:
    await run


async def test_a_run_cancelled_twice_leaves_no_workspace_and_no_process() -> None:
    tasks, workspaces, pids = await _start_runs(_as_is)
    for task in tasks:
        task.cancel()
    await asyncio.sleep(0.05)  # the first cancellation's cleanup is under way
    for task in tasks:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in results)
    assert [str(w) for w in workspaces if w.exists()] == []
    assert [pid for pid in pids if alive(pid)] == []


async def test_a_run_cancelled_by_an_anyio_cancel_scope_leaves_no_workspace_and_no_process() -> None:
    anyio = pytest.importorskip("anyio")  # installed with httpx
    scopes = []

    async def scoped(run: Coroutine[None, None, None]) -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            await run

    tasks, workspaces, pids = await _start_runs(scoped)
    for scope in scopes:  # a cancelled scope cancels again at every await until its body is done
        scope.cancel()
    await asyncio.wait_for(asyncio.gather(*tasks), 30)
    assert [str(w) for w in workspaces if w.exists()] == []
    assert [pid for pid in pids if alive(pid)] == []
