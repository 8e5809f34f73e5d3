"""The Python worker: one process per sandbox, started once, that runs each snippet in a forked child.

Why it exists: `python_execute` as a process of its own pays an interpreter
start and, in Docker, an exec round trip through the engine and runc for
every call (some 60 ms); a worker that already runs in the sandbox pays a
``fork`` (about a millisecond), made between calls, before the next request.

Forked child, not a fresh interpreter state in the worker: each snippet runs
in a child forked from the worker, never in the worker itself. The worker
runs no snippet code, so every child starts from the same untouched state
and ends with its call: nothing a snippet defines, imports, patches or
leaves half done (a lock held, a thread running, a changed directory or
environment variable) reaches the next call. A fresh namespace or a
sub-interpreter inside one process would share the process: a timeout could
not kill the snippet without killing the worker, the memory and pids limits
would count against both, and a C extension crash would take the worker
down. What a child does inherit: the modules the worker imported (`os`,
`sys`, `signal`, `select` and their dependencies), already initialised, and
the worker's hash seed; `random` is not among them, so each child seeds its own.

Protocol, on stdin: a line ``MARKER TIMEOUT SIZE`` and SIZE bytes of UTF-8
source. The child runs it as ``python3 -u -`` would (``__name__`` is
``"__main__"``, the file is ``<stdin>``, stdin is empty, output unbuffered,
exit status 1 and the traceback on stderr for an exception, `SystemExit`
honoured). Once it has ended, and with it every process the call left, the
worker prints ``\\nMARKER STATUS\\n`` on stdout and ``\\nMARKER\\n`` on
stderr: STATUS is the exit status (128 + N when killed by signal N) or -1
when the timeout killed it. With ``--announce`` the worker first prints its
pid, which is also its process group (for the sandbox's killers).

What a snippet cannot do to a later call's answer (the answer is the next
snippet's own output, and nothing else):

- read the marker: the child is forked before the request is read, so the
  marker the host awaits is never in its memory;
- reach the worker's input or output: the child gets pipes of its own
  (relayed by the worker) and none of the worker's descriptors, and the
  worker closes the pipes once the call is over, so whatever the snippet
  left (or passed a descriptor to) writes into nothing;
- outlive its call: when the child ends, or its timeout, every process of
  the call is stopped then killed, round after round (a fork bomb cannot
  outrun it, and no new process is needed, so an exhausted pids limit does
  not stop it). The call's processes are found by the kernel's marks, not by
  an environment they could rewrite: with ``--as UID:GID`` (a worker running
  as root, as the Docker sandbox's does) each child switches to that user
  with the supplementary group `CODE_GROUP`, which no unprivileged process
  can drop, whatever it forks, execs or ``setsid``s; and, where the
  interpreter has ctypes, the worker is a child subreaper, so the orphans of
  the calls stay its descendants;
- touch the worker: under ``--as`` the worker is another user (root), whose
  ``/proc`` entries, memory and descriptors the snippet's user cannot open,
  trace or signal. Without it (the local sandbox) the snippet runs as the
  worker's own user, which can: see the local sandbox's promises.

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

TIMED_OUT = -1
CODE_GROUP = 2_147_483_000
"""The supplementary group every snippet's processes carry (with ``--as``): the kernel's own mark, which
no unprivileged process can drop (``setgroups`` needs CAP_SETGID), whatever it forks, execs or leaves."""
_PASSES = 100
DRAIN_S = 1.0
"""After a call's processes are killed, how long its output pipes may take to reach their end."""
_CHUNK = 1 << 16
_PR_SET_CHILD_SUBREAPER = 36
_RELAYED = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
"""The signals a snippet may send its parent: passed on to the worker's parent, as a local
supervisor does for a command (`reaper`), so a snippet sees of its parent what a process of its own
would; none of them ends the worker. In a container the parent is outside: they are dropped."""

Identity = tuple[int, int]
"""The uid and gid snippets run as (``--as UID:GID``), when the worker runs as root."""


def _relay_signal(signum: int, frame: object) -> None:
    parent = os.getppid()
    if parent > 1:
        with contextlib.suppress(OSError):
            os.kill(parent, signum)


