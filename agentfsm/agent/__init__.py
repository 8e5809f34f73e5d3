"""The agents: the engine (`BaseAgent`), the ReAct split, the tool-calling agent, and Manus.

`Manus` (and with it the system tools) is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import BaseAgent
from .react import ReActAgent
from .toolcall import ToolCallAgent

if TYPE_CHECKING:
    from .manus import Manus

__all__ = ["BaseAgent", "Manus", "ReActAgent", "ToolCallAgent"]


def __getattr__(name: str) -> Any:
    if name == "Manus":
        from .manus import Manus

        return Manus
    raise AttributeError(f"module 'agentfsm.agent' has no attribute {name!r}")
