"""`PlanningFlow`: a task planned by a model, each step run by the agent its tag names, replanned when
a step blocks, summed up at the end.

The flow is a second machine (`FLOW_TABLE`) run by the same `RunDriver` as
agents: it satisfies the driver's `Driven` protocol, so its transitions are
fired, logged with their guards and delivered to listeners exactly as an
agent's. A step's outcome is read from its agent's `RunResult`, never from
the agent's state (upstream checks ``executor.state == FINISHED``, which
never holds once the agent is reset to IDLE): `terminated` and
`final_answer` complete the step; any other reason fails the attempt; a step
fails `max_attempts` times is blocked, and the flow replans, at most
`max_replans` times.

With `review` on (or a `reviewer`), the flow waits for a decision on each plan, made or revised,
in AWAITING_PLAN_REVIEW (`agentfsm.flow.review`).

An agent ends the whole flow early by beginning a line of its final message
with ``TASK COMPLETE`` (the step prompt tells it so): the flow then goes
straight to FINALIZING with `finished_early`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from ..agent.base import BaseAgent
from ..agent.event_source import EventSource
from ..errors import AgentBusyError, ArgumentError, PauseRun, WrongPhaseError, WrongTypeError, WrongValueError
from ..fsm.machine import MachineTable, StateSpec
from ..memory import Memory
from ..messages import Message, Role
from ..model.base import ChatModel, LLMResponse, ToolChoice
from ..model.options import describe_model
from ..recording.files import RecordPath
from ..recording.lease import Lease
from ..recording.trace import TraceWriter
from ..run.driver import RunDriver
from ..run.events import Edit, LLMCall
from ..run.observers import observers_of
from ..run.result import AgentState, RunResult, StopReason
from ..run.state import RunState
from .checkpoint import FlowCheckpointer, read_flow_checkpoint, restore_flow
from .plan import Plan, StepStatus
from .planning import PlanningTool
from .result import FlowResult, StepRun
from .review import AWAITING_PLAN_REVIEW, PlanDecision, Reviewer, with_review
from .state import FlowState
from .table import FLOW_TABLE, PLANNING_PHASES

__all__ = ["TASK_COMPLETE", "PlanningFlow"]

TASK_COMPLETE = "TASK COMPLETE"
"""A line of an agent's final message starting with this ends the flow early (`finished_early`)."""

PLANNER_SYSTEM = (
    "You are a planning assistant. Create a concise, actionable plan with clear steps. "
    "Focus on key milestones rather than detailed sub-steps. Optimize for clarity and efficiency."
)
SUMMARY_SYSTEM = "You are a planning assistant. Your task is to summarize the completed plan."


