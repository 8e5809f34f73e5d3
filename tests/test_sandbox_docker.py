"""The Docker sandbox against a real engine and real containers.

Most tests share one container (module scope) because starting one costs
about a second; the tests that destroy a sandbox make their own. Without an
engine or the image (tools/build-sandbox-image) they skip, unless
AGENTFSM_REQUIRE_DOCKER=1 (CI), where they fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from sandbox_support import docker_settings, exists, require_docker, sandbox_image

from agentfsm.sandbox.base import SandboxError, truncation_marker
from agentfsm.sandbox.docker import DockerSandbox
from agentfsm.sandbox.session import SandboxSession

pytestmark = [pytest.mark.docker, pytest.mark.asyncio(loop_scope="module")]

TEN_MB = 10_000_000
LIMIT = 100_000


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def box() -> AsyncIterator[DockerSandbox]:
    require_docker()
    sandbox = DockerSandbox(docker_settings())
    await sandbox.start()
    try:
        yield sandbox
    finally:
        await sandbox.close()
    assert not exists("containers", sandbox.container_name)


def inspect(name: str) -> dict[str, object]:
    import docker

    client = docker.from_env()
    try:
        return client.api.inspect_container(name)  # type: ignore[no-any-return]
    finally:
        client.close()


async def processes(box: DockerSandbox) -> list[str]:
    """The container's processes other than init, its own command (the shell around its worker, then its
    sleep), the `ps` itself, the shell session and the Python worker in use or still to be used, and the
    child that worker has forked for its next call."""
    worker = box._worker.run.group if box._worker is not None else None
    rows = [row.split() for row in (await box.exec(["ps", "-eo", "pid=,ppid=,comm="])).stdout.splitlines()]
    command = {int(pid) for pid, ppid, _ in rows if ppid == "1"}  # exec'd processes have no parent inside
    own = {int(pid) for pid, ppid, _ in rows if int(ppid) in command}  # the container's worker, if running
    workers = own | {worker} if worker is not None else own
    listing = [  # nor the next call's child, forked by the worker ahead of its request
        comm for pid, ppid, comm in rows if int(pid) not in workers and int(ppid) not in workers
    ]
    stray = [p for p in listing if p not in ("docker-init", "sleep", "ps", "sh", "timeout")]
    if stray.count("bash") == 1:  # the persistent shell, if a test has used it
        stray.remove("bash")
    return stray


# -- hardening -------------------------------------------------------------------------------


async def test_container_is_hardened_as_configured(box: DockerSandbox) -> None:
    host = inspect(box.container_name)["HostConfig"]
    assert isinstance(host, dict)
    assert host["ReadonlyRootfs"] is True and host["NetworkMode"] == "none"
    assert host["Memory"] == host["MemorySwap"] == 256 * 1024**2  # swap = memory: no swap on top
    assert host["NanoCpus"] == 10**9 and host["PidsLimit"] == 64
    assert host["CapDrop"] == ["ALL"] and host["SecurityOpt"] == ["no-new-privileges"]
    assert host["Init"] is True and host["Tmpfs"] == {"/tmp": "size=64m,mode=1777"}
    labels = inspect(box.container_name)["Config"]["Labels"]  # type: ignore[index]
    assert labels["agentfsm.sandbox"] == "1" and labels["agentfsm.owner_pid"] == str(os.getpid())

    status = (await box.exec(["cat", "/proc/self/status"])).stdout
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert fields["Uid"].split()[0] == "65534"  # not root
    assert fields["CapEff"].strip() == "0000000000000000"  # no capability, and none to gain (nnp)
    assert fields["CapBnd"].strip() == "00000000000000e0"  # KILL, SETGID, SETUID: the root worker's only
    assert host["CapAdd"] == ["SETUID", "SETGID", "KILL"]
    assert fields["NoNewPrivs"].strip() == "1"


async def test_network_calls_are_refused(box: DockerSandbox) -> None:
    code = "import socket; socket.create_connection(('192.0.2.1', 80), timeout=5)"
    result = await box.exec(["python3", "-c", code])
    assert result.exit_code == 1 and "Network is unreachable" in result.stderr
    assert (await box.exec(["ls", "/sys/class/net"])).stdout.split() == ["lo"]


async def test_read_only_root_and_writes_outside_the_workspace_are_refused(box: DockerSandbox) -> None:
    for target in ("/etc/evil", "/usr/bin/evil", "/evil"):
        result = await box.exec(["touch", target])
        assert result.exit_code == 1 and "Read-only file system" in result.stderr
    for path in ("/etc/evil", "/tmp/evil", "../evil"):
        with pytest.raises(PermissionError, match="outside the sandbox workspace"):
            await box.write_file(path, b"x")
    result = await box.exec(["sh", "-c", "touch /workspace/ok /tmp/ok && stat -c %u /workspace/ok"])
    assert result.exit_code == 0 and result.stdout == "65534\n"


async def test_path_traversal_and_symlinks_out_are_refused(box: DockerSandbox) -> None:
    await box.exec(["sh", "-c", "ln -sfn / rootlink && ln -sfn /etc/passwd pw && mkdir -p d"])
    for path in ("../etc/passwd", "d/../../etc/passwd", "/etc/passwd", "rootlink/etc/passwd", "pw"):
        with pytest.raises(PermissionError, match="outside the sandbox workspace"):
            await box.read_file(path)
        with pytest.raises(PermissionError):
            await box.write_file(path, b"x")
    with pytest.raises(PermissionError):
        await box.write_file("rootlink/tmp/x", b"x")
    assert await box.resolve("d/../inside.txt") == "/workspace/inside.txt"


async def test_files_in_and_out_of_the_workspace(box: DockerSandbox) -> None:
    await box.write_file("deep/er/f.bin", b"\x00\xffdata")
    assert await box.read_file("/workspace/deep/er/f.bin") == b"\x00\xffdata"
    listing = await box.exec(["stat", "-c", "%U %a", "deep", "deep/er/f.bin"])
    assert listing.stdout == "nobody 2775\nnobody 664\n"  # the sandbox user's, and its group's (the shell)
    assert (await box.exec(["sh", "-c", "echo more >> deep/er/f.bin"])).exit_code == 0
    with pytest.raises(FileNotFoundError):
        await box.read_file("missing.txt")
    with pytest.raises(IsADirectoryError):
        await box.read_file("deep")


# -- limits ----------------------------------------------------------------------------------


async def test_infinite_loop_is_killed_at_the_timeout_and_the_next_call_works(box: DockerSandbox) -> None:
    began = time.monotonic()
    result = await box.exec(["python3", "-c", "while True: pass"], timeout=2)
    assert result.timed_out and result.exit_code is None
    assert "ran longer than its 2 s timeout" in result.stderr
    assert time.monotonic() - began < 5
    assert await processes(box) == []
    assert (await box.exec(["echo", "next"])).stdout == "next\n"


async def test_children_that_leave_the_process_group_are_killed_by_the_host_watchdog(
    box: DockerSandbox,
) -> None:
    result = await box.exec(["sh", "-c", "setsid sleep 300 & sleep 300"], timeout=1)
    assert result.timed_out
    assert await processes(box) == []


async def test_memory_hog_is_stopped_by_the_limit_with_a_clear_result(box: DockerSandbox) -> None:
    hog = "chunks = []\nwhile True: chunks.append(bytearray(10 * 1024 * 1024))"
    result = await box.exec(["python3", "-c", hog], timeout=30)
    assert result.oom_killed and result.exit_code == 137 and not result.timed_out
    assert "ran out of memory (the sandbox's limit is 256m)" in result.stderr
    assert (await box.exec(["echo", "alive"])).stdout == "alive\n"
    shell = await box.bash(f"python3 -c '{hog}'")
    assert shell.oom_killed and "ran out of memory" in shell.stderr


async def test_fork_bomb_is_held_by_the_pids_limit_and_the_host_is_unaffected(box: DockerSandbox) -> None:
    bomb = "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass"
    running = asyncio.create_task(box.exec(["python3", "-c", bomb], timeout=4))
    await asyncio.sleep(2)
    import docker

    client = docker.from_env()
    try:
        in_container = len(client.containers.get(box.container_name).top()["Processes"])
    finally:
        client.close()
    assert in_container <= 64
    assert subprocess.run(["true"], check=False).returncode == 0  # the host can still fork
    result = await running
    assert result.timed_out
    events = await box.exec(["sh", "-c", "cat /sys/fs/cgroup/pids/pids.events /sys/fs/cgroup/pids.events"])
    refused = int(events.stdout.split()[1])  # "max N": forks the limit refused (cgroup v1 or v2)
    assert refused > 0
    assert await processes(box) == []

    # In the persistent shell only the host-side watchdog applies, and its killer must find a free pid.
    shell = await box.bash(f"python3 -c '{bomb}'", timeout=3)
    assert shell.timed_out and "session was restarted" in shell.stderr
    assert await processes(box) == []
    assert (await box.bash("echo recovered")).stdout == "recovered\n"


async def test_ten_megabytes_of_output_are_clipped_with_a_marker_without_hanging(box: DockerSandbox) -> None:
    code = f"import sys; sys.stdout.write('x' * {TEN_MB}); sys.stderr.write('y' * {TEN_MB})"
    began = time.monotonic()
    result = await box.exec(["python3", "-c", code])
    assert time.monotonic() - began < 20
    assert result.exit_code == 0 and result.truncated
    assert result.stdout == "x" * LIMIT + truncation_marker(TEN_MB - LIMIT)
    assert result.stderr == "y" * LIMIT + truncation_marker(TEN_MB - LIMIT)

    shell = await box.bash(f"head -c {TEN_MB} /dev/zero | tr '\\0' z")
    assert shell.truncated and shell.stdout == "z" * LIMIT + truncation_marker(TEN_MB - LIMIT)
    assert (await box.bash("echo still in sync")).stdout == "still in sync\n"


async def test_the_event_loop_keeps_running_during_a_command(box: DockerSandbox) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    task = asyncio.create_task(ticker())
    await box.exec(["sleep", "1"])
    task.cancel()
    assert ticks >= 10


async def test_bash_session_keeps_state_and_restarts_after_a_timeout(box: DockerSandbox) -> None:
    await box.bash("mkdir -p sub && cd sub && export GREETING=hi")
    kept = await box.bash('pwd; echo "$GREETING"; cat')
    assert kept.stdout == "/workspace/sub\nhi\n" and kept.exit_code == 0
    stuck = await box.bash("sleep 300", timeout=1)
    assert stuck.timed_out and "session was restarted" in stuck.stderr
    assert (await box.bash('pwd; echo "[$GREETING]"')).stdout == "/workspace\n[]\n"
    exited = await box.bash("exit 5")
    assert exited.exit_code == 5 and "the shell exited" in exited.stderr
    assert (await box.bash("echo back")).stdout == "back\n"


# -- the Python worker -----------------------------------------------------------------------


async def worker_pid(box: DockerSandbox) -> int:
    seen = await box.run_python("import os; print(os.getppid())")
    assert seen.exit_code == 0, seen
    return int(seen.stdout)


async def test_snippets_run_in_fresh_children_of_one_worker_and_nothing_leaks_between_them(
    box: DockerSandbox,
) -> None:
    first = await worker_pid(box)
    leaky = (
        "import os\nopen('mymod.py', 'w').write('V = 1')\nimport mymod\nx = mymod.V\n"
        "os.chdir('/tmp')\nos.environ['LEAK'] = '1'\nopen('/workspace/w.txt', 'w').write('kept')"
    )
    assert (await box.run_python(leaky)).exit_code == 0
    seen = await box.run_python(
        "import os, sys\nprint('x' in dir(), 'mymod' in sys.modules, os.getcwd(), os.environ.get('LEAK'))\n"
        "print(open('w.txt').read(), __name__, sys.argv, repr(sys.stdin.read()))"
    )
    assert seen.stdout == "False False /workspace None\nkept __main__ ['-'] ''\n"
    draws = [(await box.run_python("import random; print(random.random())")).stdout for _ in range(2)]
    assert draws[0] != draws[1]  # each child seeds its own generator
    failed = await box.run_python("print('before')\n1 / 0")
    assert failed.exit_code == 1 and failed.stdout == "before\n"
    assert failed.stderr == (
        'Traceback (most recent call last):\n  File "<stdin>", line 2, in <module>\n'
        "ZeroDivisionError: division by zero\n"
    )
    assert (await box.run_python("import sys; sys.exit(4)")).exit_code == 4
    assert await worker_pid(box) == first


async def test_the_worker_kills_a_snippet_at_its_timeout_and_stays(box: DockerSandbox) -> None:
    first = await worker_pid(box)
    code = (
        "import subprocess, time\nsubprocess.Popen(['setsid', 'sleep', '300'])\n"
        "print('up', flush=True)\ntime.sleep(300)"
    )
    began = time.monotonic()
    result = await box.run_python(code, timeout=1)
    assert result.timed_out and result.exit_code is None and result.stdout == "up\n"
    assert "ran longer than its 1 s timeout" in result.stderr
    assert time.monotonic() - began < 3
    assert await processes(box) == []  # the child that left its process group too
    assert await worker_pid(box) == first
    left = await box.run_python("import subprocess; subprocess.Popen(['sleep', '300']); print('done')")
    assert left.stdout == "done\n" and await processes(box) == []  # its group ends with the call


async def signal_worker(box: DockerSandbox, pid: int, signal: str) -> None:
    """Signal the worker as root, from outside the snippet (which cannot: the worker is another user's)."""
    await asyncio.sleep(0.5)
    assert box._engine is not None
    await asyncio.to_thread(box._engine.simple, ["kill", f"-{signal}", str(pid)], wrap=False, user="0:0")


async def test_a_killed_worker_is_an_observation_and_the_next_call_starts_another(box: DockerSandbox) -> None:
    first = await worker_pid(box)
    code = "import time\nprint('bye', flush=True)\ntime.sleep(300)"
    killed, _ = await asyncio.gather(box.run_python(code), signal_worker(box, first, "KILL"))
    assert killed.exit_code == 137 and killed.stdout == "bye\n"
    assert "the Python worker ended during this call" in killed.stderr
    assert await worker_pid(box) != first


async def test_a_stopped_worker_is_killed_by_the_host_watchdog_and_replaced(box: DockerSandbox) -> None:
    first = await worker_pid(box)
    began = time.monotonic()
    result, _ = await asyncio.gather(
        box.run_python("import time\ntime.sleep(300)", timeout=1), signal_worker(box, first, "STOP")
    )
    assert result.timed_out and time.monotonic() - began < 10
    assert await processes(box) == []
    assert await worker_pid(box) != first


async def test_memory_hog_fork_bomb_and_flood_in_the_worker(box: DockerSandbox) -> None:
    first = await worker_pid(box)
    hog = await box.run_python(
        "chunks = []\nwhile True: chunks.append(bytearray(10 * 1024 * 1024))", timeout=30
    )
    assert hog.oom_killed and hog.exit_code == 137 and not hog.timed_out
    assert "ran out of memory (the sandbox's limit is 256m)" in hog.stderr
    assert await worker_pid(box) == first  # the snippet was the one to go, not the worker

    bomb = await box.run_python(
        "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass", timeout=3
    )
    assert bomb.timed_out
    assert await processes(box) == []
    assert await worker_pid(box) == first

    code = f"import sys; sys.stdout.write('x' * {TEN_MB}); sys.stderr.write('y' * {TEN_MB})"
    flood = await box.run_python(code)
    assert flood.exit_code == 0 and flood.truncated
    assert flood.stdout == "x" * LIMIT + truncation_marker(TEN_MB - LIMIT)
    assert flood.stderr == "y" * LIMIT + truncation_marker(TEN_MB - LIMIT)
    assert (await box.run_python("print('in sync')")).stdout == "in sync\n"


async def test_network_and_read_only_root_hold_in_the_worker(box: DockerSandbox) -> None:
    net = await box.run_python("import socket; socket.create_connection(('192.0.2.1', 80), timeout=5)")
    assert net.exit_code == 1 and "Network is unreachable" in net.stderr
    root = await box.run_python("open('/etc/evil', 'w')")
    assert root.exit_code == 1 and "Read-only file system" in root.stderr


WORKER_PARENT = (
    "import os\nppid = open(f'/proc/{os.getppid()}/stat').read().rsplit(')', 1)[1].split()[1]\nprint(ppid)"
)
"""Prints the parent of the worker: the container's own command (a child of init, pid 1) for the container's
worker, 0 for one started through exec (its parent is outside the container)."""


async def test_the_first_call_runs_on_the_containers_own_worker_which_holds_every_limit() -> None:
    require_docker()
    async with DockerSandbox(docker_settings()) as box:
        first = await worker_pid(box)
        parent = (await box.run_python(WORKER_PARENT)).stdout.strip()
        assert parent != "0"  # not exec'd: a child of the container's own command
        command = await box.exec(["sh", "-c", f"cat /proc/{parent}/stat"])
        assert command.stdout.rsplit(")", 1)[1].split()[1] == "1"  # which is init's child

        timed = await box.run_python("import time; print('up', flush=True); time.sleep(300)", timeout=1)
        assert timed.timed_out and timed.stdout == "up\n"
        hog = await box.run_python("chunks = []\nwhile True: chunks.append(bytearray(10 * 1024 * 1024))")
        assert hog.oom_killed and hog.exit_code == 137 and "ran out of memory" in hog.stderr
        bomb = await box.run_python(
            "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass", timeout=3
        )
        assert bomb.timed_out and await processes(box) == []
        code = f"import sys; sys.stdout.write('x' * {TEN_MB}); sys.stderr.write('y' * {TEN_MB})"
        flood = await box.run_python(code)
        assert flood.stdout == "x" * LIMIT + truncation_marker(TEN_MB - LIMIT)
        assert flood.stderr == "y" * LIMIT + truncation_marker(TEN_MB - LIMIT)
        net = await box.run_python("import socket; socket.create_connection(('192.0.2.1', 80), timeout=5)")
        assert net.exit_code == 1 and "Network is unreachable" in net.stderr
        root = await box.run_python("open('/etc/evil', 'w')")
        assert root.exit_code == 1 and "Read-only file system" in root.stderr
        signalled = await box.run_python(  # the worker is another user's: the snippet cannot signal it
            "import os, signal\nfor sig in (signal.SIGHUP, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):\n"
            "    try: os.kill(os.getppid(), sig)\n    except PermissionError: print('refused')\n"
            "print(signal.getsignal(signal.SIGHUP) == signal.SIG_DFL)"
        )
        assert signalled.stdout == "refused\n" * 4 + "True\n"
        assert await worker_pid(box) == first
        assert inspect(box.container_name)["State"]["Running"] is True  # type: ignore[index]


async def test_the_containers_worker_killed_leaves_the_container_running_and_the_next_worker_is_execd() -> (
    None
):
    require_docker()
    async with DockerSandbox(docker_settings()) as box:
        first = await worker_pid(box)
        code = "import subprocess, time\nsubprocess.Popen(['setsid', 'sleep', '300'])\n"
        code += "print('bye', flush=True)\n"
        killed, _ = await asyncio.gather(
            box.run_python(code + "time.sleep(300)"), signal_worker(box, first, "KILL")
        )
        assert killed.exit_code == 137 and killed.stdout == "bye\n" and not killed.timed_out
        assert killed.stderr == "\n[the Python worker ended during this call; the next call starts a new one]"
        assert killed.duration_s < 5  # its shell says so at once; the snippet's sleep is not waited for
        assert await processes(box) == []  # what the dead worker's call left running was killed with it
        assert inspect(box.container_name)["State"]["Running"] is True  # type: ignore[index]
        second = await worker_pid(box)
        assert second != first
        assert (await box.run_python(WORKER_PARENT)).stdout == "0\n"  # started through exec

        stopped, _ = await asyncio.gather(
            box.run_python("import time\ntime.sleep(300)", timeout=1), signal_worker(box, second, "STOP")
        )
        assert stopped.timed_out and await worker_pid(box) not in (first, second)

    async with DockerSandbox(docker_settings()) as box:  # the container's worker stopped: the watchdog
        first = await worker_pid(box)
        stopped, _ = await asyncio.gather(
            box.run_python("import time\ntime.sleep(300)", timeout=1), signal_worker(box, first, "STOP")
        )
        assert stopped.timed_out and await processes(box) == []
        assert inspect(box.container_name)["State"]["Running"] is True  # type: ignore[index]
        assert await worker_pid(box) != first


# -- lifecycle -------------------------------------------------------------------------------


async def test_cancellation_mid_exec_removes_the_container() -> None:
    require_docker()
    sandbox = DockerSandbox(docker_settings())

    async def work(call: str) -> None:
        async with sandbox:
            if call == "exec":
                await sandbox.exec(["sleep", "300"])
            elif call == "python":
                await sandbox.run_python("import time; time.sleep(300)")
            else:
                await sandbox.bash("sleep 300")

    for call in ("exec", "python", "bash"):
        sandbox = DockerSandbox(docker_settings())
        task = asyncio.create_task(work(call))
        while not exists("containers", sandbox.container_name):
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # well into the command
        began = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - began < 10
        assert not exists("containers", sandbox.container_name)
        assert not exists("volumes", sandbox.container_name)


async def test_cancellation_during_start_leaves_nothing() -> None:
    require_docker()
    sandbox = DockerSandbox(docker_settings())
    task = asyncio.create_task(sandbox.start())
    await asyncio.sleep(0.05)  # inside the engine's calls: a start takes more than 0.15 s on any engine
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not exists("containers", sandbox.container_name)
    assert not exists("volumes", sandbox.container_name)


async def test_session_lifecycle_with_docker() -> None:
    require_docker()
    session = SandboxSession(
        docker_settings(mode="auto", keep_alive=False)
    )  # auto: engine and image are here
    first, second = await asyncio.gather(session.get(), session.get())
    assert first is second and first.kind == "docker"
    assert isinstance(first, DockerSandbox) and exists("containers", first.container_name)
    await session.end_run()
    assert not session.active and not exists("containers", first.container_name)

    kept = SandboxSession(docker_settings(keep_alive=True))
    box = await kept.get()
    assert isinstance(box, DockerSandbox)
    await kept.end_run()
    assert exists("containers", box.container_name)
    await kept.end_run(failed=True)
    assert not exists("containers", box.container_name)
    await kept.close()


async def test_a_sandbox_dropped_without_close_is_removed_all_the_same() -> None:
    require_docker()
    box = DockerSandbox(docker_settings())
    await box.start()
    await box.run_python("print(1)")
    name = box.container_name
    del box
    gc.collect()
    assert not exists("containers", name) and not exists("volumes", name)


async def test_a_kept_sandbox_never_closed_is_removed_with_its_event_loop() -> None:
    require_docker()
    script = textwrap.dedent("""
        import asyncio, sys
        from agentfsm.sandbox.session import SandboxSession
        from agentfsm.sandbox.settings import SandboxSettings

        KEPT = []

        async def main():
            session = SandboxSession(SandboxSettings(mode="docker", image=sys.argv[1]))  # kept by default
            KEPT.append(session)  # alive until the interpreter exits, never closed
            box = await session.get()
            await box.run_python("print(1)")
            await session.end_run()  # the run went well: kept
            print(box.container_name, flush=True)

        asyncio.run(main())
    """)
    done = subprocess.run(
        [sys.executable, "-c", script, sandbox_image()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    name = done.stdout.strip()
    assert name.startswith("agentfsm-sandbox-")
    assert not exists("containers", name) and not exists("volumes", name)


async def test_leftovers_of_a_dead_process_are_removed_and_live_or_unknown_owners_kept(
    agentfsm_events: Any,
) -> None:
    """Only an owner provably dead (this boot, this pid namespace, its pid gone or reused) loses its sandbox.

    The pid of a dead process here stands for a live process of another pid
    namespace (a container run with the host's network shares the hostname):
    judged by the pid alone, its sandbox would be removed mid-run.
    """
    require_docker()
    import docker

    from agentfsm.sandbox import docker_engine

    dead = subprocess.Popen(["true"])
    dead.wait()
    labels = docker_engine.owner_labels("leftover")
    labels.update({"agentfsm.owner_pid": str(dead.pid), "agentfsm.owner_started": "1"})
    kept = {
        "another host": {**labels, "agentfsm.owner_host": f"not-{socket.gethostname()}"},
        "another pid namespace": {**labels, "agentfsm.owner_pidns": "pid:[1]"},
        "another boot": {**labels, "agentfsm.owner_boot": "00000000-0000-0000-0000-000000000000"},
        "no namespace recorded": {k: v for k, v in labels.items() if k != "agentfsm.owner_pidns"},
    }
    client = docker.from_env()
    made: list[Any] = []
    try:
        volume = client.volumes.create(name="agentfsm-test-leftover", labels=labels)
        other_volume = client.volumes.create(name="agentfsm-test-kept", labels=kept["another pid namespace"])
        made += [volume, other_volume]
        crashed = client.containers.create(sandbox_image(), ["sleep", "infinity"], labels=labels)
        alive = {
            why: client.containers.create(sandbox_image(), ["sleep", "infinity"], labels=these)
            for why, these in kept.items()
        }
        made += [crashed, *alive.values()]
        docker_engine._SWEPT = False  # as in a new process
        async with DockerSandbox(docker_settings()):
            pass
        sweeper = docker_engine._SWEEPER
        assert sweeper is not None  # the start began the sweep, beside it
        sweeper.join(60)
        assert not exists("containers", crashed.id or "")
        assert not exists("volumes", volume.name or "")
        assert [why for why, c in alive.items() if not exists("containers", c.id or "")] == []
        assert exists("volumes", other_volume.name or "")
        [kept_event] = agentfsm_events.named("sandbox_leftovers_kept")
        assert "owned in pid namespace 'pid:[1]'" in str(kept_event["kept"])
        assert "docker rm" in str(kept_event["hint"])
    finally:
        for leftover in made:
            with contextlib.suppress(docker.errors.NotFound):
                leftover.remove(force=True)
        client.close()


async def test_missing_image_names_the_image_and_the_build_script() -> None:
    require_docker()
    sandbox = DockerSandbox(docker_settings(image="agentfsm-no-such-image:never"))
    with pytest.raises(SandboxError) as info:
        await sandbox.start()
    assert "agentfsm-no-such-image:never" in str(info.value)
    assert "agentfsm sandbox build" in str(info.value)
    assert not exists("volumes", sandbox.container_name)


async def test_a_workspace_the_image_lacks_is_handed_to_the_sandbox_user() -> None:
    """Images without the workspace directory (python:3.12-slim has none) get the volume chowned."""
    require_docker()
    async with DockerSandbox(docker_settings(workspace="/data")) as sandbox:
        await sandbox.write_file("notes/a.txt", b"hello")
        result = await sandbox.exec(["sh", "-c", "stat -c %u /data && pwd && cat notes/a.txt"])
        assert result.stdout == "65534\n/data\nhello"
