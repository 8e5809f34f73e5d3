"""The events of a run: `Transition`, `LLMCallStarted` and `LLMCall` (and an `LLMRetry` between
them for each retry of the call), `ToolCallStarted`, `ToolCallCompleted`, `Edit`, `RunPaused`,
and, while a streaming model writes its reply, `TextDelta` and `ToolCallDelta`.

The run's driver builds one `Transition` per fired edge, in one place
(`RunDriver.fire`); the log line, `iter()`, `on_transition` callbacks, traces
and checkpoints all read the same object. `LLMCall` (what was sent to the
model and what came back), the start and completion of each tool call, and
`Edit` (a caller's change between steps) are the rest of what a tracer, a
checkpointer or an exporter needs; `on_event` delivers them all, in the
order they happen, through one mechanism. The deltas come between the edge
into THINKING and the edge out of it; they are the reply arriving, not a
record of the run (the `LLMCall` after them has the whole reply), so traces
and checkpoints skip them. So they skip `LLMRetry`: see its description.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..fsm.machine import GuardOutcome
from ..messages import Message, ToolCall
from ..model.base import LLMResponse
from ..questions import Answer
from .result import StopReason
from .state import Decision, Observation

__all__ = [
    "AgentEvent",
    "Delta",
    "Edit",
    "EditKind",
    "EventListener",
    "GuardOutcome",
    "LLMCall",
    "LLMCallStarted",
    "LLMRetry",
    "RunPaused",
    "TextDelta",
    "ToolCallCompleted",
    "ToolCallDelta",
    "ToolCallStarted",
    "Transition",
    "TransitionListener",
]


@dataclass(slots=True, kw_only=True)
class Transition:
    """One edge taken: where from, where to, why, and what the phase produced.

    Treat it as read-only: it is a record of what happened (changes to a run
    go through `agent.run_state` between transitions).
    """

    agent: str
    run_id: str
    trigger: str
    source: str
    dest: str
    step: int
    guards: tuple[GuardOutcome, ...] = ()
    """Guards evaluated for this trigger, in table order, with their outcomes."""
    stop_reason: StopReason | str | None = None
    duration_s: float = 0.0
    """Time spent in `source` before this edge fired (the phase's work)."""
    reply: LLMResponse | None = None
    """For edges out of a phase that produces a reply (THINKING): the LLM reply."""
    tool_calls: tuple[ToolCall, ...] = ()
    """For edges into a phase that consumes the pending calls (ACTING): the calls about to run."""
    observations: tuple[Observation, ...] = field(default=())
    """For edges out of a phase that produces observations (ACTING): the results, before memory."""
    error: str | None = None
    """For edges into a final state: the run's error, if it has one."""

    def log_fields(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "run_id": self.run_id,
            "step": self.step,
            "trigger": self.trigger,
            "source": self.source,
            "dest": self.dest,
            "guards": {g.name: g.held for g in self.guards},
            "stop_reason": str(self.stop_reason) if self.stop_reason else None,
            "duration_ms": round(self.duration_s * 1000, 3),
            **({"error": self.error} if self.error else {}),
        }


@dataclass(slots=True, kw_only=True)
class LLMCallStarted:
    """A request to the model is about to be sent; its `LLMCall` follows when it returns or raises
    (none follows when the run is cancelled meanwhile: the run's end closes it). An exporter of
    spans opens the call's span here, so what the model's client does (its HTTP requests, their
    retries) happens inside it."""

    agent: str
    run_id: str
    step: int
    model: Any = field(default=None, compare=False, repr=False)
    """The model asked (the object the phase calls): an exporter reads its name and settings.
    Never written anywhere."""


@dataclass(slots=True, kw_only=True)
class LLMCall:
    """One request to the model, exactly as sent, and its reply (or the error it raised).

    Emitted by `ToolCallAgent.think` only when someone listens (`on_event`):
    copying the messages costs O(history), which the hot path does not pay.
    """

    agent: str
    run_id: str
    step: int
    messages: tuple[Message, ...]
    system_msgs: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...]
    tool_choice: str
    reply: LLMResponse | None = None
    error_type: str | None = None
    """The exception's class name when the call raised (``TokenLimitExceeded``, ``LLMError``, ...)."""
    error: str | None = None
    duration_s: float = 0.0


