"""`ask_human`: the model asks the person running it a question.

The tool never reads the terminal itself: whoever embeds the agent passes an
async `ask` callback (a web app, a chat UI, a test), and with none the model is
told no human is there, at once, instead of the run hanging on a read. The
command line passes `ask_on_terminal` when stdin is a terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from ..tool import Tool, ToolResult

__all__ = ["AskFn", "AskHuman", "ask_on_terminal"]

AskFn = Callable[[str], Awaitable[str]]
"""Takes the model's question, returns the human's answer (raise `EOFError` if there is none)."""


class AskHuman(Tool):
    """Ask the human through `ask`; without one, say that no human is available."""

    name = "ask_human"
    description = "Use this tool to ask human for help."
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"inquire": {"type": "string", "description": "The question you want to ask human."}},
        "required": ["inquire"],
    }

    def __init__(self, ask: AskFn | None = None) -> None:
        super().__init__()
        self.ask = ask

    async def execute(self, inquire: str) -> ToolResult:  # type: ignore[override]
        if self.ask is None:
            return ToolResult(error=_no_human(inquire, "this agent was started without a way to reach one"))
        try:
            answer = await self.ask(inquire)
        except EOFError:
            return ToolResult(error=_no_human(inquire, "the input was closed before an answer came"))
        answer = answer.strip()
        return ToolResult(output=answer or "The human gave an empty answer.")


def _no_human(inquire: str, why: str) -> str:
    return (
        f"No human is available to answer: {inquire!r} ({why}). "
        "Continue with your best judgement, or call `terminate` if you cannot proceed."
    )


async def ask_on_terminal(question: str) -> str:
    """Print the question on stderr and read one line of stdin, without blocking the event loop.

    The read runs in a daemon thread, not `asyncio.to_thread`: `asyncio.run`
    waits for the default executor's threads when it shuts down, so a pending
    `input()` there would make Ctrl-C hang until Enter. A daemon thread is left
    behind instead, and ends with the process. stderr, because stdout carries
    only the command's result. Raises `EOFError` when stdin is closed.
    """
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str] = loop.create_future()

    def deliver(line: str) -> None:
        if not answer.done():  # done: the run was cancelled while the human was typing
            answer.set_result(line)

    def read() -> None:
        try:
            sys.stderr.write(f"\nBot: {question}\n\nYou: ")
            sys.stderr.flush()
            line = sys.stdin.readline()
        except (OSError, ValueError):  # stdin closed or detached: as good as end of file
            line = ""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
            loop.call_soon_threadsafe(deliver, line)

    threading.Thread(target=read, name="agentfsm-ask-human", daemon=True).start()
    line = await answer
    if not line:
        raise EOFError("stdin reached end of file")
    return line.rstrip("\n")
