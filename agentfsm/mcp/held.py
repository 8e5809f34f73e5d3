"""A 2025 server's call held open while its server's question waits for a person.

On the handshake revisions a server asks (``elicitation/create``) while its `tools/call` is
open, and the call can go on only once the question is answered. The run pauses meanwhile
(AWAITING_INPUT), so the call outlives the think-act step that made it: `MCPConnection`
keeps it here, with what was answered so far, until the answer comes, nobody will give one
(`give_up`), or the connection closes. What was answered goes into the pause's token too, so
after a restart the call made again is answered from it.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from typing import Any

from ..questions import Answer, InputRequired, Question

__all__ = ["HeldCall"]


@dataclass(eq=False)
class HeldCall:
    """A 2025 server's call, open while its server asks a person questions."""

    call: asyncio.Future[Any]
    answered: list[tuple[Question, Answer]]
    """Every question of the call answered so far, with its answer (a restart asks them again)."""
    replay: list[tuple[Question, Answer]]
    """Answers given before a restart, for the questions the server asks again."""
    id: str = field(default_factory=lambda: os.urandom(6).hex())
    question: asyncio.Future[Question] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    """The question the server is asking now (done: the call waits for its answer)."""
    _reply: asyncio.Future[Answer] | None = None

    @property
    def waiting(self) -> bool:
        """Its server waits for the answer to a question (so it asks nothing else meanwhile)."""
        return self._reply is not None and not self._reply.done()

    async def ask(self, question: Question) -> Answer:
        self._reply = asyncio.get_running_loop().create_future()
        if not self.question.done():
            self.question.set_result(question)
        return await self._reply

    def asking(self) -> InputRequired:
        """The question as the agent keeps it: the token finds this call again, or (in another
        process) says what was answered before."""
        answered = [[q.model_dump(mode="json"), a.model_dump(mode="json")] for q, a in self.answered]
        token = json.dumps({"revision": "legacy", "hold": self.id, "answered": answered})
        return InputRequired(questions=(self.question.result(),), token=token)

    def answer(self, given: list[tuple[Question, Answer]]) -> None:
        """Hand the person's answer to the server's waiting question; wait for the next one."""
        self.answered += given
        self.question = asyncio.get_running_loop().create_future()
        if self._reply is not None and not self._reply.done():
            self._reply.set_result(given[0][1])

    def give_up(self) -> asyncio.Future[Any]:
        """Nobody will answer: the server's question is cancelled, and whatever the server then
        answers to the call is dropped. The call, to wait for before the connection closes."""
        if self._reply is not None and not self._reply.done():
            self._reply.set_result(Answer.cancel())
        else:
            self.call.cancel()
        self.call.add_done_callback(_dropped)
        return self.call


def _dropped(call: asyncio.Future[Any]) -> None:
    """A call given up: its outcome is read (so asyncio does not report it) and dropped."""
    if not call.cancelled():
        call.exception()
