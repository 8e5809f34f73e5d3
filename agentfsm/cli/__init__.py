"""The command line (`agentfsm ...`): the only part of the package that configures logging."""

from __future__ import annotations

from .commands import main

__all__ = ["main"]
