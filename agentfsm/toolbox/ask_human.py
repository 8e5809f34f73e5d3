"""`ask_human`: the model asks the person running it a question.

The tool never reads the terminal itself: whoever embeds the agent passes an
async `ask` callback (a web app, a chat UI, a test), and with none the model is
told no human is there, at once, instead of the run hanging on a read. The
command line passes `ask_on_terminal` when stdin is a terminal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .tool import Tool, ToolResult

__all__ = ["AskFn", "AskHuman"]

AskFn = Callable[[str], Awaitable[str]]
"""Takes the model's question, returns the human's answer (raise `EOFError` if there is none)."""


class AskHuman(Tool):
    """Ask the human through `ask`; without one, say that no human is available."""

    name = "ask_human"
    description = "Use this tool to ask human for help."
    parameters: Mapping[str, Any] = {
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
