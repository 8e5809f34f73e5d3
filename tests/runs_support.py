"""The world the runs of `Runs`' tests act on: their tools (shared by every agent a factory
builds, and by a flow's worker), what the tools did, and the gate ``wait`` waits at.

A task names the call to make: ``note hello`` writes a note, ``delete a`` needs approval, ``wait``
waits until the gate opens.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentfsm import Tool, tool
from agentfsm.messages import ToolCall


class World:
    """What the runs' tools did, and their gate."""

    def __init__(self) -> None:
        self.done: list[str] = []
        self.gate = asyncio.Event()
        self.waiting = 0

    def tools(self) -> list[Tool]:
        """``note``, ``delete`` (needs approval) and ``wait``, acting on this world."""
        world = self

        @tool
        def note(text: str) -> str:
            """Write a note."""
            world.done.append(text)
            return f"noted {text}"

        @tool(needs_approval=True)
        def delete(path: str) -> str:
            """Delete a file (needs approval)."""
            world.done.append(f"deleted {path}")
            return f"deleted {path}"

        @tool
        async def wait() -> str:
            """Wait until the world's gate opens."""
            world.waiting += 1
            await world.gate.wait()
            return "waited"

        return [note, delete, wait]


def call_for(task: str, call_id: str) -> ToolCall:
    """The call a task names: ``note hello``, ``delete a``, ``wait``."""
    name, _, argument = task.partition(" ")
    arguments: dict[str, Any] = (
        {"text": argument} if name == "note" else {"path": argument} if name == "delete" else {}
    )
    return ToolCall.create(call_id, name, arguments)
