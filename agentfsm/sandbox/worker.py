"""The Python worker: one process per sandbox, started once, that runs each snippet in a forked child.

Why it exists: `python_execute` as a process of its own pays an interpreter
start and, in Docker, an exec round trip through the engine and runc for
every call (some 60 ms); a worker that already runs in the sandbox pays a
``fork`` (about a millisecond).

Forked child, not a fresh interpreter state in the worker: each snippet runs
in a child forked from the worker, never in the worker itself. The worker
runs no snippet code, so every child starts from the same untouched state
and ends with its call: nothing a snippet defines, imports, patches or
leaves half done (a lock held, a thread running, a changed directory or
environment variable) reaches the next call. A fresh namespace or a
sub-interpreter inside one process would share the process: a timeout could
not kill the snippet without killing the worker, the memory and pids limits
would count against both, and a C extension crash would take the worker
down. A child is a process: the timeout kills it (and its process group),
and its memory, pids and crashes are its own. What a child does inherit:
the modules the worker imported (`os`, `sys`, `signal`, `select` and their
dependencies), already initialised, and the worker's hash seed; `random` is
not among them, so each child seeds its own.

Protocol, on stdin: a line ``MARKER TIMEOUT SIZE`` and SIZE bytes of UTF-8
source. The child runs it as ``python3 -u -`` would (``__name__`` is
``"__main__"``, the file is ``<stdin>``, stdin is empty, output unbuffered,
exit status 1 and the traceback on stderr for an exception, `SystemExit`
honoured), writing straight to the worker's stdout and stderr. Once it has
ended, and with it everything left in its process group, the worker prints
``\\nMARKER STATUS\\n`` on stdout and ``\\nMARKER\\n`` on stderr: STATUS is the
exit status (128 + N when killed by signal N) or -1 when the timeout
killed it. With ``--announce`` the worker first prints its pid, which is
also its process group (for the sandbox's killers): an exec's first process
leads its group already, and a worker started by a shell makes its own.

The timeout kills the child's process group, then every process carrying a
tag of this worker (`EXEC_TAG`: each call's children get ``PREFIX.N``, the
worker itself ``PREFIX.worker``) other than the worker and its ancestors (a
local supervisor carries the worker's tag), stopped then killed round after
round so a fork bomb cannot outrun it. The worker never needs a new process
for that, so a pids limit the bomb exhausted does not stop it. When a call
ends normally, its process group is killed; a process that left the group
(``setsid``) lives on until a later timeout or the sandbox's close,
as it would after a command of its own.

Only the standard library, and nothing imported from agentfsm: the file runs
as ``python -u -c SOURCE`` (`base.WORKER_SOURCE`), in a container and locally.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from typing import BinaryIO

TAG = "AGENTFSM_EXEC"
TIMED_OUT = -1
_PASSES = 100
_RELAYED = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
"""The signals a snippet may send its parent: passed on to the worker's parent, as a local
supervisor does for a command (`reaper`), so a snippet sees of its parent what a process of its own
would; none of them ends the worker. In a container the parent is outside: they are dropped."""


def _relay(signum: int, frame: object) -> None:
    parent = os.getppid()
    if parent > 1:
        with contextlib.suppress(OSError):
            os.kill(parent, signum)


def ancestors() -> set[int]:
    """This process and its ancestors: they may carry its tag (a local supervisor does) and are spared."""
    found, pid = set(), os.getpid()
    while pid > 1 and pid not in found:
        found.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                pid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return found


def _tagged(prefix: bytes, spared: set[int]) -> list[int]:
    """Every living process but `spared` whose environment holds a tag starting with `prefix`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in spared:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if prefix not in b"\0" + fh.read():
                    continue
            with open(f"/proc/{name}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                    continue
        except (OSError, IndexError):
            continue
        found.append(int(name))
    return found


def kill_all(group: int, prefix: str, spared: set[int]) -> None:
    """SIGKILL process group `group`, then every process but `spared` tagged with `prefix`, until none is
    left."""
    with contextlib.suppress(OSError):
        os.killpg(group, signal.SIGKILL)
    needle = b"\0" + TAG.encode() + b"=" + prefix.encode()
    for _ in range(_PASSES):
        victims = _tagged(needle, spared)
        if not victims:
            return
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in victims:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)