@dataclass(slots=True, kw_only=True)
class LLMRetry:
    """An attempt of the model call in flight failed with a transient error (a rate limit, a 5xx,
    a timeout, a lost connection, a stream cut mid-way), and the call is tried again after
    `wait_s` seconds. Emitted before the wait, between the call's `LLMCallStarted` and its
    `LLMCall`, once per retry (none when the first attempt succeeds), by either adapter, streamed
    or not; the deltas of the next attempt carry ``attempt + 1``.

    Traces and checkpoints do not record it: they are the record of the run, read back and
    replayed, and a retry changes nothing in it: the request and the reply are the same after one
    attempt or four, replay could not use it, and a record of it would make two runs that asked
    and were answered alike differ by the network's weather. The `llm` record's `duration_s`
    includes the waits; the log (``llm_retry``), the live view and the OpenTelemetry span say
    how the call got there."""

    agent: str
    run_id: str
    step: int
    attempt: int
    """The attempt that failed (1 for the first)."""
    error_type: str
    """The error's class name (``RateLimitError``, ``ServiceUnavailableError``, ``ProviderError``)."""
    error: str
    """What it said (``"ProviderError: HTTP 503: ..."``), on one line, at most 300 characters: the
    provider's error, never the request's content."""
    status_code: int | None = None
    """The HTTP status the server answered with, or None (a timeout, a refused connection)."""
    wait_s: float = 0.0
    """Seconds before the next attempt: the server's Retry-After (up to `backoff_max`), else the
    backoff."""


@dataclass(slots=True, kw_only=True)
class ToolCallStarted:
    """A tool call is about to run (checkpointed before it does, so it is never run twice)."""

    agent: str
    run_id: str
    step: int
    call: ToolCall


@dataclass(slots=True, kw_only=True)
class ToolCallCompleted:
    """A tool call returned (checkpointed before its result can enter memory)."""

    agent: str
    run_id: str
    step: int
    observation: Observation


@dataclass(slots=True, kw_only=True)
class TextDelta:
    """A piece of the model's text as it streams in (a model with `stream` on, in THINKING)."""

    agent: str
    run_id: str
    step: int
    text: str
    attempt: int = 1
    """The try of this call it belongs to: when a stream failed mid-way and the call was retried,
    the pieces of the earlier attempts were not the reply; this attempt's start it again."""


@dataclass(slots=True, kw_only=True)
class ToolCallDelta:
    """A piece of a tool call as it streams in: its id and name first, then its arguments' JSON
    in fragments (join the `arguments` of one `index` for the whole)."""

    agent: str
    run_id: str
    step: int
    index: int
    """The call's place in the reply (0, 1, ...)."""
    call_id: str | None = None
    """Given by the piece that starts the call, else None."""
    name: str | None = None
    """Given by the piece that starts the call, else None."""
    arguments: str = ""
    attempt: int = 1
    """As `TextDelta.attempt`."""


@dataclass(slots=True, kw_only=True)
class RunPaused:
    """The run stopped to wait in `state` (a pause: approval, input, an agent of a flow) for
    `reason`; `resume()` goes on from there, in this process or from its checkpoint in another."""

    agent: str
    run_id: str
    step: int
    state: str
    reason: StopReason | str


Delta = TextDelta | ToolCallDelta
"""A piece of a reply as it streams in."""


EditKind = Literal["pending_calls", "observation", "approval", "answer"]
"""What an `Edit` changed: the calls to run, an observation, a decision on a call, an answer."""


@dataclass(slots=True, kw_only=True)
class Edit:
    """A caller's change to the run between two transitions.

    ``pending_calls``: `before`/`after` are the call tuples (in ACTING, before
    the tools run). ``observation``: `before`/`after` are the contents of the
    observation answering `call_id` (in OBSERVING, before it reaches memory).
    ``approval``: `before` is the call (a 1-tuple) as the model made it, `after` the
    `Decision` on it (in AWAITING_APPROVAL). ``answer``: `before` is the key of the question
    answered, `after` the `Answer`, for the call `call_id` (in AWAITING_INPUT).
    """

    agent: str
    run_id: str
    step: int
    kind: EditKind
    before: tuple[ToolCall, ...] | str
    after: tuple[ToolCall, ...] | str | Decision | Answer
    call_id: str | None = None


AgentEvent = (
    Transition
    | LLMCallStarted
    | LLMRetry
    | LLMCall
    | ToolCallStarted
    | ToolCallCompleted
    | Edit
    | RunPaused
    | TextDelta
    | ToolCallDelta
)
"""Everything `on_event` delivers."""

EventListener = Callable[[AgentEvent], Awaitable[object] | None]
"""An `on_event` callback; it may return an awaitable, which the engine awaits before the next
tool runs and before the run returns (a checkpoint's fsync, an async listener's coroutine)."""
TransitionListener = Callable[[Transition], None]
"""An `on_transition` callback."""
