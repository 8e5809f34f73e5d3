"""Leases: a checkpoint has one owner at a time, so a run delivered twice never runs a tool twice.

A run or a resume with a checkpoint leases it first, and a second one (in
another process, or in this one) is refused at once with
`CheckpointLeasedError`, naming the owner and the fix. A resume leases the
checkpoint *before* reading it: what it reads is then the journal's last
word until it appends itself, so it cannot go on from a state another run
has already moved past.

How: the lease is an advisory lock (``flock``, exclusive, non-blocking) on a
file beside the journal, ``<checkpoint>.lease``, which also holds its
owner as one JSON object: ``pid``, ``host``, ``since`` (ISO 8601, UTC).

Why a lock rather than a file created with ``O_EXCL``: the kernel holds a
lock exactly as long as its owner's process lives. A process that dies
(SIGKILL, a crash, a lost container) drops its lock on the spot, so the
next resume takes its lease over without guessing: no test of whether a
pid is still alive (pids are reused, and mean nothing on another host), no
clock, no renewal to miss during a long tool call, and no window in which
two processes that both found a lease stale both take it over. A lock is
held by an open file, not a process, so a second lease from this process
is refused too. The owner in the file is what the refusal names; the lock,
not the file, says who holds the lease.

Bounds: the lock is as good as the file system's. On a local file system
it holds between all processes of the machine; over NFS (v4, or v3 with
its lock manager) between machines, where the server takes a dead client's
locks back after its lease time (90 s by default). A file system that does
not lock (some FUSE mounts) leases nothing, so keep checkpoints on a local
disk or NFS. A durable run, whose journal is a database, holds its lease
there.

Release: when the run ends (its checkpointer closes), the lease file is
removed, then the lock dropped; a process that died leaves its file behind,
unlocked, and the next owner writes its own name into it. Whoever locks a
file checks it is still the one at the path (a releasing owner may have
removed it meanwhile), else tries again. Before every append the owner
checks that the file at the path is still the one it locked, so a lease
file removed by hand stops the run from writing rather than letting two.
"""

from __future__ import annotations

import fcntl
import json
import os
import weakref
from datetime import UTC, datetime
from typing import Any

from ..errors import CheckpointError, CheckpointLeasedError
from .files import RecordPath

__all__ = ["LEASE_SUFFIX", "Lease", "lease_path"]

LEASE_SUFFIX = ".lease"
"""What a checkpoint's path is followed by to name its lease file, beside it."""
_OWNER_BYTES = 4096
"""More than an owner record takes (a host name is at most 255 bytes)."""


def lease_path(checkpoint: RecordPath) -> str:
    """The lease file of the journal at `checkpoint`: ``<checkpoint>.lease``, beside it."""
    return os.fspath(checkpoint) + LEASE_SUFFIX


def _host() -> str:
    return os.uname().nodename


def _identity(stat: os.stat_result) -> tuple[int, int]:
    return stat.st_dev, stat.st_ino


def _identity_at(path: str) -> tuple[int, int] | None:
    try:
        return _identity(os.stat(path))
    except FileNotFoundError:
        return None


def _unlock(fd: int, path: str, identity: tuple[int, int]) -> None:
    """Remove the lease file (if it is still ours), then drop the lock by closing it."""
    try:
        if _identity_at(path) == identity:
            os.unlink(path)
    finally:
        os.close(fd)


class Lease:
    """This process's lease on one checkpoint, held from `acquire` until `release`.

    An abandoned lease (its run never ended, and nothing references it) is
    released when it is collected, as its lock would be when the process ends.
    """

    def __init__(self, checkpoint: str, path: str, fd: int, owner: dict[str, Any]) -> None:
        self.checkpoint = checkpoint
        self.path = path
        """The lease file: ``<checkpoint>.lease``."""
        self.owner = owner
        """This lease's owner record, as the file holds it."""
        self._fd: int | None = fd
        self._identity = _identity(os.fstat(fd))
        self._finalizer = weakref.finalize(self, _unlock, fd, path, self._identity)

    @classmethod
    def acquire(cls, checkpoint: RecordPath) -> Lease:
        """Lease `checkpoint`, or raise `CheckpointLeasedError` at once naming the owner."""
        name, path = os.fspath(checkpoint), lease_path(checkpoint)
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            except OSError as exc:
                raise CheckpointError(
                    f"cannot lease the checkpoint {name!r}: {path!r}: {exc.strerror}"
                ) from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _read_owner(fd)
                os.close(fd)
                raise CheckpointLeasedError(_held(name, path, owner)) from None
            except OSError as exc:
                os.close(fd)
                raise CheckpointError(
                    f"cannot lease the checkpoint {name!r}: locking {path!r} failed ({exc.strerror}); "
                    "keep checkpoints on a file system that locks files (a local disk, NFS)"
                ) from exc
            if _identity_at(path) == _identity(os.fstat(fd)):
                break
            os.close(fd)  # removed by the owner that released it while we waited: lock the new one
        owner = {"pid": os.getpid(), "host": _host(), "since": datetime.now(UTC).isoformat()}
        try:
            data = json.dumps(owner).encode("utf-8")
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)  # not fsynced: after a crash the lock is gone, and the name is moot
        except BaseException:
            _unlock(fd, path, _identity(os.fstat(fd)))
            raise
        return cls(name, path, fd, owner)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def verify(self) -> None:
        """Raise `CheckpointLeasedError` unless this lease still holds the checkpoint (before an append)."""
        if self._fd is None:
            raise CheckpointLeasedError(
                f"the lease of the checkpoint {self.checkpoint!r} was released; "
                "a run writes its checkpoint only while it holds the lease"
            )
        if _identity_at(self.path) != self._identity:
            raise CheckpointLeasedError(
                f"the lease of the checkpoint {self.checkpoint!r} was lost: {self.path!r} was removed or "
                "replaced while this run held it, so another run may own the checkpoint now; this run "
                "stops writing it; never remove a lease file of a run in progress"
            )

    def release(self) -> None:
        """Remove the lease file and drop the lock (once; later calls do nothing)."""
        if self._fd is None:
            return
        self._fd = None
        self._finalizer()


def _read_owner(fd: int) -> dict[str, Any] | None:
    try:
        owner = json.loads(os.pread(fd, _OWNER_BYTES, 0))
    except (OSError, ValueError):
        return None
    return owner if isinstance(owner, dict) else None


def _held(name: str, path: str, owner: dict[str, Any] | None) -> str:
    """The refusal: who holds the checkpoint, since when, and what to do."""
    if owner is None:  # locked, its name not written yet (or not ours to read)
        return (
            f"the checkpoint {name!r} is leased by another run (its owner is not named in {path!r} yet); "
            "wait for that run to end, or stop its process: the lease of a process that ended is "
            "taken over by the next resume"
        )
    pid, host, since = owner.get("pid"), owner.get("host"), owner.get("since")
    if pid == os.getpid() and host == _host():
        return (
            f"the checkpoint {name!r} is leased by this process (pid {pid} on host {host!r}) since {since}: "
            "a run of it is in progress or paused here; await that run, or continue a paused one with "
            "`resume()` without a checkpoint, before running or resuming it again"
        )
    return (
        f"the checkpoint {name!r} is leased by pid {pid} on host {host!r} since {since} (its lease "
        f"{path!r}); wait for that run to end, or stop that process: the lease of a process that "
        "ended is taken over by the next resume"
    )
