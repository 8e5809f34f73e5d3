"""agentfsm: an LLM tool-calling agent whose whole life is an explicit state machine.

Importing this package is cheap: litellm (seconds to import) is loaded by
`LLM` on first use, aiohttp by `OpenAICompatible`, jsonschema on the first
validated tool call, and opentelemetry by `instrument`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .agent import BaseAgent, ReActAgent, ToolCallAgent
from .errors import AgentfsmError
from .fsm.machine import Edge, Effect, Guard, MachineTable, Payload, StateSpec
from .lazy import lazy_attributes
from .memory import Memory
from .messages import Message, Role, ToolCall
from .model.base import ChatModel, LLMResponse, Usage
from .run.events import LLMRetry, TextDelta, ToolCallDelta, Transition
from .run.result import AgentState, RunResult, StopReason
from .run.state import Decision
from .toolbox.terminate import Terminate
from .toolbox.tool import Tool, ToolCollection, ToolResult, tool

if TYPE_CHECKING:
    from .agent.browser import BrowserAgent
    from .agent.manus import Manus
    from .agent.mcp import MCPAgent
    from .browser.tool import BrowserUseTool
    from .model.llm import LLM
    from .model.openai_compatible import OpenAICompatible
    from .runs.manager import Runs
    from .telemetry.spans import instrument
    from .toolbox.ask_human import AskHuman
    from .toolbox.bash import Bash
    from .toolbox.editor import StrReplaceEditor
    from .toolbox.python_execute import PythonExecute

__version__ = "0.1.0"
"""The distribution's version (the wheel's metadata is built from this line)."""

__all__ = [
    "LLM",
    "AgentState",
    "AgentfsmError",
    "AskHuman",
    "BaseAgent",
    "Bash",
    "BrowserAgent",
    "BrowserUseTool",
    "ChatModel",
    "Decision",
    "Edge",
    "Effect",
    "Guard",
    "LLMResponse",
    "LLMRetry",
    "MCPAgent",
    "MachineTable",
    "Manus",
    "Memory",
    "Message",
    "OpenAICompatible",
    "Payload",
    "PythonExecute",
    "ReActAgent",
    "Role",
    "RunResult",
    "Runs",
    "StateSpec",
    "StopReason",
    "StrReplaceEditor",
    "Terminate",
    "TextDelta",
    "Tool",
    "ToolCall",
    "ToolCallAgent",
    "ToolCallDelta",
    "ToolCollection",
    "ToolResult",
    "Transition",
    "Usage",
    "instrument",
    "tool",
]


# Loaded on first use, so `import agentfsm` stays cheap: the LLM adapter (litellm itself
# loads on the first call), Manus and its system tools, the browser agent.
__getattr__ = lazy_attributes(
    __name__,
    {
        "LLM": "model.llm",
        "OpenAICompatible": "model.openai_compatible",
        "Manus": "agent.manus",
        "MCPAgent": "agent.mcp",
        "BrowserAgent": "agent.browser",
        "AskHuman": "toolbox.ask_human",
        "Bash": "toolbox.bash",
        "BrowserUseTool": "browser.tool",
        "PythonExecute": "toolbox.python_execute",
        "StrReplaceEditor": "toolbox.editor",
        "instrument": "telemetry.spans",
        "Runs": "runs.manager",
    },
)
