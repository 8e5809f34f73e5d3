"""Which run, step and call a tool is executing for, without changing any tool's signature.

Tools are called with their arguments only (``await tool(**arguments)``), which is what keeps a
tool a plain function. The run's dependencies (`run(..., deps=...)`) reach a tool the same way:
`@tool(deps_type=...)` fills them in from here, and a `Tool` subclass reads `current_call().deps`.
A few tools need to know the call they serve: an MCP tool passes the
run's trace context to its server in the request's ``_meta``, so the server's logs and spans
join the run's. The agent sets the context around each execution; a context variable makes it
task-local, so calls run in parallel (each in its own task) each see their own, and nothing is
shared between agents or runs. What the agent sets is the way to make the context, not the
context: most tools never ask for it, so a call that nobody asks about makes none.

The trace context is W3C's (``traceparent``), derived from the run and the call alone: a
replayed or resumed run, in another process too, names the same trace and the same spans.
When an OpenTelemetry span is current, the MCP SDK puts that span's context in ``_meta``
instead, so a traced application keeps its own trace.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = ["ToolCallContext", "current_call", "executing"]


@dataclass(frozen=True, slots=True)
class ToolCallContext:
    """The call a tool is executing for."""

    agent: str
    run_id: str
    step: int
    call_id: str
    tool: str
    deps: Any = field(default=None, compare=False)
    """The run's dependencies (`run(..., deps=...)`), None when it was given none."""

    @property
    def trace_id(self) -> str:
        """The run's trace id: 32 hex digits, the same for every call of the run."""
        return hashlib.sha256(f"agentfsm run {self.run_id}".encode()).hexdigest()[:32]

    @property
    def span_id(self) -> str:
        """The call's span id: 16 hex digits, unique to the run, step and call."""
        key = f"agentfsm call {self.run_id} {self.step} {self.call_id}"
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    @property
    def traceparent(self) -> str:
        """The W3C ``traceparent`` header value of the call (sampled)."""
        return f"00-{self.trace_id}-{self.span_id}-01"

    def meta(self) -> dict[str, str]:
        """What a request made for this call carries in ``_meta``: the trace context and the
        run's own names (under the ``agentfsm/`` prefix, as MCP asks of non-protocol keys)."""
        return {
            "traceparent": self.traceparent,
            "agentfsm/agent": self.agent,
            "agentfsm/run_id": self.run_id,
            "agentfsm/step": str(self.step),
            "agentfsm/call_id": self.call_id,
        }


_T = TypeVar("_T")

_CURRENT: ContextVar[Callable[[], ToolCallContext] | None] = ContextVar("agentfsm_tool_call", default=None)


def current_call() -> ToolCallContext | None:
    """The call being executed in this task, or None outside a run's tool execution."""
    make = _CURRENT.get()
    return make() if make is not None else None


async def executing(context: Callable[[], ToolCallContext], work: Awaitable[_T]) -> _T:
    """Await `work` (a tool's call) with the call `context` makes as the current one, in this
    task only. `context` is called when a tool asks for it (`current_call()`), each time."""
    token = _CURRENT.set(context)
    try:
        return await work
    finally:
        _CURRENT.reset(token)
