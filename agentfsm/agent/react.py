"""`ReActAgent`: think, then act, then observe (the seed's ReAct split).

`think` and `act` stay abstract; `observe` is shared: it records each
observation as a `tool` message paired with its call, and runs stuck
detection on the step's assistant turn.
"""

from __future__ import annotations

import hashlib
from abc import abstractmethod

from ..messages import Message
from .base import BaseAgent

__all__ = ["STUCK_HINT", "ReActAgent"]

STUCK_HINT = (
    "Observed duplicate responses. Consider new strategies and avoid repeating "
    "ineffective paths already attempted."
)


class ReActAgent(BaseAgent):
    """An agent that alternates reasoning (`think`) and acting (`act`)."""

    @abstractmethod
    async def think(self) -> None:
        """Ask for the next move; leave tool calls in `run.turn.pending_calls` (none: no action)."""

    @abstractmethod
    async def act(self) -> None:
        """Carry out the step's `pending_calls`, leaving one `Observation` per call in its `observations`."""

    async def observe(self) -> None:
        run = self.run_state
        self.memory.add_messages(
            [
                Message.tool_message(
                    obs.content, name=obs.call.name, tool_call_id=obs.call.id, base64_image=obs.base64_image
                )
                for obs in run.turn.observations
            ]
        )
        for obs in run.turn.observations:
            if obs.usage is not None:  # a tool that asked a model itself
                run.usage.add(obs.usage)
        self._detect_stuck()

    def _detect_stuck(self) -> None:
        """Count this step's assistant turn (content *and* tool calls) among the run's earlier turns.

        Counting signatures in a dict keeps this O(1) per step, where upstream
        rescanned the whole history. The hint is a one-shot nudge for the next
        think; it never accumulates in the prompt.
        """
        run = self.run_state
        reply = run.turn.reply
        if reply is None or (not reply.content and not reply.tool_calls):
            return
        parts = [reply.content or ""] + [f"{c.name}\x00{c.arguments}" for c in reply.tool_calls]
        # surrogatepass: a lone surrogate in a model's output (no UTF-8 for it) is hashed, not fatal
        text = "\x01".join(parts).encode("utf-8", "surrogatepass")
        signature = hashlib.blake2b(text, digest_size=12).hexdigest()
        seen = run.seen[signature] = run.seen.get(signature, 0) + 1
        if seen - 1 >= self.duplicate_threshold:
            run.stuck_streak += 1
            run.nudge = STUCK_HINT
        else:
            run.stuck_streak = 0
