"""`ask_human`: the model asks the person running it a question.

The tool never reads the terminal itself: whoever embeds the agent passes an
async `ask` callback (a web app, a chat UI, a test), and with none the model is
told no human is there, at once, instead of the run hanging on a read. The
command line passes `ask_on_terminal` when stdin is a terminal.

Where no callback can reach a person but the run can wait for one (a durable
run, on a worker), `AskHumanInput` makes the model's question the run's own:
the run pauses in AWAITING_INPUT, anyone answers it (`agentfsm answer`), and
the answer is the observation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..questions import Answer, InputRequired, Question
from .tool import Tool, ToolResult

__all__ = ["ANSWER_FIELD", "AskFn", "AskHuman", "AskHumanInput"]

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

    async def execute(self, inquire: str) -> ToolResult:
        if self.ask is None:
            return ToolResult(error=_no_human(inquire, "this agent was started without a way to reach one"))
        try:
            answer = await self.ask(inquire)
        except EOFError:
            return ToolResult(error=_no_human(inquire, "the input was closed before an answer came"))
        answer = answer.strip()
        return ToolResult(output=answer or "The human gave an empty answer.")


ANSWER_FIELD = "answer"
"""The field of `AskHumanInput`'s question that holds the person's answer (``--field answer=...``)."""
_QUESTION_KEY = "human"
_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {ANSWER_FIELD: {"type": "string", "description": "The answer to the question."}},
    "required": [ANSWER_FIELD],
}


class AskHumanInput(AskHuman):
    """`ask_human` as a question the run pauses for: the model's question, asked of whoever answers
    the paused run, whose answer (or refusal) the model reads. The model sees the same tool."""

    asks_for_input = True

    async def execute(self, inquire: str) -> ToolResult:
        question = Question(key=_QUESTION_KEY, message=inquire, schema=dict(_SCHEMA))
        return ToolResult(input_required=InputRequired(questions=(question,), token=inquire))

    async def resume(self, asked: InputRequired, answers: Mapping[str, Answer], **kwargs: Any) -> ToolResult:
        given = answers[_QUESTION_KEY]
        if given.action != "accept":
            return ToolResult(error=_no_human(asked.token, f"the question was answered with {given.action}"))
        answer = str((given.content or {}).get(ANSWER_FIELD, "")).strip()
        return ToolResult(output=answer or "The human gave an empty answer.")


def _no_human(inquire: str, why: str) -> str:
    return (
        f"No human is available to answer: {inquire!r} ({why}). "
        "Continue with your best judgement, or call `terminate` if you cannot proceed."
    )
