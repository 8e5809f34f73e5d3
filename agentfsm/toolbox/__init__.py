"""The agent's own tools (what the model can call), one module each."""

from .terminate import Terminate

__all__ = ["Terminate"]
