"""MCP client: the tools of MCP servers as agent tools (stdio, streamable HTTP, SSE).

`MCPServerSettings` describes a server, `MCPServers` connects a set of them and makes an
`MCPTool` per server tool. The modules that speak the protocol (the connection, OAuth, stdio,
serving, elicitation, failures) import the MCP SDK, and only when a connection opens or a server
starts, so importing this package costs nothing; `MCPAgent` (`agentfsm.agent.mcp`) runs over
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
