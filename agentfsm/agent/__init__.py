"""The agents: the engine (`BaseAgent`), the ReAct split, the tool-calling agent, and Manus."""

from .base import BaseAgent
from .manus import Manus
from .react import ReActAgent
from .toolcall import ToolCallAgent

__all__ = ["BaseAgent", "Manus", "ReActAgent", "ToolCallAgent"]
