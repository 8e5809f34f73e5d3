"""What a tool asks a person in the middle of a call, and the person's answers.

Why this is vocabulary of its own, beside messages: a tool can say "I need input before
I can finish" (an MCP server's elicitation is the first such tool), the agent pauses the
run in AWAITING_INPUT with the questions (`agentfsm.agent.awaiting_input`), and the answers
go back to the same tool when it runs the call again. The tools, the run's state, its
result and its events all speak of the same three records, so they live below all of them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from .messages import ToolCall
from .serde import Serializable

__all__ = ["Answer", "AnswerAction", "InputHandler", "InputRequired", "Question"]

AnswerAction = Literal["accept", "decline", "cancel"]
"""``accept``: answered (with `content`); ``decline``: refused to answer; ``cancel``: dismissed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Question(Serializable):
    """One question of a tool to a person."""

    key: str
    """The question's name within its call (the tool's own: answers are matched by it)."""
    message: str
    """What to show the person."""
    schema: dict[str, Any] = field(default_factory=dict)
    """The JSON schema of the answer's `content` (an object of named fields); empty for a `url`."""
    url: str | None = None
    """A page the person is to open instead of typing an answer (accepting says they did)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InputRequired(Serializable):
    """A tool's call cannot finish without answers: its questions, and what the tool needs back.

    A tool returns one as `ToolResult(input_required=...)`; the agent keeps it in the run's
    state (checkpointed) and hands it back, with the answers, to `Tool.resume`.
    """

    questions: tuple[Question, ...]
    token: str = ""
    """Opaque to the engine: what the tool needs to go on with the call (it survives a restart)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer(Serializable):
    """A person's answer to one `Question`."""

    action: AnswerAction
    content: dict[str, Any] | None = None
    """The answer's fields (``accept`` only), as the question's schema describes them."""

    @classmethod
    def accept(cls, content: dict[str, Any] | None = None) -> Answer:
        return cls(action="accept", content=content)

    @classmethod
    def decline(cls) -> Answer:
        return cls(action="decline")

    @classmethod
    def cancel(cls) -> Answer:
        return cls(action="cancel")


InputHandler = Callable[[ToolCall, Question], Awaitable[Answer]]
"""Answers one question of the call `ToolCall` inline, so the run does not pause for it."""