class PlanningFlow(EventSource):
    """Plan `request` with `planner_llm`, run each step with one of `agents`, replan, summarize.

    `agents` maps a name (what a step's ``[name]`` tag says) to an agent; `executors` are the names
    steps may go to (default: all, in order), the first taking untagged steps.
    """

    table: MachineTable = FLOW_TABLE
    paused_edits: tuple[Edit, ...] = ()
    """A flow makes no edits (a trace writer reads this of whatever it records)."""
    planning_phases: frozenset[str] = PLANNING_PHASES
    """The phases that make or revise the plan (OpenTelemetry's `plan` spans; see `agentfsm.telemetry`)."""

    def __init__(
        self,
        *,
        agents: Mapping[str, BaseAgent],
        planner_llm: ChatModel,
        executors: Sequence[str] | None = None,
        max_replans: int = 3,
        max_attempts: int = 2,
        review: bool = False,
        reviewer: Reviewer | None = None,
        name: str = "planning",
    ) -> None:
        """`max_attempts`: runs of a step before it is blocked; `max_replans`: revisions after blocked
        steps before the flow ends with `replan_limit`; `review`: wait in AWAITING_PLAN_REVIEW for a
        decision on each plan; `reviewer`: a coroutine that makes it (turns `review` on)."""
        if not agents:
            raise WrongValueError("`agents` is empty; give PlanningFlow at least one agent, by name")
        names = list(executors) if executors is not None else list(agents)
        unknown = [n for n in names if n not in agents]
        if unknown or not names:
            raise WrongValueError(
                f"`executors` {names!r} must name agents of `agents` ({sorted(agents)!r}), at least one"
            )
        if max_replans < 0 or max_attempts < 1:
            raise WrongValueError(
                f"`max_replans` ({max_replans!r}) must be >= 0 and `max_attempts` ({max_attempts!r}) >= 1"
            )
        EventSource.__init__(self)
        self.reviewing = review or reviewer is not None
        self.reviewer = reviewer
        if self.reviewing:
            self.table = with_review(FLOW_TABLE)
        self.name = name
        self.agents = dict(agents)
        self.executors = tuple(names)
        self.planner_llm = planner_llm
        self.max_replans = max_replans
        self.max_attempts = max_attempts
        self.run_state = RunState(state=self.table.initial)
        self.flow_state = FlowState()
        self.planning = PlanningTool(self.executors)
        self.memory = Memory()
        """Empty: the flow holds no conversation of its own (each agent has its memory, and a
        trace's ``llm`` records hold each planner request whole)."""
        self.last_result: RunResult | None = None
        self._run: RunDriver | None = None

    # -- what callers read ---------------------------------------------------------

    @property
    def fsm_state(self) -> str:
        return self.run_state.state

    @fsm_state.setter
    def fsm_state(self, value: str) -> None:
        self.run_state.state = value

    @property
    def state(self) -> AgentState:
        return AgentState.in_table(self.table, self.run_state.state)

    @property
    def plan(self) -> Plan | None:
        return self.flow_state.plan

    def trace_config(self) -> dict[str, Any]:
        """What a trace's header records of the flow: its limits, review, executors and models."""
        return {
            "max_replans": self.max_replans,
            "max_attempts": self.max_attempts,
            "reviewing": self.reviewing,
            "executors": list(self.executors),
            "agents": {name: type(agent).__qualname__ for name, agent in self.agents.items()},
            "llm": describe_model(self.planner_llm),
        }

    # -- driving --------------------------------------------------------------------

    async def execute(
        self, request: str, *, checkpoint: RecordPath | None = None, trace: RecordPath | None = None
    ) -> FlowResult:
        """Run the flow on `request` to DONE or ERROR (errors inside a phase end it in ERROR), or to a
        pause for plan review (`result.paused`). `checkpoint`: a file the whole flow is written to
        after every transition, for `resume(checkpoint=...)` (see `agentfsm.flow.checkpoint`).
        `trace`: a JSON Lines trace of the flow (its transitions, the planner's calls, its result;
        each agent's run is in the flow's `runs`), as `agentfsm.recording.trace` writes an agent's."""
        if self._run is not None and self._run.active:
            raise AgentBusyError(f"flow {self.name!r} is already running; await it, or use another flow")
        if self.state is AgentState.RUNNING:
            raise AgentBusyError(
                f"flow {self.name!r} waits for a plan review; decide and `resume()` it, or `cancel_plan()`"
            )
        self._run = self._new_run(checkpoint)
        with self._trace(trace):
            result = await self._run.run(request)
        return self.flow_result(result)

    def _trace(self, path: RecordPath | None) -> AbstractContextManager[object]:
        return nullcontext() if path is None else TraceWriter(path, self)

    async def resume(self, checkpoint: RecordPath | None = None) -> FlowResult:
        """Continue the flow paused for plan review, with the decision made meanwhile (none: it
        pauses again); or, given `checkpoint`, the flow saved there (by a process that may have
        been killed), from the state it was in: the flow must be built as the one that wrote it."""
        if self._run is not None and self._run.active:
            raise AgentBusyError(f"flow {self.name!r} is running; await it before resuming")
        if checkpoint is not None:
            lease = Lease.acquire(checkpoint)
            try:
                restore_flow(self, read_flow_checkpoint(checkpoint))
                self._run = self._new_run(checkpoint, lease)
            except BaseException:
                lease.release()
                raise
            self._run.restarted()
        elif self._run is None or self.fsm_state != AWAITING_PLAN_REVIEW:
            raise AgentBusyError(
                f"flow {self.name!r} has no paused run to resume (it is {self.fsm_state}); "
                "pass the checkpoint of the flow to continue"
            )
        return self.flow_result(await self._run.run(None))

    def _new_run(self, checkpoint: RecordPath | None, lease: Lease | None = None) -> RunDriver:
        closers: tuple[Callable[[], None], ...] = ()
        if checkpoint is not None:
            closers = (FlowCheckpointer(checkpoint, self, lease=lease).close,)
        if self._run is not None:
            self._run.release()
        return RunDriver(self, closers=(*closers, *observers_of(self)))

    # -- plan review (while paused in AWAITING_PLAN_REVIEW) ---------------------------

    def approve_plan(self) -> None:
        """Run the plan as it is (then `resume()`)."""
        self._decide(PlanDecision(kind="approve"))

    def edit_plan(self, steps: Sequence[str]) -> None:
        """Run these steps instead of the ones not yet completed (each with its ``[agent]`` tag)."""
        if isinstance(steps, str) or not all(isinstance(s, str) for s in steps):
            raise WrongTypeError(f"`steps` must be a list of step texts, got {steps!r}")
        self._decide(PlanDecision(kind="edit", steps=tuple(steps)))

    def cancel_plan(self) -> None:
        """End the flow without running the plan (stop reason `plan_cancelled`; then `resume()`)."""
        self._decide(PlanDecision(kind="cancel"))

    def _decide(self, decision: PlanDecision) -> None:
        if self.fsm_state != AWAITING_PLAN_REVIEW or (self._run is not None and self._run.active):
            raise WrongPhaseError(
                f"a plan decision is taken only while flow {self.name!r} waits in {AWAITING_PLAN_REVIEW} "
                f"(it is {self.fsm_state}); pass `review=True` and decide on the paused result"
            )
        self.flow_state.decision = decision

    def flow_result(self, result: RunResult) -> FlowResult:
        """The `FlowResult` of the run that ended with `result`."""
        flow = self.flow_state
        return FlowResult(
            run_id=result.run_id,
            state=result.state,
            stop_reason=result.stop_reason,
            plan=flow.plan,
            runs=tuple(flow.runs),
            summary=flow.summary,
            error=result.error,
            replans=flow.replans,
            usage=result.usage,
        )

    # -- the phases -------------------------------------------------------------------

    async def make_plan(self) -> None:
        """Ask the planner for a `planning` create call; twice, then a fallback plan of one step."""
        run = self.run_state
        assert run.request is not None
        ask = (
            f"Create a reasonable plan with clear steps to accomplish the task: {run.request}\n\n"
            f"Agents that can do steps: {', '.join(self.executors)}. Start each step with the name of "
            f"the agent that should do it, in brackets (e.g. [{self.executors[0]}]). Call the `planning` "
            "tool with command create."
        )
        messages = [Message.user_message(ask)]
        problem = ""
        for _ in range(2):
            reply = await self._ask(messages, PLANNER_SYSTEM, tools=True)
            problem = await self._apply(reply, "create")
            if not problem:
                return
            messages.append(
                Message.user_message(
                    f"That gave no usable plan: {problem}. Call `planning` with command create."
                )
            )
        plan = Plan(plan_id=self._plan_id, title=f"Fallback plan for: {run.request[:80]}")
        plan.add_steps([run.request], self.executors)
        plan.steps[0].notes = f"fallback: the planner gave no usable plan twice ({problem})"
        self.planning.plans[plan.plan_id] = plan
        self.planning.active = plan.plan_id
        self.flow_state.plan = plan

    async def execute_step(self) -> None:
        """Run the next step with its agent, and mark it from the agent's `RunResult`."""
        flow, run = self.flow_state, self.run_state
        assert flow.plan is not None
        step = flow.plan.next_step
        assert step is not None  # the edges into EXECUTING make sure of it
        step.status, step.attempts = StepStatus.IN_PROGRESS, step.attempts + 1
        flow.finished_early = False
        run.step += 1
        agent = self.agents[step.agent]
        prompt = (
            f"CURRENT PLAN STATUS:\n{flow.plan.render()}\n\nYOUR CURRENT TASK:\n"
            f'You are now working on step {step.id}: "{step.text}"\n\n'
            "Please only execute this current step using the appropriate tools. When you're done, "
            "provide a summary of what you accomplished. If this step completes the whole task so that "
            f"no other step is needed, begin your final message with {TASK_COMPLETE}."
        )
        result = await agent.run(prompt)
        if result.paused:  # a step's agent waits for a person the flow cannot ask: that attempt fails
            result = await agent.cancel()
        run.usage.add(result.usage)
        flow.runs.append(StepRun(step_id=step.id, agent=step.agent, attempt=step.attempts, result=result))
        said = _said(agent, prompt)
        if result.ok:
            step.status = StepStatus.COMPLETED
            step.notes = (said[-1] if said else result.output) or ""
            flow.finished_early = any(
                line.strip().upper().startswith(TASK_COMPLETE) for text in said for line in text.splitlines()
            )
            return
        why = result.error or result.output or ""
        step.notes = f"attempt {step.attempts} ended {result.stop_reason}" + (f": {why}" if why else "")
        if step.attempts >= self.max_attempts:
            step.status, flow.blocked = StepStatus.BLOCKED, step.id
        else:
            step.status = StepStatus.NOT_STARTED

    async def revise_plan(self) -> None:
        """Ask the planner for the steps still to do; the completed ones stay, with their notes.

        No usable revision leaves the plan as it is, the blocked step given another round of
        attempts: the replan bound still ends the flow if it keeps failing."""
        flow = self.flow_state
        assert flow.plan is not None and flow.blocked is not None
        blocked = flow.plan.step(flow.blocked)
        assert blocked is not None
        flow.blocked, flow.decision = None, None  # the revision gets a review of its own
        ask = (
            f"{flow.plan.render()}\n\nStep {blocked.id} is blocked: {blocked.notes}\n"
            "Revise the plan: call the `planning` tool with command update and `steps`: only the steps "
            "still to do, each starting with its agent's [name] tag (agents: "
            f"{', '.join(self.executors)}). Completed steps are kept with their results. Send an empty "
            "list of steps if nothing more is needed."
        )
        reply = await self._ask([Message.user_message(ask)], PLANNER_SYSTEM, tools=True)
        if await self._apply(reply, "update"):
            blocked.status, blocked.attempts = StepStatus.NOT_STARTED, 0
            blocked.notes += "; the planner gave no usable revision, so it is tried again"

    async def review_plan(self) -> None:
        """Apply the decision on the plan: the one made while paused, else the `reviewer`'s; with
        neither, pause (`execute()` returns the paused result)."""
        flow = self.flow_state
        assert flow.plan is not None
        decision = flow.decision
        if decision is None and self.reviewer is not None:
            decision = flow.decision = await self.reviewer(flow.plan)
        if decision is None:
            raise PauseRun(AWAITING_PLAN_REVIEW.lower())
        if decision.kind == "edit":
            flow.plan.revise(decision.steps, self.executors)

    async def summarize(self) -> None:
        """The planner's summary of the plan and its outcome (the plan itself if it says nothing)."""
        flow, run = self.flow_state, self.run_state
        plan = flow.plan.render() if flow.plan is not None else "(no plan)"
        ask = (
            f"The flow ended ({run.stop_reason}). The plan:\n{plan}\n\n"
            "Please provide a summary of what was accomplished and any final thoughts."
        )
        reply = await self._ask([Message.user_message(ask)], SUMMARY_SYSTEM, tools=False)
        flow.summary = run.output = reply.content or plan

    # -- the planner --------------------------------------------------------------------

    async def _ask(self, messages: list[Message], system: str, *, tools: bool) -> LLMResponse:
        """One planner call; an `LLMCall` event for it (a trace's ``llm`` record) when someone listens."""
        system_msgs = [Message.system_message(system)]
        declared = [self.planning.to_param()] if tools else []
        choice: ToolChoice = "auto" if tools else "none"
        started = time.perf_counter()
        reply: LLMResponse | None = None
        error: Exception | None = None
        try:
            reply = await self.planner_llm.ask_tool(
                messages, system_msgs=system_msgs, tools=declared, tool_choice=choice
            )
        except Exception as exc:
            error = exc
            raise
        finally:
            if self.listening:
                run = self.run_state
                self.emit(
                    LLMCall(
                        agent=self.name,
                        run_id=run.run_id,
                        step=run.step,
                        messages=tuple(messages),
                        system_msgs=tuple(system_msgs),
                        tools=tuple(declared),
                        tool_choice=choice,
                        reply=reply,
                        error_type=type(error).__name__ if error is not None else None,
                        error=str(error) if error is not None else None,
                        duration_s=time.perf_counter() - started,
                    )
                )
        self.run_state.usage.add(reply.usage)
        return reply

    async def _apply(self, reply: LLMResponse, command: str) -> str:
        """Run the reply's first `planning` call as `command` on the flow's plan; what was wrong, or ""."""
        call = next((c for c in reply.tool_calls if c.name == self.planning.name), None)
        if call is None:
            return "the reply called no `planning` tool"
        try:
            arguments: Any = json.loads(call.arguments or "{}")
        except json.JSONDecodeError:
            return "the `planning` call's arguments are not JSON"
        if not isinstance(arguments, dict):
            return "the `planning` call's arguments are not a JSON object"
        arguments.update(command=command, plan_id=self._plan_id)
        flow = self.flow_state
        if command == "update":
            if not isinstance(arguments.get("steps"), list):
                return "`steps` is missing: give the list of steps still to do"
            assert flow.plan is not None
            kept = flow.plan.completed
            done = {s.text for s in kept}
            fresh = [s for s in arguments["steps"] if not isinstance(s, str) or s.strip() not in done]
            arguments["steps"] = [s.tagged for s in kept] + fresh
        try:
            result = await self.planning(**arguments)
        except ArgumentError as exc:
            return f"the `planning` call's arguments are invalid ({exc})"
        if result.error:
            return result.error
        flow.plan = self.planning.plans[self._plan_id]
        return ""

    @property
    def _plan_id(self) -> str:
        """The plan's id: unique per flow run (its run id), whatever id the planner proposed."""
        return f"plan_{self.run_state.run_id}"

    # -- what the driver asks of the flow (`agentfsm.run.view.Driven`) ------------------

    def open_run(self, request: str) -> None:
        self.run_state = RunState(state=self.run_state.state, run_id=os.urandom(6).hex(), request=request)
        self.flow_state = FlowState()
        self.planning = PlanningTool(self.executors)

    def interrupt(self) -> None:
        """Nothing is left open: each agent's run closed its own calls when it ended."""

    def run_result(self, spec: StateSpec, paused: StopReason | str | None) -> RunResult:
        run = self.run_state
        return RunResult(
            run_id=run.run_id,
            state=self.state,
            stop_reason=paused or run.stop_reason or StopReason.ERROR,
            steps=run.step,
            output=run.output,
            error=run.error,
            usage=run.usage.copy(),
        )

    async def on_run_end(self, result: RunResult) -> None:
        """Nothing to release: the agents keep what they hold between runs, as they do alone."""


def _said(agent: BaseAgent, prompt: str) -> list[str]:
    """What the agent wrote (assistant contents) in its run on `prompt`, in order."""
    said: list[str] = []
    for message in reversed(agent.memory.messages):
        if message.role is Role.USER and message.content == prompt:
            break
        if message.role is Role.ASSISTANT and isinstance(message.content, str) and message.content.strip():
            said.append(message.content.strip())
    return said[::-1]
