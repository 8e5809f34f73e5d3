"""Raw exec streams for the Docker sandbox, and the small scripts it runs inside the container.

The SDK's own ``exec_run`` has no timeout and no way to stop reading; owning
the hijacked socket gives both. Everything here blocks; the sandbox calls it
from threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import posixpath
import socket
import struct
import tarfile
import threading
import time
from typing import Any

from ..errors import NotAFileError, SandboxError
from .base import WORKER_SOURCE, OutputCapture

__all__ = [
    "CONTAINER_WORKER",
    "PATH_HELPER",
    "RUN",
    "SHELL",
    "WORKER_CAPABILITIES",
    "WORKER_USER",
    "ExecStream",
    "Run",
    "converse",
    "first_line",
    "retrieve",
    "send_and_close",
    "tar_file",
    "untar_file",
    "worker_argv",
]

RUN = (
    'exec 3<&0; timeout -s KILL "$0" "$@" <&3 3<&- & p=$!; exec 0</dev/null 3<&-; '
    'wait "$p"; rc=$?; kill -s KILL -- "-$p" 2>/dev/null; exit "$rc"'
)
"""``sh -c RUN SECONDS ARGV...``: run ARGV under ``timeout -s KILL``, which puts it in a process group of
its own and kills that group at the timeout; when ARGV ends, whatever it left running in the group is
killed too (a fork bomb's survivors would otherwise keep the pids limit exhausted)."""

SHELL = ["sh", "-c", 'umask 002; echo "$$"; exec bash --noprofile --norc']
"""The persistent shell, run as the sandbox's `shell_identity` (a uid of its own, so no snippet can write into
its input or signal it): it first prints its pid, which (as an exec's first process) is also its process
group, the one its commands run in. Its files are group-writable, as the snippets' are, so both users
share the workspace through their group."""

WORKER_USER = "0:0"
"""The Python workers run as root (holding only `WORKER_CAPABILITIES`), each snippet as the sandbox's user:
so no snippet can read, trace or signal the worker that answers for the calls after it."""
WORKER_CAPABILITIES = ["SETUID", "SETGID", "KILL"]
"""What a worker needs of root: switch each child to the sandbox's user, and kill what the calls left."""


def worker_argv(user: str) -> list[str]:
    """The Python worker (`agentfsm.sandbox.worker`), its source passed on the command line: the image needs
    nothing of ours. It announces its pid, which as the exec's first process is also its process group, and
    runs each snippet as `user`."""
    return ["python3", "-u", "-c", WORKER_SOURCE, "--announce", "--as", user]


CONTAINER_WORKER = (
    "trap '' HUP INT QUIT USR1 USR2; exec 3<&0 4>&2 </dev/null 2>/dev/null; "
    'AGENTFSM_EXEC="$0" python3 -u -c "$2" --announce --as "$3" <&3 2>&4 3<&- 4>&- & exec 3<&-; '
    'wait "$!"; rc=$?; printf \'\\n%s %d\\n\' "$1" "$rc"; printf \'\\n%s\\n\' "$1" >&4; '
    "exec sleep infinity >/dev/null 4>&-"
)
"""``sh -c CONTAINER_WORKER TAG ENDED SOURCE USER``: the container's own command, as root. It runs the
Python worker (`worker_argv`'s script, tagged TAG, its snippets run as USER) on the container's stdin and
stdout, which the sandbox attaches to before the start, so the first ``python_execute`` needs no exec.
The shell outlives the worker: once the worker has ended (killed, or its stdin closed), it prints
``\\nENDED STATUS\\n`` on stdout and ``\\nENDED\\n`` on stderr, since the stream itself stays open (the
container's init holds it), and then becomes the container's ``sleep``, so the container lives on and
later workers start through exec. The shell's own stderr is /dev/null and the worker runs in the
background, waited for (its stdin and stderr passed on explicitly): so the shell's report of a killed
worker ("Killed") never reaches a call's output. The shell, then its sleep, ignore the signals the worker
passes on to its parent (`worker._RELAYED`), which would otherwise end the container; the worker sets its
own handlers for them, and each snippet gets the defaults back."""

PATH_HELPER = r"""
import os, sys
ws, path, mode = sys.argv[1:4]
inside = lambda p: p == ws or p.startswith(ws + "/")
real = os.path.realpath(os.path.join(ws, path))
if not inside(real): sys.exit(3)
if mode == "w":
    if real == ws: sys.exit(4)
    os.umask(0o002)
    os.makedirs(os.path.dirname(real), exist_ok=True)
    if not inside(os.path.realpath(os.path.dirname(real))): sys.exit(3)
sys.stdout.write(real)
"""
"""``python3 -c PATH_HELPER WORKSPACE PATH r|w``: print PATH's real path inside the container (symlinks
followed there, where they point), exit 3 if it leaves WORKSPACE; ``w`` also creates the parents as the
sandbox user, writable by its group (the shell's user), and exits 4 for the workspace itself."""


class ExecStream:
    """A hijacked ``exec`` connection: multiplexed frames in, stdin out, abortable from another thread.

    The SDK's own exec has no timeout and no way to stop reading; owning the
    socket gives both: `abort()` shuts it down, which ends a blocked read.
    """

    def __init__(self, sock: Any) -> None:
        self._holder = sock  # the SDK's wrapper; keeps the HTTP response alive
        raw = getattr(sock, "_sock", sock)
        if not isinstance(raw, socket.socket):
            raise SandboxError(
                f"unsupported Docker connection type {type(raw).__name__}: use a unix or tcp socket"
            )
        raw.settimeout(None)
        self._raw = raw
        self._lock = threading.Lock()
        self._closed = False

    def send(self, data: bytes) -> None:
        self._raw.sendall(data)

    def close_write(self) -> None:
        with contextlib.suppress(OSError):
            self._raw.shutdown(socket.SHUT_WR)

    def read_frame(self) -> tuple[int, bytes] | None:
        """The next (stream, data) frame, 1 for stdout and 2 for stderr; None at the end."""
        header = self._read_exactly(8)
        if header is None:
            return None
        kind, size = struct.unpack(">BxxxL", header)
        data = self._read_exactly(size) if size else b""
        return (kind, data) if data is not None else None

    def _read_exactly(self, size: int) -> bytes | None:
        chunks: list[bytes] = []
        while size:
            try:
                chunk = self._raw.recv(min(size, 1 << 16))
            except OSError:
                return None
            if not chunk:
                return None
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def abort(self) -> None:
        """Stop the transfer both ways (from any thread); a blocked `read_frame` returns None."""
        with contextlib.suppress(OSError):
            self._raw.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.abort()
        with contextlib.suppress(OSError):
            self._raw.close()
        with contextlib.suppress(Exception):
            self._holder.close()


class Run:
    """One command in flight: its tag, and its stream once open, so the watchdog can cut it."""

    def __init__(
        self, tag: str, stream: ExecStream | None = None, group: int | None = None, *, snippets: bool = False
    ) -> None:
        self.tag = tag
        self.stream = stream
        self.group = group
        """Its process group inside the container, when known (the shell session's)."""
        self.snippets = snippets
        """Whether it is the Python worker: killing it kills every snippet's process too."""
        self.aborted = False

    def attach(self, stream: ExecStream) -> None:
        self.stream = stream
        if self.aborted:
            stream.abort()

    def abort(self) -> None:
        self.aborted = True
        if self.stream is not None:
            self.stream.abort()


def converse(stream: ExecStream, script: bytes, out: OutputCapture, err: OutputCapture) -> bool:
    """Send one command to the shell and read until both markers; False if the shell ended first."""
    try:
        stream.send(script)
    except OSError:
        return False
    while not (out.found and err.found):
        frame = stream.read_frame()
        if frame is None:
            return False
        (err if frame[0] == 2 else out).feed(frame[1])
    return True


def first_line(stream: ExecStream, what: str = "shell", needs: str = "bash") -> bytes:
    """Read stdout up to the first newline (the shell session and the Python worker announce their pid so)."""
    line = b""
    while not line.endswith(b"\n"):
        frame = stream.read_frame()
        if frame is None:
            raise SandboxError(f"the sandbox {what} ended before it started (is {needs} in the image?)")
        if frame[0] == 1:
            line += frame[1]
    return line


def send_and_close(stream: ExecStream, data: bytes) -> None:
    with contextlib.suppress(OSError):
        stream.send(data)
    stream.close_write()


def retrieve(task: asyncio.Future[Any]) -> None:
    """Mark an abandoned thread's outcome as seen (it was reported, or superseded by the timeout)."""
    if not task.cancelled():
        task.exception()


def tar_file(real: str, data: bytes, user: str) -> bytes:
    """A one-file archive for `put_archive`, owned by the sandbox user (the engine extracts as root)."""
    uid, _, gid = user.partition(":")
    info = tarfile.TarInfo(posixpath.basename(real))
    info.size, info.mode, info.mtime = len(data), 0o664, int(time.time())  # the shell's group writes too
    info.uid, info.gid = int(uid), int(gid or uid)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def untar_file(archive: bytes, path: str) -> bytes:
    """The one regular file in a `get_archive` answer."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        member = tar.next()
        if member is None or not member.isfile():
            raise NotAFileError(f"{path!r} is not a regular file")
        extracted = tar.extractfile(member)
        assert extracted is not None
        return extracted.read()
