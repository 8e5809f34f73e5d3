"""Where the system-touching tools run: a hardened Docker container, or a local workspace.

`Sandbox` is the interface the tools use; `DockerSandbox` (docker SDK,
imported lazily) and `LocalSandbox` implement it; `SandboxSession` ties one
sandbox's lifetime to an agent (created on first use, destroyed at the end of
a run or on close, always on error and cancellation); `SandboxSettings` is the
``[sandbox]`` section of the configuration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_attributes
from .base import ExecResult, Sandbox, SandboxError
from .local import LocalSandbox
from .session import SandboxSession
from .settings import SandboxSettings

if TYPE_CHECKING:
    from .docker import DockerSandbox

__all__ = [
    "DockerSandbox",
    "ExecResult",
    "LocalSandbox",
    "Sandbox",
    "SandboxError",
    "SandboxSession",
    "SandboxSettings",
]


# `DockerSandbox` on first use only (its module is light, but keeps docker out of plain imports).
__getattr__ = lazy_attributes(__name__, {"DockerSandbox": "docker"})
