"""What the model is told of its MCP servers, besides their tools: instructions, and changes.

Both go into the system prompt of a request. A server's `instructions` do when its
`MCPServerSettings.instructions` says so, under a heading naming it. A change of the tools
offered (`ToolChanges`) is told once, in the request that first offers the new set: in the
system prompt and not in memory, so it is never kept, trimmed or mistaken for a tool result,
and a trace's replay (which reads the system prompt each request sent) gives it back as sent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["ToolChanges", "with_servers"]


@dataclass(frozen=True, slots=True)
class ToolChanges:
    """How one request's MCP tools differ from the previous request's, by agent tool name."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    """Tools the server no longer lists."""
    changed: tuple[str, ...] = ()
    """Tools whose description or schema changed (the name stays)."""
    withdrawn: tuple[str, ...] = ()
    """Tools of servers that stopped answering."""

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed or self.withdrawn)

    def note(self) -> str | None:
        """The one-shot note for the model, or None when nothing changed."""
        if not self:
            return None
        parts = []
        if self.added:
            parts.append(f"added {', '.join(self.added)}")
        if self.removed:
            parts.append(f"removed {', '.join(self.removed)}")
        if self.changed:
            parts.append(f"changed (read their new descriptions and parameters) {', '.join(self.changed)}")
        if self.withdrawn:
            parts.append(f"withdrawn, their server stopped answering: {', '.join(self.withdrawn)}")
        return f"The MCP tools changed since your last request: {'; '.join(parts)}."


def with_servers(
    prompt: str | None, instructions: Iterable[tuple[str, str]], changes: ToolChanges | None = None
) -> str | None:
    """`prompt`, then each server's instructions (``(server id, text)``) under a heading
    naming the server, then the note on `changes`; None when all are empty."""
    parts = [prompt] if prompt else []
    parts += [
        f"## Instructions of the MCP server {server!r}\n{text.strip()}" for server, text in instructions
    ]
    note = changes.note() if changes is not None else None
    if note:
        parts.append(note)
    return "\n\n".join(parts) or None
