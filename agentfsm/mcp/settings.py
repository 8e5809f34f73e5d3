"""`[mcp.servers.<id>]`: how to reach one MCP server, checked once when it is built.

A server is a command to start (``stdio``: the server speaks on its stdin and stdout) or a URL
(``http``: streamable HTTP; ``sse``: the legacy HTTP+SSE transport). The record is a stdlib
dataclass, so building one imports neither pydantic nor the MCP SDK; the command line's
configuration checks its tables through it too, so a file is held to the same rules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from ..errors import ConfigError

__all__ = ["DEFAULT_REFRESH_EVERY", "DEFAULT_TIMEOUT", "MCPServerSettings", "TransportType"]

TransportType = Literal["stdio", "http", "sse"]
"""``stdio``: a subprocess; ``http``: streamable HTTP; ``sse``: HTTP with server-sent events (legacy)."""

DEFAULT_TIMEOUT = 30.0
"""Seconds for connecting, and for each call: a server that says nothing for that long has
given its answer (for a call, a timeout observation for the model)."""

DEFAULT_REFRESH_EVERY = 5
"""Requests to the model after which a server's tool list is read again, announced or not."""


@dataclass(frozen=True, kw_only=True)
class MCPServerSettings:
    """One MCP server. `type` may be left out: a `command` means ``stdio``, a `url` ``http``."""

    type: TransportType | None = None
    """The transport; None: ``stdio`` when `command` is set, ``http`` when `url` is."""
    command: str | None = None
    """``stdio``: the program to start (looked up on PATH)."""
    args: tuple[str, ...] = ()
    """``stdio``: its arguments."""
    env: Mapping[str, str] = field(default_factory=dict)
    """``stdio``: variables added to the SDK's minimal default environment (PATH, HOME, ...):
    the server does not inherit the agent's whole environment, its keys included."""
    url: str | None = None
    """``http`` / ``sse``: the endpoint, ``http://`` or ``https://`` (``.../mcp``, ``.../sse``)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """``http`` / ``sse``: sent with every request (an ``Authorization`` header, say)."""
    timeout: float = DEFAULT_TIMEOUT
    """Seconds for each tool call (> 0)."""
    connect_timeout: float = DEFAULT_TIMEOUT
    """Seconds for starting or reaching the server and listing its tools (> 0): a stdio
    server's first start (an interpreter, a package cache) may take longer than a call."""
    refresh_every: int = DEFAULT_REFRESH_EVERY
    """Read the tool list again after this many requests to the model (0: never), for servers
    that announce no change; not while a 2026-07-28 list's ``ttlMs`` says it is fresh. A change
    the server announces, or the end of that TTL, has the list read before the next request."""
    instructions: bool = False
    """Put the server's `instructions` (what it says of itself when connected) into the agent's
    system prompt, under a heading naming the server. Off by default: it is the server's text."""

    def __post_init__(self) -> None:
        kind = self.type
        if kind is None:
            kind = "stdio" if self.command is not None else "http" if self.url is not None else None
            if kind is None:
                raise ConfigError(
                    "an MCP server needs a `command` (a server started over stdio) or a `url` "
                    "(streamable HTTP); set one of them"
                )
            object.__setattr__(self, "type", kind)
        if kind not in get_args(TransportType):
            raise ConfigError(f"MCP server `type` must be 'stdio', 'http' or 'sse', got {kind!r}")
        if isinstance(self.args, list):
            object.__setattr__(self, "args", tuple(self.args))
        if not all(isinstance(arg, str) for arg in self.args):
            raise ConfigError(f"MCP server `args` must be strings, got {self.args!r}")
        for name in ("env", "headers"):
            table = getattr(self, name)
            if not isinstance(table, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in table.items()
            ):
                raise ConfigError(f"MCP server `{name}` must be a table of strings, got {table!r}")
        for name in ("timeout", "connect_timeout"):
            seconds = getattr(self, name)
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
                raise ConfigError(f"MCP server `{name}` must be a number of seconds > 0, got {seconds!r}")
        every = self.refresh_every
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ConfigError(
                f"MCP server `refresh_every` must be a whole number >= 0 (0: never), got {every!r}"
            )
        if not isinstance(self.instructions, bool):
            raise ConfigError(f"MCP server `instructions` must be true or false, got {self.instructions!r}")
        if kind == "stdio":
            if not isinstance(self.command, str) or not self.command:
                raise ConfigError(
                    f"MCP server of type 'stdio' needs a `command` to start, got {self.command!r}"
                )
            self._refuse("url", "headers", kind=kind)
        else:
            if not isinstance(self.url, str) or not self.url.startswith(("http://", "https://")):
                raise ConfigError(
                    f"MCP server of type {kind!r} needs a `url` starting with http:// or https://, "
                    f"got {self.url!r}"
                )
            self._refuse("command", "args", "env", kind=kind)

    def _refuse(self, *names: str, kind: str) -> None:
        """Keys of the other transport are a mistake, not something to ignore silently."""
        for name in names:
            if getattr(self, name):
                raise ConfigError(
                    f"MCP server of type {kind!r} takes no `{name}` (got {getattr(self, name)!r}): "
                    "remove it, or set the `type` that uses it"
                )

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> MCPServerSettings:
        """The record from a config table, whose unknown keys are an error naming the known ones."""
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(table) - set(known))
        if unknown:
            raise ConfigError(f"unknown key {unknown[0]!r} for an MCP server; allowed: {', '.join(known)}")
        return cls(**table)

    @classmethod
    def parse(cls, target: str, *, timeout: float = DEFAULT_TIMEOUT) -> MCPServerSettings:
        """A server from one string: a URL (streamable HTTP), else a command line (stdio)."""
        if target.startswith(("http://", "https://")):
            return cls(url=target, timeout=timeout)
        import shlex

        words = shlex.split(target)
        if not words:
            raise ConfigError("an MCP server needs a command or a URL, got an empty string")
        return cls(command=words[0], args=tuple(words[1:]), timeout=timeout)