def _wait(pid: int, timeout: float) -> int | None:
    """The child's wait status once it has ended, or None when `timeout` seconds passed first."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd (an old kernel): poll
        deadline, pause = time.monotonic() + timeout, 0.0005
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            if time.monotonic() >= deadline:
                return None
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
    if not ready:
        return None
    return os.waitpid(pid, 0)[1]


def _child(source: bytes, tag: str) -> None:
    """Run one snippet as ``python3 -u -`` would, then end this process with its exit status."""
    os.setpgid(0, 0)
    for relayed in _RELAYED:  # the snippet's own signals, as in a new interpreter
        signal.signal(relayed, signal.default_int_handler if relayed == signal.SIGINT else signal.SIG_DFL)
    try:
        with open("/proc/self/oom_score_adj", "w") as fh:  # under the memory limit, the snippet goes first
            fh.write("1000")
    except OSError:
        pass
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - the process's own stdin
    os.environ[TAG] = tag
    sys.argv = ["-"]
    namespace = {"__name__": "__main__", "__doc__": None, "__builtins__": __builtins__}
    code = 0
    try:
        exec(compile(source, "<stdin>", "exec"), namespace)
    except SystemExit as stop:
        code = _exit_status(stop)
    except BaseException as exc:  # the interpreter's own report: the traceback on stderr, status 1
        if exc.__traceback__ is not None:  # from the snippet's frames on, without this function's
            exc.__traceback__ = exc.__traceback__.tb_next
        sys.excepthook(type(exc), exc, exc.__traceback__)
        code = 1
    try:
        if "threading" in sys.modules:  # as at the interpreter's exit: wait for non-daemon threads
            sys.modules["threading"]._shutdown()
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    os._exit(code)


def _exit_status(stop: SystemExit) -> int:
    if stop.code is None:
        return 0
    if isinstance(stop.code, int):
        return stop.code & 0xFF
    print(stop.code, file=sys.stderr)
    return 1


def serve(read: BinaryIO, prefix: str) -> None:
    """Answer requests from `read` until it ends."""
    calls, spared = 0, ancestors()
    while True:
        header = read.readline()
        if not header.endswith(b"\n"):
            return
        marker, timeout, size = header.decode().split()
        source = read.read(int(size))
        calls += 1
        tag = f"{prefix}{calls}"
        pid = os.fork()
        if pid == 0:
            try:
                _child(source, tag)
            finally:
                os._exit(70)
        with contextlib.suppress(
            OSError
        ):  # as the child does: whichever runs first, the group exists before any kill
            os.setpgid(pid, pid)
        status = _wait(pid, float(timeout))
        if status is None:
            kill_all(pid, prefix, spared)
            os.waitpid(pid, 0)
            code = TIMED_OUT
        else:
            with contextlib.suppress(OSError):  # what it left in its own process group ends with it
                os.killpg(pid, signal.SIGKILL)
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code
        os.write(1, f"\n{marker} {code}\n".encode())
        os.write(2, f"\n{marker}\n".encode())


def main(argv: list[str]) -> int:
    own = os.environ.get(TAG, "")
    prefix = own.rpartition(".")[0] + "." if "." in own else own + "."
    for relayed in _RELAYED:
        signal.signal(relayed, _relay)
    if "--announce" in argv:
        if os.getpgrp() != os.getpid():  # started by a shell (the container's own command): a group of
            os.setpgid(0, 0)  # its own, so that killing the worker's group never kills that shell
        os.write(1, f"{os.getpid()}\n".encode())
    serve(sys.stdin.buffer, prefix)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
