"""agentfsm: an LLM tool-calling agent whose whole life is an explicit state machine.

Importing this package is cheap: litellm (seconds to import) is loaded by
`LLM` on first use, and jsonschema on the first validated tool call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .agent import BaseAgent, Manus, ReActAgent, ToolCallAgent
from .chat import ChatModel, LLMResponse
from .events import Transition
from .machine import Edge, Effect, Guard, MachineTable, StateSpec
from .memory import Memory
from .messages import Message, Role, ToolCall
from .result import AgentState, RunResult, StopReason, Usage
from .tool import Tool, ToolCollection, ToolResult, tool
from .toolbox import AskHuman, Bash, PythonExecute, StrReplaceEditor, Terminate

if TYPE_CHECKING:
    from .llm import LLM

__all__ = [
    "LLM",
    "AgentState",
    "AskHuman",
    "BaseAgent",
    "Bash",
    "ChatModel",
    "Edge",
    "Effect",
    "Guard",
    "LLMResponse",
    "MachineTable",
    "Manus",
    "Memory",
    "Message",
    "PythonExecute",
    "ReActAgent",
    "Role",
    "RunResult",
    "StateSpec",
    "StopReason",
    "StrReplaceEditor",
    "Terminate",
    "Tool",
    "ToolCall",
    "ToolCallAgent",
    "ToolCollection",
    "ToolResult",
    "Transition",
    "Usage",
    "tool",
]


def __getattr__(name: str) -> Any:
    if name == "LLM":  # the module is light; litellm itself loads on the first call
        from .llm import LLM

        return LLM
    raise AttributeError(f"module 'agentfsm' has no attribute {name!r}")
