"""MCP client: the tools of MCP servers as agent tools (stdio, streamable HTTP, SSE).

`MCPServerSettings` describes a server, `MCPServers` connects a set of them and makes an
`MCPTool` per server tool. Only `agentfsm.mcp.client` imports the MCP SDK, when a connection
opens, so importing this package costs nothing; `MCPAgent` (`agentfsm.agent.mcp`) runs over
them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_attributes
from .settings import MCPServerSettings

if TYPE_CHECKING:
    from .client import MCPConnection
    from .prompt import ToolChanges
    from .tools import MCPServers, MCPTool

__all__ = ["MCPConnection", "MCPServerSettings", "MCPServers", "MCPTool", "ToolChanges"]

__getattr__ = lazy_attributes(
    __name__,
    {"MCPConnection": "client", "MCPServers": "tools", "MCPTool": "tools", "ToolChanges": "prompt"},
)
