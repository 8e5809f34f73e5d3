"""`DeltaEmitter`: the pieces of a streaming reply as the run's events, and what they cost so far.

The model adapter knows the pieces but not the run; the agent knows the run (its id, the step)
but sees the reply only once it is whole. This sink joins them: each piece a model hands it
becomes a `TextDelta` or a `ToolCallDelta` on the agent's one event stream, in order with the
transitions and tool calls (only when someone listens, like every event).

It also counts the pieces of the latest attempt, because a run cancelled mid-stream never gets
the usage chunk that ends a stream: its result then counts the call, and one output token per
piece received (providers stream about a token a chunk), with the cost unknown.
"""

from __future__ import annotations

from ..model.base import Usage
from ..run.events import TextDelta, ToolCallDelta
from ..run.view import Driven

__all__ = ["DeltaEmitter"]


class DeltaEmitter:
    """A `DeltaSink` for one call of `agent`'s model, in the current step."""

    __slots__ = ("agent", "attempt", "pieces")

    def __init__(self, agent: Driven) -> None:
        self.agent = agent
        self.attempt = 0
        self.pieces = 0
        """Pieces of text and of tool calls received in the latest attempt."""

    def _count(self, attempt: int) -> None:
        if attempt != self.attempt:
            self.attempt, self.pieces = attempt, 0
        self.pieces += 1

    def text(self, piece: str, attempt: int) -> None:
        self._count(attempt)
        agent = self.agent
        if agent.listening:
            run = agent.run_state
            agent.emit(
                TextDelta(agent=agent.name, run_id=run.run_id, step=run.step, text=piece, attempt=attempt)
            )

    def tool_call(
        self, index: int, call_id: str | None, name: str | None, arguments: str, attempt: int
    ) -> None:
        self._count(attempt)
        agent = self.agent
        if agent.listening:
            run = agent.run_state
            agent.emit(
                ToolCallDelta(
                    agent=agent.name,
                    run_id=run.run_id,
                    step=run.step,
                    index=index,
                    call_id=call_id,
                    name=name,
                    arguments=arguments,
                    attempt=attempt,
                )
            )

    def partial_usage(self) -> Usage:
        """What the call cost when its stream was cut off by the run's end (see the module)."""
        return Usage(output_tokens=self.pieces, llm_calls=1, cost_usd=None)