def _become_subreaper() -> None:
    """Orphans of the snippets become the worker's children, so `leftovers` finds them by ancestry.

    Through ctypes, where the interpreter has it (a host's Python does; the
    sandbox image's minimal one does not, and marks snippets by group instead).
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (ImportError, OSError, AttributeError):
        pass


def leftovers(marked: bool) -> list[int]:
    """Every living process of the snippets: the worker's descendants, and with `marked` every process
    carrying `CODE_GROUP` (one that ran ``setsid`` and whose parent ended is no descendant any more)."""
    me = os.getpid()
    found = set(_marked()) if marked else set()
    todo = _children(me)
    while todo:
        pid = todo.pop()
        if pid not in found and _state(pid) not in (b"Z", b"X", b""):
            found.add(pid)
            todo.extend(_children(pid))
    found.discard(me)
    return sorted(found)


def _children(pid: int) -> list[int]:
    """The children of every thread of `pid`, as the kernel lists them (no scan of every process)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                found.extend(int(child) for child in fh.read().split())
    return found


def _state(pid: int) -> bytes:
    """The process's state letter (``Z`` for a zombie), or empty once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return b""


def _marked() -> list[int]:
    """Every living process in `CODE_GROUP`, whatever its parent (a scan of /proc: few, in a container)."""
    found, mark = [], str(CODE_GROUP).encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as fh:
                status = fh.read()
        except OSError:
            continue
        state = status.partition(b"\nState:")[2].split(maxsplit=1)[:1]
        groups = status.partition(b"\nGroups:")[2].partition(b"\n")[0].split()
        if mark in groups and state not in ([b"Z"], [b"X"]):
            found.append(int(name))
    return found


def kill_all(group: int, marked: bool) -> None:
    """SIGKILL process group `group`, then every process of the snippets (`leftovers`) until none is left:
    stopped then killed, round after round, so a fork bomb cannot outrun it. No new process is needed
    for that, so a pids limit the bomb exhausted does not stop it."""
    with contextlib.suppress(OSError):
        os.killpg(group, signal.SIGKILL)
    # The group's leader (the snippet) reaped first: its children are the worker's from then on (a
    # dying parent hands them on as it exits), so no pass can look at them while they move between
    # the two and miss one that left its group (``setsid``).
    with contextlib.suppress(ChildProcessError):
        os.waitpid(group, 0)
    for _ in range(_PASSES):
        victims = leftovers(marked)
        if not victims:
            break
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in victims:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
        _reap()
    _reap()


def _reap() -> None:
    """Collect the worker's ended children (orphans it adopted as a subreaper)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


