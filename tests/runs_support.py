"""The world the runs of `Runs`' tests act on: their tools (shared by every agent a factory
builds, and by a flow's worker), what the tools did, and the gate ``wait`` waits at; and `until`,
the one wait for a run to reach a state.

A task names the call to make: ``note hello`` writes a note, ``delete a`` needs approval, ``wait``
waits until the gate opens.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from agentfsm import Tool, tool
from agentfsm.messages import ToolCall
from agentfsm.runs import RunStatus


class Statuses(Protocol):
    """What `until` reads of a run manager (`Runs`, `DurableRuns`): a run's status."""

    async def status(self, run_id: str) -> RunStatus: ...


async def until(
    runs: Statuses,
    run_id: str,
    state: str,
    also: Callable[[], bool] | None = None,
    timeout: float = 10,
) -> RunStatus:
    """The run's status once it is in `state` (and `also()` holds), read every 10 ms. After
    `timeout` seconds the test fails, naming the run, the state wanted and the last status seen."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        status = await runs.status(run_id)
        if status.state == state and (also is None or also()):
            return status
        wanted = f"{state!r}" if also is None else f"{state!r} with `also` holding"
        assert loop.time() < deadline, (
            f"run {run_id!r} is not {wanted} after {timeout:g} s; the last status seen: {status!r}"
        )
        await asyncio.sleep(0.01)


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
