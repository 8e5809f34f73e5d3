"""`agentfsm mcp login SERVER`: authorize agentfsm at a configured MCP server behind OAuth.

The server is one of the configuration's ``[mcp.servers.<id>]`` tables, with `auth`; the flow
is `agentfsm.mcp.login.login`'s. Exit 0 with the tokens stored, or one line and exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from ..errors import AgentfsmError
from .output import EXIT_OK, usage_error
from .parser import PROG

__all__ = ["mcp_command"]


def mcp_command(args: argparse.Namespace) -> int:
    """`agentfsm mcp login`: the only action so far."""
    from ..mcp.login import login
    from .config import Settings

    try:
        servers = Settings.load(args.config).mcp.server_settings()
        settings = servers.get(args.server)
        if settings is None:
            known = ", ".join(sorted(servers)) or "none"
            return usage_error(
                f"no MCP server {args.server!r} in the configuration (configured: {known}): add "
                f"[mcp.servers.{args.server}] with its url and auth, or pass --config FILE"
            )
        path = asyncio.run(login(args.server, settings, out=sys.stdout, open_browser=args.open))
    except AgentfsmError as exc:
        return usage_error(str(exc))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted: the login did not finish", file=sys.stderr)
        return 130
    print(f"Logged in to MCP server {args.server!r}; its tokens are in {path}")
    return EXIT_OK