class _Call:
    """The next snippet's process, forked before its request is read, and its three pipes.

    Forked first so that the request, and the marker the host awaits, are never in the memory the
    snippet runs in; with pipes of its own so that nothing the snippet leaves behind can write to the
    worker's output once the call is over (the worker closes their ends), nor read its input."""

    def __init__(self, identity: Identity | None) -> None:
        request_r, self.request = os.pipe()
        self.out, out_w = os.pipe()
        self.err, err_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                _child(request_r, out_w, err_w, identity)
            finally:
                os._exit(70)
        for fd in (request_r, out_w, err_w):
            os.close(fd)
        with contextlib.suppress(OSError):  # as the child does: whichever runs first, the group exists
            os.setpgid(self.pid, self.pid)

    def alive(self) -> bool:
        """Whether the child still waits for its source (the memory limit may have killed it meanwhile)."""
        try:
            return os.waitpid(self.pid, os.WNOHANG)[0] == 0
        except ChildProcessError:
            return False

    def send(self, source: bytes) -> None:
        try:  # under the memory limit the snippet goes first, once it runs: an idle child would go instead
            with open(f"/proc/{self.pid}/oom_score_adj", "w") as fh:
                fh.write("1000")
        except OSError:
            pass
        with contextlib.suppress(OSError):  # the child died waiting (the memory limit): `wait` says so
            view = memoryview(source)
            while view:
                view = view[os.write(self.request, view) :]
        os.close(self.request)

    def wait(self, timeout: float) -> int | None:
        """Relay the child's output until it ends; its wait status, or None when `timeout` passed first."""
        deadline = time.monotonic() + timeout
        try:
            pidfd: int | None = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # no pidfd (an old kernel): poll
            pidfd = None
        try:
            streams = {self.out: 1, self.err: 2}
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                watched = [*streams, pidfd] if pidfd is not None else list(streams)
                ready, _, _ = select.select(watched, [], [], left if pidfd is not None else min(left, 0.005))
                for fd in ready:
                    if fd in streams and not _copy(fd, streams[fd]):
                        del streams[fd]
                if pidfd is None or pidfd in ready:
                    done, status = os.waitpid(self.pid, 0 if pidfd is not None else os.WNOHANG)
                    if done:
                        return status
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def drain(self) -> None:
        """Pass on what the call's processes wrote before they ended; then close the pipes for good."""
        streams = {self.out: 1, self.err: 2}
        deadline = time.monotonic() + DRAIN_S
        while streams and (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select(list(streams), [], [], left)
            for fd in ready:
                if not _copy(fd, streams[fd]):
                    del streams[fd]
        os.close(self.out)
        os.close(self.err)

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        for fd in (self.request, self.out, self.err):
            with contextlib.suppress(OSError):
                os.close(fd)


def _copy(source: int, target: int) -> bool:
    """Pass one chunk from `source` to `target`; False at the end of `source`."""
    data = os.read(source, _CHUNK)
    view = memoryview(data)
    while view:
        view = view[os.write(target, view) :]
    return bool(data)


def _child(request: int, out: int, err: int, identity: Identity | None) -> None:
    """Become the next snippet's process: its pipes, its user, then its source, and run it."""
    os.setpgid(0, 0)
    for relayed in _RELAYED:  # the snippet's own signals, as in a new interpreter
        signal.signal(relayed, signal.default_int_handler if relayed == signal.SIGINT else signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.dup2(request, 3)
    os.closerange(4, os.sysconf("SC_OPEN_MAX"))  # nothing of the worker's: its input, output, pidfds
    if identity is not None:  # from root to the sandbox user, marked by a group it cannot drop
        uid, gid = identity
        os.setgroups([CODE_GROUP])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        os.umask(0o002)  # the shell's user shares the workspace through the group
    chunks = []
    while chunk := os.read(3, _CHUNK):
        chunks.append(chunk)
    os.close(3)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - the process's own stdin
    sys.argv = ["-"]
    _run(b"".join(chunks))


def _run(source: bytes) -> None:
    """Run one snippet as ``python3 -u -`` would, then end this process with its exit status."""
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
            sys.modules["threading"]._shutdown()  # noqa: SLF001 - what the interpreter calls at exit
        import atexit

        atexit._run_exitfuncs()  # noqa: SLF001 - as the interpreter does at exit, without exiting
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


def serve(read: BinaryIO, identity: Identity | None = None) -> None:
    """Answer requests from `read` until it ends."""
    marked = identity is not None
    call = _Call(identity)
    while True:
        header = read.readline()
        if not header.endswith(b"\n"):
            call.discard()
            return
        marker, timeout, size = header.decode().split()
        source = read.read(int(size))
        if not call.alive():
            call.discard()
            call = _Call(identity)
        call.send(source)
        status = call.wait(float(timeout))
        kill_all(call.pid, marked)  # what the call left running ends with it, wherever it went
        if status is None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(call.pid, 0)
            code = TIMED_OUT
        else:
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code
        call.drain()
        os.write(1, f"\n{marker} {code}\n".encode())
        os.write(2, f"\n{marker}\n".encode())
        call = _Call(identity)


def _identity(argv: list[str]) -> Identity | None:
    if "--as" not in argv:
        return None
    uid, _, gid = argv[argv.index("--as") + 1].partition(":")
    return int(uid), int(gid or uid)


def main(argv: list[str]) -> int:
    for relayed in _RELAYED:
        signal.signal(relayed, _relay_signal)
    identity = _identity(argv) if os.geteuid() == 0 else None
    _become_subreaper()
    if "--announce" in argv:
        if os.getpgrp() != os.getpid():  # started by a shell (the container's own command): a group of
            os.setpgid(0, 0)  # its own, so that killing the worker's group never kills that shell
        os.write(1, f"{os.getpid()}\n".encode())
    serve(sys.stdin.buffer, identity)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
