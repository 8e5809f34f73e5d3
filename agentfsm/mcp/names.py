"""The agent's names for server tools: ``mcp_{server}_{tool}``, valid for every provider.

Providers accept function names of letters, digits, ``_`` and ``-``, at most 64 characters;
server and tool names may hold anything. Other characters become ``_``; a name that is too
long, or that two tools would share, ends in ``_`` and 8 hex digits of a hash of the server
and tool names instead, so the same servers always give the same names (a trace, a
checkpoint and the model's history stay valid across restarts).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable

__all__ = ["MAX_NAME", "agent_tool_names"]

MAX_NAME = 64
"""The longest function name OpenAI, Anthropic and Gemini all accept."""

_OTHER = re.compile(r"[^A-Za-z0-9_-]")


def agent_tool_names(server: str, tools: Iterable[str], *, taken: Collection[str] = ()) -> dict[str, str]:
    """The agent's name for each of `server`'s `tools` (server tool name -> agent tool name).

    `taken`: names already in use (other servers' tools, the agent's own `terminate`): a name
    that would clash with one gets the hashed form. Tools are named in sorted order, so which
    of two clashing tools keeps the plain name does not depend on the server's order.
    """
    used = set(taken)
    names: dict[str, str] = {}
    for tool in sorted(set(tools)):
        plain = f"mcp_{_OTHER.sub('_', server)}_{_OTHER.sub('_', tool)}"
        name = plain if len(plain) <= MAX_NAME and plain not in used else _hashed(plain, server, tool)
        n = 1
        while name in used:  # two hashes alike: vanishingly rare, still never a duplicate
            name = _hashed(plain, server, f"{tool}\0{n}")
            n += 1
        used.add(name)
        names[tool] = name
    return names


def _hashed(plain: str, server: str, tool: str) -> str:
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
    return f"{plain[: MAX_NAME - 9]}_{digest}"
