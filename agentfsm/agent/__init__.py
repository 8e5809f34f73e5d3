"""The agents: the engine (`BaseAgent`), the ReAct split, and the tool-calling agent."""

from .base import BaseAgent
from .react import ReActAgent
from .toolcall import ToolCallAgent

__all__ = ["BaseAgent", "ReActAgent", "ToolCallAgent"]
