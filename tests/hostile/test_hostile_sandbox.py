"""Sandboxed code against the `python_execute` answers after its own: the next call observes its own output.

Each test plants something with one call and checks that ``print(2 + 2)`` in
the next observes exactly ``4``: a daemon that reads the worker's input and
answers in its place (forked without exec, and escaping its process group
with ``setsid``), a background process writing into the next call's output,
a snippet that looks for the end marker in its own memory and prints it,
and a snippet that stops, traces or writes to the worker. Against the real
Docker sandbox; the local sandbox's share of the same promises at the end.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from sandbox_support import docker_settings, require_docker

from agentfsm.sandbox import Sandbox
from agentfsm.sandbox.docker import DockerSandbox
from agentfsm.sandbox.local import LocalSandbox

pytestmark = [pytest.mark.asyncio(loop_scope="module")]

FOUR = "print(2 + 2)"

DAEMON = r"""
import os, signal, time
worker = os.getppid()
if os.fork() == 0:
    {escape}
    if os.fork() == 0:  # the daemon, forked without exec: it keeps the worker's environment
        time.sleep(0.5)  # the planting call has answered; the worker waits for the next request
        try:
            request = os.open(f"/proc/{{worker}}/fd/0", os.O_RDONLY)
            out = os.open(f"/proc/{{worker}}/fd/1", os.O_WRONLY)
            err = os.open(f"/proc/{{worker}}/fd/2", os.O_WRONLY)
            os.kill(worker, signal.SIGSTOP)
        except OSError as exc:
            open("/tmp/daemon.txt", "w").write(repr(exc))
            os._exit(0)
        header = b""
        while not header.endswith(b"\n"):
            header += os.read(request, 1)
        marker = header.split()[0].decode()
        os.write(out, f"FORGED\n\n{{marker}} 0\n".encode())
        os.write(err, f"\n{{marker}}\n".encode())
        os._exit(0)
    os._exit(0)
os.wait()
print("planted")
"""

GLUE = r"""
import os, time
if os.fork() == 0:
    {escape}
    if os.fork() == 0:
        while True:
            os.write(1, b"GLUED\n")
            os.write(2, b"GLUED\n")
            time.sleep(0.01)
    os._exit(0)
os.wait()
print("planted")
"""

FAKE_MARKERS = r"""
import gc, sys, time
found = set()
frame = sys._getframe()
while frame is not None:  # the worker's frames this child was forked in, and every string it holds
    found.update(v for v in frame.f_locals.values() if isinstance(v, str) and "_DONE_" in v)
    frame = frame.f_back
for obj in gc.get_objects():
    if isinstance(obj, (bytes, bytearray)) and b"__AGENTFSM_DONE_" in obj:
        found.update(w.decode() for w in bytes(obj).split() if w.startswith(b"__AGENTFSM_DONE_"))
for marker in found:
    sys.stdout.write(f"\n{marker} 0\n")
    sys.stderr.write(f"\n{marker}\n")
time.sleep(0.3)
print("FORGED")
"""

TOUCH = r"""
import os, signal
def find(comm):
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{{pid}}/comm").read().strip() == comm:
                return int(pid)
        except OSError:
            pass
    raise SystemExit(f"no {{comm}} process")
target = {target}
def attempt(name, action):
    try:
        action()
    except PermissionError:
        print(name, "denied")
    else:
        print(name, "allowed")
attempt("stdin", lambda: os.write(os.open(f"/proc/{{target}}/fd/0", os.O_WRONLY), {planted!r}))
attempt("stdout", lambda: os.open(f"/proc/{{target}}/fd/1", os.O_WRONLY))
attempt("memory", lambda: open(f"/proc/{{target}}/mem", "rb").read(1))
attempt("environ", lambda: open(f"/proc/{{target}}/environ", "rb").read())
attempt("stop", lambda: os.kill(target, signal.SIGSTOP))
attempt("kill", lambda: os.kill(target, signal.SIGKILL))
"""
TOUCH_WORKER = TOUCH.format(target="os.getppid()", planted=b"")
TOUCH_SHELL = TOUCH.format(target='find("bash")', planted=b"echo() { builtin echo FORGED; }\n")
"""A snippet at the bash tool's shell: a function planted in its input would answer the next command."""
DENIED = [f"{name} denied" for name in ("stdin", "stdout", "memory", "environ", "stop", "kill")]

INJECT = r"""
import os
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        comm = open(f"/proc/{pid}/comm").read().strip()
    except OSError:
        continue
    if comm in ("bash", "sleep"):  # the shell, and the command it runs now: both write to its output
        try:
            out = os.open(f"/proc/{pid}/fd/1", os.O_WRONLY)
        except PermissionError:
            print(comm, "denied")
        else:
            os.write(out, b"FORGED\n")
            print(comm, "written")
"""
"""A snippet run while a ``bash`` command is running (the two tools do not wait for each other) writing
into that command's output."""

ESCAPES = {"same-group": "pass", "setsid": "os.setsid()"}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def box() -> AsyncIterator[DockerSandbox]:
    require_docker()
    sandbox = DockerSandbox(docker_settings())
    await sandbox.start()
    try:
        yield sandbox
    finally:
        await sandbox.close()


async def exactly_four(box: Sandbox) -> None:
    """The next call's observation is its own output, and nothing else."""
    result = await box.run_python(FOUR)
    assert (result.stdout, result.stderr, result.exit_code) == ("4\n", "", 0)


