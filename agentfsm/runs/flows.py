"""`FlowRun`: a `PlanningFlow` as `Runs` drives a run, so that one manager drives agents and flows.

Why an adapter and not a second manager: a flow is a `DrivenModel` as an agent is, with the same
lifecycle (checkpoint journal, trace, pause, cancel, hold between edges), and only a few verbs
named otherwise: `execute` is its `run`, and a flow's results are `FlowResult`s where a run's
record is a `RunResult`. `FlowRun` gives the flow the names the manager calls and hands back the
flow's `RunResult` (`last_result`: its summary as the output); everything else is the flow's own.
A flow paused for plan review is decided through `review` (`Runs.review`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from ..errors import WrongValueError
from ..flow.flow import PlanningFlow
from ..fsm.machine import MachineTable
from ..messages import ToolCall
from ..questions import AnswerAction, Question
from ..recording.files import RecordPath
from ..run.events import AgentEvent
from ..run.result import RunResult
from ..run.view import Hold

__all__ = ["FlowRun", "PlanVerdict"]

PlanVerdict = Literal["approve", "edit", "cancel"]
"""A decision on a flow's plan (`Runs.review`): run it, run `steps` instead, or end the flow."""


class FlowRun:
    """`flow`, driven by `Runs` as an agent is (the agent's verbs, the flow's behaviour)."""

    def __init__(self, flow: PlanningFlow) -> None:
        self.flow = flow

    @property
    def table(self) -> MachineTable:
        return self.flow.table

    @property
    def phase(self) -> str | None:
        return self.flow.phase

    @property
    def hold(self) -> Hold | None:
        return self.flow.hold

    @hold.setter
    def hold(self, hold: Hold | None) -> None:
        self.flow.hold = hold

    def on_event(self, callback: Callable[[AgentEvent], None]) -> Callable[[], None]:
        """The flow's events, its agents' among them (each tagged with its agent's name)."""
        unsubscribes = [self.flow.on_event(callback)]
        unsubscribes += [agent.on_event(callback) for agent in self.flow.agents.values()]

        def unsubscribe() -> None:
            for each in unsubscribes:
                each()

        return unsubscribe

    async def run(
        self,
        request: str,
        *,
        checkpoint: RecordPath | None = None,
        trace: RecordPath | None = None,
        run_id: str,
    ) -> RunResult:
        await self.flow.execute(request, checkpoint=checkpoint, trace=trace, run_id=run_id)
        return self._result()

    async def resume(
        self, checkpoint: RecordPath | None = None, *, trace: RecordPath | None = None
    ) -> RunResult:
        await self.flow.resume(checkpoint, trace=trace)
        return self._result()

    async def cancel(self, *, trace: RecordPath | None = None) -> RunResult:
        await self.flow.cancel(trace=trace)
        return self._result()

    def suspend(self) -> None:
        self.flow.suspend()

    async def aclose(self) -> None:
        """Close the flow's agents (what each made and holds open): the factory made them for it."""
        for agent in self.flow.agents.values():
            await agent.aclose()

    def still_waiting_for(self) -> str | None:
        return self.flow.still_waiting_for()

    @property
    def pending_approval(self) -> list[ToolCall]:
        return self.flow.pending_approval

    @property
    def pending_input(self) -> list[tuple[ToolCall, Question]]:
        return self.flow.pending_input

    @property
    def decided(self) -> tuple[str, ...]:
        """The calls of the paused step's agent decided at this pause."""
        agent = self.flow.paused_agent
        return tuple(agent.run_state.turn.decisions) if agent is not None else ()

    @property
    def plan(self) -> str | None:
        """The plan waiting for a decision (rendered), while the flow waits for one."""
        if self.flow.still_waiting_for() is None or self.flow.paused_agent is not None:
            return None
        plan = self.flow.plan
        return plan.render() if plan is not None else None

    def approve(self, call_id: str, *, arguments: dict[str, Any] | None = None) -> None:
        self.flow.approve(call_id, arguments=arguments)

    def reject(self, call_id: str, reason: str | None = None) -> None:
        self.flow.reject(call_id, reason)

    def answer(
        self,
        call_id: str,
        content: dict[str, Any] | None = None,
        *,
        action: AnswerAction = "accept",
        key: str | None = None,
    ) -> None:
        self.flow.answer(call_id, content, action=action, key=key)

    def review(self, verdict: PlanVerdict, steps: Sequence[str] | None) -> None:
        """Decide the plan the flow waits for: run it, run `steps` instead (``edit``), or cancel."""
        if (verdict == "edit") != (steps is not None):
            raise WrongValueError(
                f"a plan is edited with its new `steps`, and only then; got {verdict!r} with steps {steps!r}"
            )
        if verdict == "approve":
            self.flow.approve_plan()
        elif verdict == "cancel":
            self.flow.cancel_plan()
        elif verdict == "edit" and steps is not None:
            self.flow.edit_plan(steps)
        else:
            raise WrongValueError(f"a plan's decision is 'approve', 'edit' or 'cancel', got {verdict!r}")

    def _result(self) -> RunResult:
        result = self.flow.last_result
        assert result is not None  # the flow's run settled: ended or paused
        return result
