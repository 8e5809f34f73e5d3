"""`agentfsm mcp login SERVER`: authorize agentfsm at an MCP server behind OAuth.

The server is one of the configuration's ``[mcp.servers.<id>]`` tables, with `auth`, or one given
as runs give it, ``--mcp-server SERVER=URL``, which is behind OAuth with every default (as
``--mcp-oauth SERVER`` makes it in a run): no configuration file is needed. The flow is
`agentfsm.mcp.login.login`'s. Exit 0 with the tokens stored, or one line and exit 2.
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
    from .building import mcp_server_settings
    from .config import Settings

    try:
        given = [name for name, _ in args.mcp_servers if name == args.server]
        servers = mcp_server_settings(Settings.load(args.config), args, oauth=given)
        settings = servers.get(args.server)
        if settings is None:
            known = ", ".join(sorted(servers)) or "none"
            return usage_error(
                f"no MCP server {args.server!r} in the configuration (configured: {known}): add "
                f"[mcp.servers.{args.server}] with its url and auth, pass --config FILE, or give "
                f"--mcp-server {args.server}=URL"
            )
        path = asyncio.run(login(args.server, settings, out=sys.stdout, open_browser=args.open))
    except AgentfsmError as exc:
        return usage_error(str(exc))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted: the login did not finish", file=sys.stderr)
        return 130
    print(f"Logged in to MCP server {args.server!r}; its tokens are in {path}")
    return EXIT_OK
