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

A step's agent that pauses (AWAITING_APPROVAL for a call that needs approval,
AWAITING_INPUT for a tool's question) pauses the flow with it, in
AWAITING_AGENT: the flow's `approver` or `input_handler` answers it there
(the terminal's, on the command line), or else `execute()` returns a paused
result whose `pending_approval` / `pending_input` the app answers through the
flow (`approve`, `reject`, `answer`) before `resume()`. The agent then goes
on from its pause (the calls approved run, once), and the flow after it.
With a checkpoint, the paused agent's run is saved with the flow, so the
pause survives a restart.

An agent ends the whole flow early by beginning a line of its final message
with ``TASK COMPLETE`` (the step prompt tells it so): the flow then goes
straight to FINALIZING with `finished_early`.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import AbstractContextManager, aclosing, nullcontext
from typing import Any

from ..agent.approval import Approver, Decision, decide
from ..agent.awaiting_input import answer
from ..agent.base import BaseAgent
from ..agent.driven import DrivenModel
from ..agent.toolcall import ToolCallAgent
from ..errors import ArgumentError, PauseRun, WrongPhaseError, WrongTypeError, WrongValueError
from ..fsm.machine import MachineTable, StateSpec
from ..memory import Memory
from ..messages import Message, Role, ToolCall
from ..model.base import ChatModel, LLMResponse
from ..model.options import describe_model
from ..questions import Answer, AnswerAction, InputHandler, Question
from ..recording.checkpoint import Checkpointer, open_checkpoint
from ..recording.files import RecordPath
from ..recording.lease import Lease
from ..run.driver import RunDriver
from ..run.events import Transition
from ..run.result import RunResult, StopReason
from ..run.state import RunState
from .checkpoint import as_journal, flow_parts, is_journal, read_flow_checkpoint, restore_flow
from .plan import Plan, StepStatus
from .planning import PlanningTool
from .result import FlowResult, StepRun
from .review import AWAITING_PLAN_REVIEW, PlanDecision, Reviewer, with_review
from .state import FlowState
from .table import AWAITING_AGENT, FLOW_TABLE
from .trace import FlowTraceWriter

__all__ = ["TASK_COMPLETE", "PlanningFlow"]

TASK_COMPLETE = "TASK COMPLETE"
"""A line of an agent's final message starting with this ends the flow early (`finished_early`)."""

PLANNER_SYSTEM = (
    "You are a planning assistant. Create a concise, actionable plan with clear steps. "
    "Focus on key milestones rather than detailed sub-steps. Optimize for clarity and efficiency."
)
SUMMARY_SYSTEM = "You are a planning assistant. Your task is to summarize the completed plan."


class PlanningFlow(DrivenModel):
    """Plan `request` with `planner_llm`, run each step with one of `agents`, replan, summarize.

    `agents` maps a name (what a step's ``[name]`` tag says) to an agent; `executors` are the names
    steps may go to (default: all, in order), the first taking untagged steps.
    """

    table: MachineTable = FLOW_TABLE
    kind = "flow"

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
        approver: Approver | None = None,
        input_handler: InputHandler | None = None,
        name: str = "planning",
    ) -> None:
        """`max_attempts`: runs of a step before it is blocked; `max_replans`: revisions after blocked
        steps before the flow ends with `replan_limit`; `review`: wait in AWAITING_PLAN_REVIEW for a
        decision on each plan; `reviewer`: a coroutine that makes it (turns `review` on).
        `approver`, `input_handler`: what decides the calls, and answers the questions, a step's
        agent pauses for (AWAITING_AGENT); without them the flow pauses and the app answers."""
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
        self.reviewing = review or reviewer is not None
        self.reviewer = reviewer
        self.approver = approver
        self.input_handler = input_handler
        if self.reviewing:
            self.table = with_review(FLOW_TABLE)
        self._init_driven()
        self.name = name
        self.agents = dict(agents)
        self.executors = tuple(names)
        self.planner_llm = planner_llm
        self.max_replans = max_replans
        self.max_attempts = max_attempts
        self.flow_state = FlowState()
        self.planning = PlanningTool(self.executors)
        self.memory = Memory()
        """Empty: the flow holds no conversation of its own (each agent has its memory, and a
        trace's ``llm`` records hold each planner request whole)."""

    # -- what callers read ---------------------------------------------------------

    @property
    def plan(self) -> Plan | None:
        return self.flow_state.plan

    def driven_models(self) -> tuple[DrivenModel, ...]:
        """The flow's agents: each step's run is one of theirs."""
        return tuple(self.agents.values())

    @property
    def paused_agent(self) -> BaseAgent | None:
        """The agent of the step the flow waits for in AWAITING_AGENT, or None."""
        flow = self.flow_state
        step = flow.plan.step(flow.paused_step) if flow.plan and flow.paused_step is not None else None
        return self.agents[step.agent] if step is not None else None

    @property
    def pending_approval(self) -> list[ToolCall]:
        """While the flow waits for its step's agent: the agent's calls waiting for a decision."""
        agent = self.paused_agent
        return agent.pending_approval if agent is not None else []

    @property
    def pending_input(self) -> list[tuple[ToolCall, Question]]:
        """While the flow waits for its step's agent: the agent's unanswered questions, with their calls."""
        agent = self.paused_agent
        return agent.pending_input if agent is not None else []

    def trace_config(self) -> dict[str, Any]:
        """What a trace's header and a checkpoint record of the flow: its limits, review, executors,
        the planner's model, and each agent's class and `trace_config()` (options and model)."""
        config = {
            "max_replans": self.max_replans,
            "max_attempts": self.max_attempts,
            "reviewing": self.reviewing,
            "executors": list(self.executors),
            "agents": {
                name: {"agent_class": _class_name(agent), "config": agent.trace_config()}
                for name, agent in self.agents.items()
            },
            "llm": describe_model(self.planner_llm),
        }
        if self.built_by is not None:
            config["built_by"] = self.built_by
        return config

    # -- driving --------------------------------------------------------------------

    async def execute(
        self,
        request: str,
        *,
        checkpoint: RecordPath | None = None,
        trace: RecordPath | None = None,
        run_id: str | None = None,
    ) -> FlowResult:
        """Run the flow on `request` to DONE or ERROR (errors inside a phase end it in ERROR), or to a
        pause for plan review or for a step's agent (`result.paused`). `checkpoint`: a file the whole
        flow is written to after every transition, for `resume(checkpoint=...)` (see
        `agentfsm.flow.checkpoint`). `trace`: a JSON Lines trace of the flow and, tagged, of its
        agents' runs (`agentfsm.flow.trace`), which `agentfsm replay` re-drives offline. `run_id`:
        the run's id, as an agent's `run(run_id=...)`; None: a new one."""
        return self.flow_result(await self._start(request, checkpoint, trace, run_id))

    def iter(self, request: str, *, checkpoint: RecordPath | None = None) -> AsyncGenerator[Transition, None]:
        """Run the flow step by step, as an agent's `iter()`: one `Transition` of the flow per edge
        (its agents' runs happen inside EXECUTING); the flow advances between yields."""
        return self._stepped(request, checkpoint)

    async def resume(
        self, checkpoint: RecordPath | None = None, *, trace: RecordPath | None = None
    ) -> FlowResult:
        """Continue the paused flow (plan review, or its step's agent), with the decision or
        answers made meanwhile (none: it pauses again); or, given `checkpoint`, the flow saved
        there (by a process that may have been killed), from the state it was in: the flow must
        be built as the one that wrote it. A cancelled flow's checkpoint continues from the
        state it was cancelled in (see `agentfsm.flow.checkpoint`); a flow that ended otherwise
        gives back its result and runs nothing. `trace`: the paused flow's trace, appended to (the
        answers given meanwhile first); with `checkpoint`, the trace that run wrote, cut back to
        where the checkpoint stands and written on, as an agent's (`cut_for_resume`: `TraceError`
        when it cannot be, and nothing runs)."""
        opened = None
        if checkpoint is not None:
            opened = await self._opened(checkpoint)
            if trace is not None:
                await self._cut_trace(trace, opened)
        return self.flow_result(await self._continue(await self._resumed_run(checkpoint, opened), trace))

    async def resume_iter(self, checkpoint: RecordPath | None = None) -> AsyncGenerator[Transition, None]:
        """`resume`, step by step, as an agent's `resume_iter()`: one `Transition` of the flow per
        edge. (A checkpoint is read when the first edge is asked for.)"""
        async with aclosing(self._stepped_on(await self._resumed_run(checkpoint))) as steps:
            async for transition in steps:
                yield transition

    def reset(self) -> None:
        """Back to IDLE from DONE or ERROR (a logged edge), as an agent's `reset()`; the next run
        makes a new plan either way."""
        self._reset()

    async def _resumed_run(
        self, checkpoint: RecordPath | None, opened: tuple[Lease, dict[str, Any]] | None = None
    ) -> RunDriver:
        """The paused run's driver (no `checkpoint`), or a new one for the flow restored from it
        (`opened`: leased and read already), the paused runs of its agents (of the flow run it
        replaces, which is over) cancelled."""
        if checkpoint is None:
            return self._paused_run()
        if opened is None:
            opened = await self._opened(checkpoint)
        try:
            for agent in self.agents.values():
                if agent.phase is not None:  # paused in the flow run this one replaces: that run is over
                    await agent.cancel()
        except BaseException:
            opened[0].release()
            raise
        return self._restored_run(checkpoint, opened)

    async def cancel(self, *, trace: RecordPath | None = None) -> FlowResult:
        """End the paused flow in ERROR with `cancelled`, and the paused run of its step's agent
        with it; returns the flow's result. `trace`: the paused flow's trace, which the end is
        appended to."""
        agent = self.paused_agent
        result = self.flow_result(await self._cancel(trace))
        if agent is not None and agent.phase is not None:
            await agent.cancel()
        return result

    def still_waiting_for(self) -> str | None:
        """What the paused flow waits for that nobody has given and nothing will, as an agent's
        `still_waiting_for` says it: a decision on its plan (it has no `reviewer`), or what its
        step's agent waits for; None when a resume can go on."""
        if self.fsm_state == AWAITING_PLAN_REVIEW and self.flow_state.decision is None:
            if self.reviewer is None:
                return "a decision on its plan: `approve_plan()`, `edit_plan()` or `cancel_plan()`"
            return None
        agent = self.paused_agent
        return agent.still_waiting_for() if agent is not None and self.fsm_state == AWAITING_AGENT else None

    # -- the lifecycle's hooks (`DrivenModel`): the flow's checkpoint is one document ----------

    def _open_checkpoint(self, path: RecordPath) -> tuple[Lease, dict[str, Any]]:
        lease, document = open_checkpoint(path, lambda at: read_flow_checkpoint(at, resuming=True))
        if not is_journal(path):  # a document of schema 3 or before: a journal from now on
            try:
                as_journal(path, document, _class_name(self))
            except BaseException:
                lease.release()
                raise
        return lease, document

    def _restore(self, data: dict[str, Any]) -> None:
        restore_flow(self, data)

    def _checkpointer(
        self, path: RecordPath, lease: Lease | None, saved: dict[str, Any] | None
    ) -> Callable[[], None]:
        return Checkpointer(path, self, lease=lease).close

    def checkpoint_parts(self) -> dict[str, Any]:
        """The flow's plan and its agents (`flow_parts`), whole in each record of its journal."""
        return flow_parts(self)

    def _trace(self, path: RecordPath | None, *, append: bool) -> AbstractContextManager[object]:
        return nullcontext() if path is None else FlowTraceWriter(path, self, append=append)

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

    # -- a step's agent paused (while the flow waits in AWAITING_AGENT) ---------------------

    def approve(self, call_id: str | None = None, *, arguments: str | dict[str, Any] | None = None) -> None:
        """Approve the paused agent's call `call_id` (None: every one waiting), then `resume()`."""
        self._waiting_agent("approve").approve(call_id, arguments=arguments)

    def reject(self, call_id: str | None = None, reason: str | None = None) -> None:
        """Reject the paused agent's call `call_id` (None: every one waiting); its model reads `reason`."""
        self._waiting_agent("reject").reject(call_id, reason)

    def answer(
        self,
        call_id: str,
        content: dict[str, Any] | None = None,
        *,
        action: AnswerAction = "accept",
        key: str | None = None,
    ) -> None:
        """Answer the paused agent's question (as `ToolCallAgent.answer`), then `resume()`."""
        self._waiting_agent("answer").answer(call_id, content, action=action, key=key)

    def _waiting_agent(self, what: str, *, by_handler: bool = False) -> ToolCallAgent:
        """The paused step's agent, while the app may answer it (the flow paused), or `by_handler`
        (the flow's approver or input handler, inside AWAITING_AGENT's action)."""
        agent = self.paused_agent
        running = self._run is not None and self._run.active and not by_handler
        if self.fsm_state != AWAITING_AGENT or agent is None or running:
            raise WrongPhaseError(
                f"`{what}` answers a step's agent only while flow {self.name!r} waits in {AWAITING_AGENT} "
                f"(it is {self.fsm_state}); call it on the paused result"
            )
        assert isinstance(agent, ToolCallAgent)  # only tool-calling agents pause for a person
        return agent

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
            pending_approval=tuple(self.pending_approval) if result.paused else (),
            pending_input=tuple(self.pending_input) if result.paused else (),
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
        """Run the next step with its agent (or let the paused one go on), and mark it from the
        agent's `RunResult`; an agent that paused leaves the step in progress (AWAITING_AGENT)."""
        flow, run = self.flow_state, self.run_state
        assert flow.plan is not None
        await self.recorded()  # the steps done so far are checkpointed before this one's agent acts
        if flow.paused_step is not None:  # answered in AWAITING_AGENT: the agent goes on from its pause
            step = flow.plan.step(flow.paused_step)
            assert step is not None
            flow.paused_step = None
            agent = self.agents[step.agent]
            result = await agent.resume()
        else:
            step = flow.plan.next_step
            assert step is not None  # the edges into EXECUTING make sure of it
            step.status, step.attempts = StepStatus.IN_PROGRESS, step.attempts + 1
            flow.finished_early = False
            run.step += 1
            agent = self.agents[step.agent]
            if agent.phase is not None:  # paused in a flow that ended meanwhile: that run is over
                await agent.cancel()
            prompt = (
                f"CURRENT PLAN STATUS:\n{flow.plan.render()}\n\nYOUR CURRENT TASK:\n"
                f'You are now working on step {step.id}: "{step.text}"\n\n'
                "Please only execute this current step using the appropriate tools. When you're done, "
                "provide a summary of what you accomplished. If this step completes the whole task so "
                f"that no other step is needed, begin your final message with {TASK_COMPLETE}."
            )
            result = await agent.run(prompt)
        if result.paused:  # it waits for a person: so does the flow
            flow.paused_step = step.id
            return
        run.usage.add(result.usage)
        flow.runs.append(StepRun(step_id=step.id, agent=step.agent, attempt=step.attempts, result=result))
        said = _said(agent, agent.run_state.request or "")
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

    async def await_agent(self) -> None:
        """Answer the paused step's agent with the flow's `approver` or `input_handler`; with none
        for what it waits for, pause (`execute()` returns the paused result, the app answers)."""
        agent = self.paused_agent
        assert agent is not None
        calls, questions = agent.pending_approval, agent.pending_input
        if calls and self.approver is not None:
            decisions = list(await self.approver(calls))
            if len(decisions) != len(calls) or not all(isinstance(d, Decision) for d in decisions):
                raise WrongTypeError(
                    f"the approver must return one Decision per call ({len(calls)}), in order; "
                    f"got {decisions!r}"
                )
            waiting = self._waiting_agent("approve", by_handler=True)
            for call, decision in zip(calls, decisions, strict=True):  # traced now: not paused edits
                decide(waiting, call.id, decision, by_approver=True)
        elif questions and self.input_handler is not None:
            waiting = self._waiting_agent("answer", by_handler=True)
            for call, question in questions:
                reply = await self.input_handler(call, question)
                if not isinstance(reply, Answer):
                    raise WrongTypeError(
                        f"the input handler must return an Answer for {question.key!r} of {call.name}; "
                        f"got {reply!r}"
                    )
                answer(waiting, call.id, reply, key=question.key, by_handler=True)
        elif calls:
            raise PauseRun(StopReason.AWAITING_APPROVAL.value)
        elif questions:
            raise PauseRun(StopReason.AWAITING_INPUT.value)

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
        """One planner call (an `LLMCall` event, a trace's ``llm`` record); its usage counts."""
        declared = [self.planning.to_param()] if tools else []
        system_msgs = [Message.system_message(system)]
        reply = await self.ask_model(
            self.planner_llm, messages, system_msgs, declared, "auto" if tools else "none"
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
            # a flow restored from a checkpoint (a resume, a fork) holds its plan in its state only
            self.planning.plans[flow.plan.plan_id] = flow.plan
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
        """The plan's id: unique per flow run (its run id), whatever id the planner proposed; once
        there is a plan, its own (a fork of a run goes on with the plan its parent made)."""
        plan = self.flow_state.plan
        return plan.plan_id if plan is not None else f"plan_{self.run_state.run_id}"

    # -- what the driver asks of the flow (`agentfsm.run.view.Driven`) ------------------

    def open_run(self, request: str) -> None:
        run_id, self._next_run_id = self._next_run_id or os.urandom(6).hex(), None
        self.run_state = RunState(state=self.run_state.state, run_id=run_id, request=request)
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


def _class_name(agent: object) -> str:
    cls = type(agent)
    return f"{cls.__module__}.{cls.__qualname__}"


def _said(agent: BaseAgent, prompt: str) -> list[str]:
    """What the agent wrote (assistant contents) in its run on `prompt`, in order."""
    said: list[str] = []
    for message in reversed(agent.memory.messages):
        if message.role is Role.USER and message.content == prompt:
            break
        if message.role is Role.ASSISTANT and isinstance(message.content, str) and message.content.strip():
            said.append(message.content.strip())
    return said[::-1]
