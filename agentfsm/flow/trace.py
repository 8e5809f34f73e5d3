"""A flow's trace: the flow's own records and, tagged, every event of the agents that run its steps.

Why one file: a flow's outcome is made by its agents' runs, so a trace that
held only the flow's edges and planner calls could not be replayed, nor
read to see why a step failed. The flow's records are an agent trace's
(`agentfsm.recording.trace`: header, transitions, ``llm`` records for the
planner, the result); each agent's transitions, model calls, tool results
and edits follow in the order they happened, each with ``agent`` (the
agent's name in the flow) and ``flow_step`` (the id of the plan step it
runs). The flow's records have no ``agent``. Besides, schema
`agentfsm.recording.trace.TRACE_SCHEMA` as for agents:

- the header's ``agents`` holds each agent's memory before the flow (its
  ``history``, whole: an agent's request writes those messages again);
- a ``plan_decision`` record (``decision``, a `PlanDecision`) comes before
  each transition out of AWAITING_PLAN_REVIEW: the decision it took;
- the ``result`` record holds, beside the flow's ``result`` (its
  `RunResult`), ``flow``: the whole `FlowResult` (plan, runs, summary).

`agentfsm.flow.replay` re-drives a flow from such a trace.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..agent.base import BaseAgent
from ..recording.files import RecordPath
from ..recording.trace import TraceWriter, edit_record
from ..run.events import AgentEvent, Transition
from ..run.result import RunResult
from ..run.view import Recorded
from .plan import StepStatus
from .result import FlowResult
from .review import AWAITING_PLAN_REVIEW
from .state import FlowState

__all__ = ["FlowTraceWriter", "TracedFlow"]


class TracedFlow(Recorded, Protocol):
    """What a flow's trace reads of a flow (`PlanningFlow` is one)."""

    flow_state: FlowState

    @property
    def agents(self) -> Mapping[str, BaseAgent]: ...

    @property
    def paused_agent(self) -> BaseAgent | None: ...

    def flow_result(self, result: RunResult) -> FlowResult: ...


class FlowTraceWriter(TraceWriter):
    """Writes one run of `flow` to `path`, its agents' events among its own (a context manager)."""

    def __init__(self, path: RecordPath, flow: TracedFlow, *, append: bool = False) -> None:
        super().__init__(path, flow, append=append)
        self.flow = flow
        self._agent_unsubscribes: list[Callable[[], None]] = [
            agent.on_event(self._agent_listener(name)) for name, agent in flow.agents.items()
        ]
        paused = flow.paused_agent if append else None
        if paused is not None:  # the answers given while the flow was paused, as a resumed agent's trace
            for edit in paused.paused_edits:
                self._write(self._tagged(edit_record(edit), paused.name))

    def close(self) -> None:
        for unsubscribe in self._agent_unsubscribes:
            unsubscribe()
        self._agent_unsubscribes = []
        super().close()

    def _agent_listener(self, name: str) -> Callable[[AgentEvent], None]:
        def listener(event: AgentEvent) -> None:
            if self._broken is not None or self.run_id is None:  # before the flow's start: not its run
                return
            for record in self._records_of(event):
                self._write(self._tagged(record, name))

        return listener

    def _tagged(self, record: dict[str, Any], name: str) -> dict[str, Any]:
        plan = self.flow.flow_state.plan
        step = next((s.id for s in plan.steps if s.status is StepStatus.IN_PROGRESS), None) if plan else None
        return {**record, "agent": name, "flow_step": step}

    def _records_of(self, event: AgentEvent) -> list[dict[str, Any]]:
        records = super()._records_of(event)
        decision = self.flow.flow_state.decision
        reviewed = isinstance(event, Transition) and event.source == AWAITING_PLAN_REVIEW
        if reviewed and event.agent == self.flow.name and decision is not None:
            records.insert(0, {"kind": "plan_decision", "decision": decision.model_dump(mode="json")})
        return records

    def _header(self) -> dict[str, Any]:
        header = super()._header()
        header["agents"] = {
            name: {"history": [m.model_dump(mode="json") for m in agent.memory.messages]}
            for name, agent in self.flow.agents.items()
        }
        return header

    def _result_record(self, result: RunResult) -> dict[str, Any]:
        record = super()._result_record(result)
        record["flow"] = self.flow.flow_result(result).model_dump(mode="json")
        return record
