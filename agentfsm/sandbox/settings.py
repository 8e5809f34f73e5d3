"""`[sandbox]`: where the system-touching tools run, and the limits they run under.

Every limit's default is the hardened one: no network, a memory limit with
no swap on top, one CPU, 128 processes, a 60 s timeout per command.
Loosening any of them is an explicit setting. The sandbox lives as long as
its agent's conversation (``keep_alive``): destroyed by `aclose()`, and at
the end of any run that fails or is cancelled.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..errors import ConfigError

__all__ = ["DEFAULT_IMAGE", "SandboxSettings", "memory_bytes"]

DEFAULT_IMAGE = "agentfsm-sandbox:bookworm"
"""The one image every command's Docker sandbox runs (`run`, `resume`, `debug`, `demo`, `mcp-serve`,
the durable worker), unless ``[sandbox] image`` names another: the image `agentfsm sandbox build`
builds without any registry (`build-image.sh` builds this name; a test holds them equal).
Upstream's ``python:3.12-slim`` works too, once pulled: set ``image`` to it."""

_MEMORY = re.compile(r"^(\d+)([bkmg]?)$")
_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def _uid(user: str) -> int:
    return int(user.partition(":")[0])


def memory_bytes(size: str) -> int:
    """``"512m"`` → bytes, Docker's notation (b, k, m, g; powers of 1024)."""
    match = _MEMORY.match(size.strip().lower())
    if match is None:
        raise ConfigError(f"{size!r} is not a size: use a number with b, k, m or g, e.g. '512m'")
    return int(match.group(1)) * _UNITS[match.group(2)]


class SandboxSettings(BaseModel):
    """The sandbox's configuration, validated once when the settings are loaded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["docker", "local", "auto"] = "auto"
    """``docker``: a hardened container (an error if there is no engine or no image);
    ``local``: subprocesses confined to a workspace directory (timeouts and output limits,
    but no memory, process or network isolation); ``auto``: docker when an engine answers
    and the image exists, else local with one warning. A session decides auto once, at its first
    sandbox, and keeps that kind for its life: a later sandbox of it never moves to the host."""
    image: str = DEFAULT_IMAGE
    """Any image with ``python3``, ``sh`` and ``bash`` (the Debian-based python images have them;
    coreutils' ``timeout`` is used when present). Nothing is pulled: the image must be on the engine."""
    memory: str = "512m"
    """Memory limit; swap is limited to the same value, so there is no swap on top."""
    cpus: float = Field(default=1.0, gt=0, le=64)
    """Docker mode: CPUs the container may use (fractions allowed: ``0.5`` is half of one)."""
    pids_limit: int = Field(default=128, ge=8)
    """Processes and threads in the container: a fork bomb stops here."""
    timeout: float = Field(default=60.0, gt=0)
    """Default timeout in seconds of one command; the process is killed when it expires."""
    network: bool = False
    """Off: the container has no network interface but loopback."""
    keep_alive: bool = True
    """True: keep the sandbox between the agent's runs, for its life (until `aclose()` or the end of
    ``async with``), as its memory is kept: the files a conversation made are still there when it goes
    on, and a run does not pay a start and a close (measured in docs/benchmarks-log.md). False: destroy it at
    the end of each run. On error or cancellation it is always destroyed; one never closed is
    destroyed when dropped or at the interpreter's exit."""
    workspace: str = "/workspace"
    """The working directory inside the container; the only writable place besides /tmp."""
    local_dir: str | None = None
    """Local mode: an existing directory to use as the workspace (kept on close). None: a
    temporary directory, removed on close."""
    output_limit: int = Field(default=100_000, ge=1)
    """Bytes kept of each of stdout and stderr (`OutputCapture`); the rest is counted and marked."""
    user: str = "65534:65534"
    """``uid:gid`` the commands and snippets run as in the container (nobody:nogroup); never root (the
    Python worker alone is root, to start each snippet as this user: `agentfsm.sandbox.worker`)."""
    shell_user: str | None = None
    """``uid:gid`` the ``bash`` tool's persistent shell runs as in the container. It must not be `user`:
    a snippet of that user could write into the shell's input, signal it or read its memory, and so
    forge the next ``bash`` result. None: uid 65533 (65532 if `user` is 65533) in `user`'s group, so the
    two share the workspace (group-writable, umask 002 in both)."""
    tmp_size: str = "64m"
    """Size of the container's /tmp (a tmpfs, counted against nothing else)."""

    @field_validator("memory", "tmp_size")
    @classmethod
    def _size(cls, value: str) -> str:
        if memory_bytes(value) < 4 * 1024**2:
            raise ConfigError(f"{value!r} is too small: Docker needs at least 4m")
        return value.strip().lower()

    @field_validator("user", "shell_user")
    @classmethod
    def _not_root(cls, value: str | None) -> str | None:
        if value is None:
            return None
        uid, _, gid = value.partition(":")
        if not uid.isdigit() or (gid and not gid.isdigit()):
            raise ConfigError(f"{value!r} is not numeric 'uid:gid' (e.g. '65534:65534')")
        if int(uid) == 0:
            raise ConfigError("the sandbox never runs as root (uid 0): use e.g. '65534:65534'")
        return value

    @model_validator(mode="after")
    def _shell_apart(self) -> SandboxSettings:
        if self.shell_user is not None and _uid(self.shell_user) == _uid(self.user):
            raise ConfigError(
                f"shell_user {self.shell_user!r} has the uid of user {self.user!r}: snippets could "
                "then forge the shell's results; give the shell another uid (e.g. '65533:65534') or unset"
            )
        return self

    @property
    def shell_identity(self) -> str:
        """The ``uid:gid`` the shell runs as: `shell_user`, or the default beside `user`."""
        if self.shell_user is not None:
            return self.shell_user
        uid, _, gid = self.user.partition(":")
        return f"{65532 if uid == '65533' else 65533}:{gid or uid}"

    @field_validator("workspace")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or value.rstrip("/") in ("", "/tmp") or ".." in value.split("/"):
            raise ConfigError(f"{value!r} must be an absolute path other than / and /tmp, e.g. '/workspace'")
        return value.rstrip("/")
