"""`RunStatus`: where a run is, as a run manager reports it (`agentfsm.runs.Runs` in one process,
`agentfsm.durable.DurableRuns` on DBOS: the same record, so an app moves between them unchanged)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..errors import WrongPhaseError, WrongValueError
from ..messages import ToolCall
from ..questions import Question
from ..run.result import RunResult
from ..serde import Serializable

__all__ = ["RunStatus", "RunStatusState", "check_page", "stale_decision"]

RunStatusState = Literal["queued", "running", "paused", "finished", "error", "cancelled"]
"""Where a managed run is: waiting for its turn, running, paused for a person, or ended (how)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStatus(Serializable):
    """Where a run is: queued, running (on `worker`), paused, or ended with its `result`."""

    run_id: str
    state: RunStatusState
    task: str | None = None
    queue: str | None = None
    worker: str | None = None
    """The worker that holds (or last held) the run."""
    app_version: str | None = None
    result: RunResult | None = None
    """Once it ended: its result (a cancelled run's says `cancelled`)."""
    pending_approval: tuple[ToolCall, ...] = ()
    """While paused: the calls waiting for a decision (`approve`, `reject`)."""
    pending_input: tuple[tuple[ToolCall, Question], ...] = ()
    """While paused: the questions tool calls asked, each with its call (`answer`)."""
    pause: int | None = None
    """While paused: the pause's number in the run (1, 2, ...), the one a decision is bound to."""
    decided: tuple[str, ...] = ()
    """While paused: the calls of this pause decided already (a second decision is refused)."""
    held: str | None = None
    """While running: the breakpoint it waits at and the edge that hit it (`Runs.set_breakpoints`),
    until `step` or `proceed`; None when it does not wait there (`DurableRuns` sets none)."""
    plan: str | None = None
    """While paused for a decision on a flow's plan: the plan (rendered), which `Runs.review`
    approves, edits or cancels; None for an agent's run and any other pause."""
    parked: bool = False
    """While paused: whether it has left its worker (`Worker(park_after_s=)`), holding no place there;
    a decision puts it back on its queue."""

    @property
    def ended(self) -> bool:
        return self.result is not None


def check_page(limit: int | None, offset: int) -> None:
    """`WrongValueError` unless `limit` (None: all) and `offset` name a page of a run list, as both
    managers' `list` take them."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise WrongValueError(f"limit must be a positive whole number of runs (or None: all), got {limit!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise WrongValueError(f"offset must be a whole number of runs (>= 0), got {offset!r}")


def stale_decision(status: RunStatus, call_id: str, pause: int, *, see: str) -> WrongPhaseError:
    """The error for a decision about `call_id` bound to `pause`, a pause the run is no longer at
    (whichever manager holds the run: the rule and its words are one); `see`: where its status is."""
    now = f"waits at pause {status.pause}" if status.pause is not None else f"is {status.state}"
    return WrongPhaseError(
        f"the decision of call {call_id!r} was for pause {pause} of run {status.run_id!r}, which is over "
        f"(the run {now}): see {see} and decide what it waits for now"
    )