async def leftovers(box: DockerSandbox) -> list[str]:
    """The processes of the snippets' user, other than the `ps` itself and its wrapper, the bash session, and
    the next call's child (forked ahead by the worker, waiting for its source)."""
    assert box._worker is not None
    worker = str(box._worker.run.group)
    rows = (await box.exec(["ps", "-u", "65534", "-o", "ppid=,comm="])).stdout.splitlines()
    return [row for row in rows if row.split()[1] not in ("ps", "sh", "timeout") and row.split()[0] != worker]


@pytest.mark.docker
@pytest.mark.parametrize("escape", ESCAPES)
async def test_a_planted_daemon_cannot_answer_the_next_call(box: DockerSandbox, escape: str) -> None:
    planted = await box.run_python(DAEMON.format(escape=ESCAPES[escape]))
    assert planted.stdout == "planted\n"
    await asyncio.sleep(1)  # the daemon's time to take its place on the worker's input
    await exactly_four(box)
    assert await leftovers(box) == []  # killed at the end of its call, wherever it went
    await exactly_four(box)


@pytest.mark.docker
@pytest.mark.parametrize("escape", ESCAPES)
async def test_background_output_is_not_glued_into_the_next_result(box: DockerSandbox, escape: str) -> None:
    planted = await box.run_python(GLUE.format(escape=ESCAPES[escape]))
    assert "planted" in planted.stdout  # what it wrote during its own call is its call's
    await exactly_four(box)
    await exactly_four(box)


@pytest.mark.docker
async def test_the_end_marker_is_not_in_the_snippets_memory(box: DockerSandbox) -> None:
    """A fake end line with the marker found in the child's memory would end the call early, and what the
    snippet printed after it would open the next call's output."""
    faked = await box.run_python(FAKE_MARKERS)
    assert faked.stdout.endswith("FORGED\n")  # no marker of this call was found: it did not end early
    await exactly_four(box)


@pytest.mark.docker
async def test_a_snippet_can_neither_stop_trace_nor_write_to_its_worker(box: DockerSandbox) -> None:
    touched = await box.run_python(TOUCH_WORKER)
    assert touched.stdout.split("\n")[:-1] == DENIED
    await exactly_four(box)


@pytest.mark.docker
async def test_a_snippet_cannot_plant_a_command_in_the_bash_shell(box: DockerSandbox) -> None:
    """The shell runs as a uid of its own: a snippet can neither write into its input nor stop, kill or
    read it, so the next ``bash`` result is that command's own."""
    assert (await box.bash("echo ready")).stdout == "ready\n"
    touched = await box.run_python(TOUCH_SHELL)
    assert touched.stdout.split("\n")[:-1] == DENIED, touched
    real = await box.bash("echo real; id -u")
    assert (real.stdout, real.exit_code) == (f"real\n{box.settings.shell_identity.split(':')[0]}\n", 0)


@pytest.mark.docker
async def test_a_snippet_cannot_write_into_a_running_bash_commands_output(box: DockerSandbox) -> None:
    command = asyncio.ensure_future(box.bash("sleep 1.5; echo real"))
    await asyncio.sleep(0.5)
    injected = await box.run_python(INJECT)
    assert sorted(injected.stdout.splitlines()) == ["bash denied", "sleep denied"], injected
    assert (await command).stdout == "real\n"


@pytest.mark.docker
async def test_the_shell_and_the_snippets_share_the_workspace(box: DockerSandbox) -> None:
    """Two users, one group: what either makes the other can change, and what the sandbox writes too."""
    await box.run_python("open('by_snippet.txt', 'w').write('a')")
    await box.write_file("by_sandbox.txt", b"b")
    shell = await box.bash("echo c >> by_snippet.txt && echo d >> by_sandbox.txt && echo e > by_shell.txt")
    assert shell.exit_code == 0, shell
    names = ("by_snippet.txt", "by_sandbox.txt", "by_shell.txt")
    code = f"open('by_shell.txt', 'a').write('f')\nprint(*(open(n).read() for n in {names!r}))"
    seen = await box.run_python(code)
    assert seen.stdout == "ac\n bd\n e\nf\n", seen


@pytest.mark.docker
async def test_a_snippet_runs_as_the_sandbox_user_marked_by_a_group_it_cannot_drop(
    box: DockerSandbox,
) -> None:
    code = (
        "import os\nprint(os.getuid(), os.getgid(), os.getgroups())\n"
        "try:\n    os.setgroups([])\nexcept PermissionError:\n    print('kept')"
    )
    seen = await box.run_python(code)
    uid, gid, *_ = seen.stdout.split()
    assert (uid, gid) == ("65534", "65534") and seen.stdout.endswith("kept\n")


@pytest.mark.parametrize("escape", ESCAPES)
async def test_the_local_sandbox_kills_a_planted_daemon_and_keeps_its_output_out(escape: str) -> None:
    """Locally the snippets run as the worker's user: a planted daemon could reach the worker while it
    lives, so it must not live past its call (the worker is a subreaper: ``setsid`` keeps it a descendant)."""
    async with LocalSandbox() as local:
        planted = await local.run_python(GLUE.format(escape=ESCAPES[escape]).replace("/tmp", "."))
        assert "planted" in planted.stdout
        await exactly_four(local)
        planted = await local.run_python(FAKE_MARKERS)
        assert planted.stdout.endswith("FORGED\n")
        await exactly_four(local)
