"""The local sandbox's supervisor: every command runs under one, and nothing it starts gets away.

Tags in the environment and process groups both fall to ``setsid env -i``:
a daemon so started carries neither. What it cannot drop is its ancestry.
Each command is the child of a small supervisor (this file, run as
``python -I -S reaper.py``) that marks itself a *child subreaper*
(``PR_SET_CHILD_SUBREAPER``, Linux 3.4, no privileges needed): a process
orphaned anywhere below it is re-parented to the supervisor, not to init. So
the supervisor's descendants are, at every moment, exactly what the command
started, and `kill_tree` kills them by walking /proc's parent links. The
supervisor outlives its command while such descendants run (a server started
by one command serves the next), reaps them, and exits when none is left.

The status pipe tells the sandbox ``pid N`` once the command runs, ``error
MESSAGE`` when it could not be started, and ``exit STATUS`` when it ended.
When the sandbox's process dies, the supervisor is told (``PR_SET_PDEATHSIG``)
and kills its tree before it exits. It stands between the command and the
sandbox's process without changing what the command sees of its parent:
the signals a command may send its parent (SIGINT, SIGQUIT, SIGHUP, SIGUSR1,
SIGUSR2) are passed on to the sandbox's process, and none of them can end
the supervisor and set free what it holds.

Only the standard library, and nothing imported from agentfsm: the file runs
as a script in an isolated interpreter.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Iterable

__all__ = ["kill_tree"]

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PASSES = 100
"""Bound on the stop-and-kill rounds; each round finds what the previous one's victims forked meanwhile."""


def _table() -> dict[int, tuple[int, str]]:
    """Every process: pid -> (parent pid, state letter)."""
    table: dict[int, tuple[int, str]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        table[int(name)] = (int(fields[1]), fields[0].decode("ascii", "replace"))
    return table


def _tagged(pid: int, tag: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return tag in b"\0" + fh.read()
    except OSError:
        return False


def _victims(roots: set[int], tag: bytes | None) -> list[int]:
    """The living descendants of `roots` (not the roots), and any process carrying `tag`."""
    table, me = _table(), os.getpid()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: list[int] = []
    todo = [child for root in roots for child in children.get(root, [])]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    if tag is not None:
        found += [pid for pid in table if pid not in roots and pid != me and _tagged(pid, tag)]
    return [pid for pid in dict.fromkeys(found) if pid != me and table.get(pid, (0, "Z"))[1] not in "ZX"]


def kill_tree(
    roots: Iterable[int], tag: str | None = None, *, parent: int | None = None, roots_too: bool = True
) -> None:
    """SIGKILL every descendant of `roots` (supervisors), and every process whose `EXEC_TAG` is `tag`.

    Stopped first, then killed, round after round until a round finds none:
    a fork bomb cannot outrun it. The roots die last (`roots_too`), once
    nothing is left below them: a supervisor killed earlier would hand its
    orphans to init, out of reach. A `tag` ending in ``.`` is a prefix.
    With `parent`, only roots that are still its children count: a pid freed
    and reused since is not someone else's tree to kill.
    """
    roots = set(roots)
    if parent is not None:
        table = _table()
        roots = {pid for pid in roots if table.get(pid, (0, ""))[0] == parent}
    needle = None
    if tag is not None:
        needle = b"\0AGENTFSM_EXEC=" + tag.encode()
        needle += b"" if needle.endswith(b".") else b"\0"
    for _ in range(_PASSES):
        victims = _victims(roots, needle)
        if not victims:
            break
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in victims:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
    if roots_too:
        for pid in roots:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _prctl(option: int, value: int) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(option, value, 0, 0, 0)) == 0


def _report(fd: int, line: str) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, line.encode() + b"\n")


_RELAYED = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
_parent = 0


def _relay(signum: int, frame: object) -> None:
    with contextlib.suppress(OSError):
        os.kill(_parent, signum)


def _end(signum: int, frame: object) -> None:
    """The sandbox's process died (or asked): take everything below down, then go."""
    kill_tree([os.getpid()], roots_too=False)
    os._exit(128 + signum)


def main(argv: list[str]) -> int:
    """``reaper.py PARENT_PID STATUS_FD COMMAND...``: run COMMAND, hold and reap what it leaves."""
    global _parent
    parent, status, command = int(argv[1]), int(argv[2]), argv[3:]
    _parent = parent
    for relayed in _RELAYED:
        signal.signal(relayed, _relay)
    signal.signal(signal.SIGTERM, _end)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the sandbox's process died before we could ask to be told
        return 1
    if not _prctl(_PR_SET_CHILD_SUBREAPER, 1):
        _report(status, f"error cannot become a child subreaper: {os.strerror(ctypes.get_errno())}")
        return 1
    child = os.fork()
    if child == 0:
        try:
            for relayed in (*_RELAYED, signal.SIGTERM):  # until the exec, this child is the command
                signal.signal(relayed, signal.SIG_DFL)
            os.setsid()
            os.set_inheritable(status, False)  # closed by a successful exec; open to report a failed one
            os.execvp(command[0], command)
        except OSError as exc:
            _report(status, f"error {exc.strerror or exc}")
        os._exit(127)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the pipes close when the command's processes close them, not when we do
        os.dup2(devnull, fd)
    os.close(devnull)
    _report(status, f"pid {child}")
    while True:
        try:
            pid, code = os.waitpid(-1, 0)
        except ChildProcessError:
            return 0
        if pid == child:
            with contextlib.suppress(OSError):  # what it left in its own process group ends with it
                os.killpg(child, signal.SIGKILL)
            _report(status, f"exit {os.waitstatus_to_exitcode(code)}")
            os.close(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
