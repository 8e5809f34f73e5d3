"""Replay a flow's trace offline: the planner and every agent answered from their recorded replies.

The agent's replay (`agentfsm.agent.replay.TraceReplayer`) with a flow's hooks:
it re-drives the machines instead of reading the transitions back: a `PlanningFlow` built from the
header, whose planner answers with the planner's recorded ``llm`` records
and whose agents are replay agents, each answered from its own tagged
records (its replies, its tools' results), with the recorded system prompts
and tool declarations. Each request is checked against the recorded one,
each edge (the flow's and each agent's) against the recorded edge, and the
flow's end against the recorded `FlowResult` (plan with statuses and notes,
each run's outcome, summary, stop reason): a replay that diverges says where,
in one line (`ReplayError`). Plan decisions and an agent's answers are given
back where they were made: a reviewed plan is decided as recorded, a call
that waited for approval is decided as recorded (in AWAITING_AGENT when the
flow waited there), so a paused and resumed flow replays as one run.
Nothing is executed and no model is called.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ..agent.replay import (
    RecordedEdges,
    ReplayAgent,
    ReplayError,
    ReplayLLM,
    ReplayScript,
    ReplayStop,
    TraceReplayer,
    apply_edit,
    compare_result,
)
from ..errors import ConfigError
from ..recording.files import RecordPath
from ..run.events import Transition
from .flow import PlanningFlow
from .result import FlowResult
from .review import PlanDecision
from .table import AWAITING_AGENT

__all__ = ["FlowReplay", "FlowReplayer", "is_flow_trace", "replay_flow"]

_COMPARED = ("state", "stop_reason", "summary", "error", "replans")


def is_flow_trace(header: dict[str, Any]) -> bool:
    """Whether a trace's header is a flow's (its records are replayed by `replay_flow`)."""
    return str(header.get("agent_class", "")).endswith(".PlanningFlow")


@dataclass(slots=True)
class FlowReplay:
    """What a flow's replay reproduced."""

    header: dict[str, Any]
    transitions: list[Transition]
    """The flow's own edges, replayed (each agent's were checked too)."""
    result: FlowResult | None
    """The recomputed FlowResult; None when the trace ended before the flow did."""
    ended_early: str | None = None


