"""The agents: the engine (`BaseAgent`), the ReAct split, the tool-calling agent, Manus, the
browser agent and the MCP agent.

`Manus` (and with it the system tools), `BrowserAgent` and `MCPAgent` are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_attributes
from .base import BaseAgent
from .react import ReActAgent
from .toolcall import ToolCallAgent

if TYPE_CHECKING:
    from .browser import BrowserAgent
    from .manus import Manus
    from .mcp import MCPAgent

__all__ = ["BaseAgent", "BrowserAgent", "MCPAgent", "Manus", "ReActAgent", "ToolCallAgent"]


__getattr__ = lazy_attributes(__name__, {"Manus": "manus", "MCPAgent": "mcp", "BrowserAgent": "browser"})
