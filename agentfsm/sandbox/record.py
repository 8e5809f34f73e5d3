"""The sandbox a run used, as its checkpoint records it, and the settings a resume of it runs under.

Why: a run's commands ran either in a hardened container or on this machine, and a
resume must not change which behind the user's back (a run checkpointed in Docker
resumed with ``mode = "auto"`` where no engine answers would otherwise go on on the
host). Manus's `trace_config()` carries ``sandbox``: ``{"kind": "docker", "image":
NAME}`` or ``{"kind": "local"}``, from the start when the mode names the kind, and
from the first sandbox when ``auto`` decides it (a checkpoint's next record holds the
changed configuration). A resume turns that back into settings with
`resumed_settings`.

A checkpoint without the field (written before agentfsm recorded it, or by a run
stopped before ``auto`` had made its first sandbox) resumes under the settings given,
as a new run would: ``auto`` decides again, and falls back to the host only with its
warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import CheckpointError
from .settings import SandboxSettings

__all__ = ["SandboxRecord", "resumed_settings"]


@dataclass(frozen=True, slots=True)
class SandboxRecord:
    """Where a run's commands ran: a Docker container of `image`, or this machine (``local``)."""

    kind: Literal["docker", "local"]
    image: str | None = None
    """The Docker image (None for ``local``)."""

    def to_json(self) -> dict[str, str]:
        return {"kind": "docker", "image": self.image or ""} if self.kind == "docker" else {"kind": "local"}

    def describe(self) -> str:
        """``the Docker sandbox (image 'NAME')`` or ``the local sandbox (this machine)``, for messages."""
        if self.kind == "docker":
            return f"the Docker sandbox (image {self.image!r})"
        return "the local sandbox (this machine)"

    @classmethod
    def of(cls, settings: SandboxSettings, kind: str | None = None) -> SandboxRecord | None:
        """The record of a session with `settings` whose sandbox is `kind` (None: not decided yet,
        so the mode's, and nothing for ``auto``)."""
        kind = kind or (settings.mode if settings.mode != "auto" else None)
        if kind == "docker":
            return cls("docker", settings.image)
        return cls("local") if kind == "local" else None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> SandboxRecord | None:
        """The record in a checkpoint's (or trace's) configuration; None when it holds none.
        A malformed one is a `CheckpointError`: which sandbox to resume in must not be guessed."""
        value = config.get("sandbox")
        if value is None:
            return None
        if isinstance(value, Mapping):
            kind, image = value.get("kind"), value.get("image")
            if kind == "local":
                return cls("local")
            if kind == "docker" and isinstance(image, str) and image:
                return cls("docker", image)
        raise CheckpointError(
            f"the checkpoint's sandbox record {value!r} is neither {{'kind': 'docker', 'image': NAME}} "
            "nor {'kind': 'local'}: the checkpoint is damaged; resume from an intact copy"
        )


def resumed_settings(settings: SandboxSettings, record: SandboxRecord | None) -> SandboxSettings:
    """The settings a resumed run's sandbox uses: `settings`, made to run where `record` says.

    - No record: `settings` as given.
    - Docker: ``mode = "docker"`` with the recorded image (``auto`` never falls back to the
      host, and another configured image is not this run's), unless `settings` asks for
      ``local`` outright, which is kept (the command line asks for it with ``--sandbox local``).
    - Local: ``mode = "local"`` (a ``local_dir`` still holds the run's files), unless
      `settings` asks for ``docker``, which confines more and is kept.

    The limits (memory, CPUs, timeout...) are always the given settings'.
    """
    if record is None:
        return settings
    if record.kind == "docker":
        if settings.mode == "local":
            return settings
        return settings.model_copy(update={"mode": "docker", "image": record.image})
    if settings.mode == "docker":
        return settings
    return settings.model_copy(update={"mode": "local"})