class _ReplayFlow(PlanningFlow):
    """The flow as recorded: its run id (the plan's id, which the prompts show), its decisions."""

    def __init__(self, replayer: FlowReplayer, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.replayer = replayer

    def open_run(self, request: str) -> None:
        super().open_run(request)
        self.run_state.run_id = str(self.replayer.header.get("run_id") or self.run_state.run_id)

    @property
    def _plan_id(self) -> str:
        """The recorded plan's id, which the prompts show: a fork's trace holds the plan its parent
        made, under the parent's run id, not the fork's."""
        recorded = (self.replayer.recorded_flow or {}).get("plan") or {}
        return str(recorded.get("plan_id") or super()._plan_id)

    async def review_plan(self) -> None:
        decisions = self.replayer.decisions
        if self.flow_state.decision is None and decisions:
            self.flow_state.decision = decisions.pop(0)
        await super().review_plan()

    async def await_agent(self) -> None:
        agent = self.paused_agent
        if agent is not None:
            for edit in self.replayer.deferred.pop(agent.name, []):
                _apply(agent, edit)
        await super().await_agent()


def _apply(agent: object, edit: dict[str, Any]) -> None:
    """Re-apply a recorded edit; one that no longer applies stops the replay with its error."""
    assert isinstance(agent, ReplayAgent)
    try:
        apply_edit(agent, edit)
    except ReplayError as exc:
        raise ReplayStop(ReplayError(f"{agent.name}: {exc}")) from None


class FlowReplayer(TraceReplayer):
    """One replay of the flow trace at `path` (`run()` drives it to the end): the replay of an
    agent's trace (`TraceReplayer`), with the flow as the machine, its agents' edges checked as
    they run, and the flow's plan and runs compared at the end."""

    outcome = "flow"

    def __init__(self, path: RecordPath) -> None:
        super().__init__(path)
        if not is_flow_trace(self.header):
            raise ReplayError(f"{path}: not a flow's trace; replay it as an agent's")
        config = self.header.get("config") or {}
        _check(path, "header's config", _FlowConfig, config)
        _check(path, "header", _FlowHeader, self.header)
        end = self.recorded_end or {}
        self.recorded_flow: dict[str, Any] | None = end.get("flow")
        """The recorded FlowResult (beside the flow's own RunResult, `recorded_result`)."""
        if self.recorded_flow is not None:
            try:
                FlowResult.model_validate(self.recorded_flow)
            except ValidationError as exc:
                raise _damaged(path, "result record's flow", exc) from None
        own = self.own
        self.decisions = [
            PlanDecision.model_validate(r["decision"]) for r in own if r["kind"] == "plan_decision"
        ]
        self.deferred: dict[str, list[dict[str, Any]]] = {}
        """Edits to give an agent in AWAITING_AGENT (the flow waited there for them)."""
        self.agent_edges: dict[str, RecordedEdges] = {}
        agents: dict[str, ReplayAgent] = {}
        histories = self.header.get("agents") or {}
        ending = [end] if end else []  # an agent's script is complete when the flow's trace is
        for name, described in (config.get("agents") or {}).items():
            tagged = [r for r in self.records if r.get("agent") == name]
            script = ReplayScript(tagged + ending, name=name)
            agent_header = {
                "agent": name,
                "agent_class": described.get("agent_class"),
                "config": described.get("config") or {},
                "history": (histories.get(name) or {}).get("history", []),
            }
            agents[name] = ReplayAgent(agent_header, script)
            self.agent_edges[name] = RecordedEdges(tagged, name=name)
        planner = ReplayScript(own, name="planner")
        try:
            self.flow = _ReplayFlow(
                self,
                agents=agents,
                planner_llm=ReplayLLM(planner, (config.get("llm") or {}).get("token_budget")),
                executors=config.get("executors"),
                max_replans=config.get("max_replans", 3),
                max_attempts=config.get("max_attempts", 2),
                review=bool(config.get("reviewing")),
                name=str(self.header.get("agent") or "planning"),
            )
        except (ConfigError, ValueError, TypeError) as exc:
            raise ReplayError(f"the trace's flow cannot be built again: {exc}") from None
        self.model = self.flow
        self._left = False
        """The replay is over (stopped inside an agent's run): the edges that follow are the engine's
        way out (their `cancel`), which the trace never had."""
        for name, agent in agents.items():
            agent.on_transition(self._agent_listener(name))

    def own_records(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in records if "agent" not in r]

    def _agent_listener(self, name: str) -> Callable[[Transition], None]:
        edges = self.agent_edges[name]
        agent = self.flow.agents[name]

        def listener(transition: Transition) -> None:
            if self._left or (transition.error or "").startswith(ReplayStop.__name__):
                self._left = True
                return
            try:
                index = edges.check(transition, self.complete)
            except ReplayError as exc:
                self._left = True
                raise ReplayStop(exc) from None
            edits = edges.edits.get(index, [])
            if not edits:
                return
            upcoming = self.edges.recorded[self.edges.replayed : self.edges.replayed + 1]
            if upcoming and upcoming[0]["dest"] == AWAITING_AGENT:  # the flow waited for these
                self.deferred.setdefault(name, []).extend(edits)
            else:
                for edit in edits:
                    _apply(agent, edit)

        return listener

    async def run(self) -> FlowReplay:
        async for _ in self.transitions():
            pass
        ended = self.flow.last_result
        if self.ended_early is not None or ended is None:
            return FlowReplay(self.header, self.replayed, None, self.ended_early)
        return FlowReplay(self.header, self.replayed, self.flow.flow_result(ended), None)

    def check_end(self) -> None:
        for edges in self.agent_edges.values():
            edges.check_all_taken()
        recorded, ended = self.recorded_flow, self.flow.last_result
        if recorded is None or ended is None:
            return
        mine = self.flow.flow_result(ended).model_dump(mode="json")
        for key in _COMPARED:
            if mine.get(key) != recorded.get(key):
                raise ReplayError(
                    f"the replayed flow's {key} is {mine.get(key)!r}, the trace's {recorded.get(key)!r}"
                )
        steps = (mine.get("plan") or {}).get("steps", [])
        traced_steps = (recorded.get("plan") or {}).get("steps", [])
        if len(steps) != len(traced_steps):
            raise ReplayError(f"the replayed plan has {len(steps)} steps, the trace's {len(traced_steps)}")
        for step, theirs in zip(steps, traced_steps, strict=True):
            for key in ("id", "text", "agent", "status", "attempts", "notes"):
                if step.get(key) != theirs.get(key):
                    raise ReplayError(
                        f"step {theirs.get('id')}: its {key} is {step.get(key)!r} on replay, "
                        f"{theirs.get(key)!r} in the trace"
                    )
        outcomes, traced = _outcomes(mine.get("runs", [])), _outcomes(recorded.get("runs", []))
        if outcomes != traced:
            raise ReplayError(f"the replayed runs are {outcomes}, the trace's {traced}")
        for run, theirs in zip(mine.get("runs", []), recorded.get("runs", []), strict=True):
            what = f"step {run['step_id']} ({run['agent']}, attempt {run['attempt']})"
            compare_result(run["result"], theirs.get("result"), what)


class _AgentConfig(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    agent_class: str
    config: dict[str, Any]


class _FlowConfig(BaseModel):
    """What a flow's replay builds the flow from (the rest of its header's config is the agents')."""

    model_config = ConfigDict(strict=True, extra="allow")

    max_replans: int = 3
    max_attempts: int = 2
    reviewing: bool = False
    executors: list[str] | None = None
    agents: dict[str, _AgentConfig]
    llm: dict[str, Any] | None = None


class _History(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    history: list[dict[str, Any]] = []


class _FlowHeader(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    agents: dict[str, _History] = {}


def _check(path: RecordPath, what: str, model: type[BaseModel], data: object) -> None:
    try:
        model.model_validate(data)
    except ValidationError as exc:
        raise _damaged(path, what, exc) from None


def _damaged(path: RecordPath, what: str, exc: ValidationError) -> ReplayError:
    """The one line for a part of a flow's trace that does not read back, naming the field."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    problem = "is missing" if error["type"] == "missing" else f"is {error.get('input')!r}: {error['msg']}"
    return ReplayError(
        f"{path}: the trace is damaged: its {what} {where} {problem}; "
        "replay an intact copy, or re-record the run"
    )


def _outcomes(runs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["step_id"], r["agent"], r["attempt"], r["result"]["stop_reason"]) for r in runs]


async def replay_flow(trace: RecordPath) -> FlowReplay:
    """Re-drive the flow from the trace at `trace`; `ReplayError` when it cannot or diverges."""
    return await FlowReplayer(trace).run()
