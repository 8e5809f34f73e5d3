"""`ToolRunner`: the tool-call path of a tool-calling agent, one object the agent owns.

ACTING hands it the calls of the model's reply that are to run (`run_calls`); it runs them one
after another, or together with `parallel_tool_calls` (the observations still in call order),
each at most once a step (`run_once`, the exactly-once bookkeeping), and runs each call's tool
(`execute`). Every failure of a tool is an observation for the model, never a crash
(OpenManus's wording for each kind).

The features that change what a call does attach here, each through the unit that owns it:

- approvals (`agentfsm.agent.approval.verdict`): a call that needs a decision and was not
  approved is answered with its rejection instead of running;
- input (`agentfsm.agent.awaiting_input.asked`): a call that asked a person something waits in
  AWAITING_INPUT for the answers, and runs again with them, up to `max_input_rounds`;
- structured output (`agentfsm.agent.output.final_result`): a `final_result` call is validated
  here, its object kept for the run's result.

A runner that records or replays calls is a subclass that changes `execute` (a durable run's
records each call as a step of its workflow; a replay answers with the trace's observations),
handed to the agent as `agent.tool_runner`.
"""

from __future__ import annotations

import functools
import json
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from ..errors import ArgumentError, DetachedError
from ..messages import ToolCall
from ..model.base import Usage
from ..questions import Question
from ..run.events import AgentEvent, ToolCallCompleted, ToolCallStarted
from ..run.state import Observation
from ..toolbox.call_context import ToolCallContext, executing
from ..toolbox.tool import ToolCollection, ToolResult
from .approval import verdict
from .awaiting_input import asked
from .output import FinalResult, final_result
from .turn import AgentRunState

__all__ = ["INTERRUPTED_CALL", "Calling", "ToolRunner"]

INTERRUPTED_CALL = (
    "Error: the run was interrupted while `{name}` ran, and it was not run again: "
    "it may or may not have taken effect. Check before calling it again."
)


class Calling(Protocol):
    """What the tool-call path reads of its agent (`ToolCallAgent` is one)."""

    name: str
    run_state: AgentRunState
    tools: ToolCollection

    @property
    def deps(self) -> Any: ...

    @property
    def listening(self) -> bool: ...

    @property
    def parallel_tool_calls(self) -> bool: ...

    @property
    def max_observe(self) -> int | None: ...

    @property
    def max_input_rounds(self) -> int: ...

    def needs_approval(self, call: ToolCall) -> bool: ...

    def emit(self, record: AgentEvent) -> None: ...

    async def recorded(self) -> None: ...

    async def flush_listeners(self) -> None: ...


class ToolRunner:
    """The calls of `agent`'s replies, run (see the module's docstring)."""

    def __init__(self, agent: Calling) -> None:
        self._agent = weakref.ref(agent)
        """The agent owns its runner: a weak reference back, so that an agent nobody holds any
        more is freed at once, with its memory and its run, rather than by the garbage collector."""

    @property
    def agent(self) -> Calling:
        """The agent whose calls this runs."""
        agent = self._agent()
        if agent is None:
            raise DetachedError(
                "the agent of this tool runner was freed; keep the agent while its runner runs calls"
            )
        return agent

    async def run_calls(self, calls: Sequence[ToolCall]) -> list[Observation]:
        """Run `calls` (one after another, or together with `parallel_tool_calls`); their
        observations in call order."""
        if not self.agent.parallel_tool_calls:
            done = []  # a loop: a list comprehension with `await` in it is a coroutine of its own
            for call in calls:
                done.append(await self.run_once(call))
            return done
        import asyncio  # loaded by the running loop already; `import agentfsm` does not load it

        outcomes = await asyncio.gather(*(_exits_held(self.run_once, call) for call in calls))
        exits = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
        if exits:
            raise exits[0]  # in the run's own task, where the driver ends the run before it goes on up
        return [outcome for outcome in outcomes if isinstance(outcome, Observation)]

    async def run_once(self, call: ToolCall) -> Observation:
        """Execute `call` unless this step already did: the record that makes ACTING resumable.

        The start and the completion of each call are events (`ToolCallStarted`,
        `ToolCallCompleted`) a checkpointer writes (the completion
        before its result can enter memory), so a resumed ACTING returns the recorded
        observation of a completed call instead of running it again. A call that
        started but never completed (the process died while it ran) is *not* run
        again: its effect may or may not have happened, and running it twice is the
        worse mistake for a tool with side effects. The model is told so in an error
        observation. Calls run at most once; exactly once, except for a kill between
        a call's start and its completion record. A tool marked `idempotent` (and an
        unknown one, which runs nothing) is run again instead: at least once.
        """
        agent = self.agent
        run = agent.run_state
        turn = run.turn
        recorded = turn.completed_calls.get(call.id)
        if recorded is not None:
            return recorded
        refused = verdict(turn, call, agent.needs_approval(call))
        if refused is not None:
            turn.completed_calls[call.id] = refused
            return refused
        tool = agent.tools.get(call.name)
        started = call.id in turn.started_calls
        if started and tool is not None and not tool.idempotent:
            observation = Observation(
                call=call, content=INTERRUPTED_CALL.format(name=call.name), is_error=True
            )
        else:
            if not started:
                turn.started_calls.append(call.id)
                # Nothing awaits before this event: the calls of a parallel reply emit it in call
                # order (a durable run draws their steps' places from it).
                if agent.listening:
                    agent.emit(ToolCallStarted(agent=agent.name, run_id=run.run_id, step=run.step, call=call))
                    await agent.recorded()  # its start is durable (fsynced) before it runs, or it fails
            observation = await self.execute(call)
            if observation.input_required is not None:
                observation = asked(turn, agent.tools, call, observation, agent.max_input_rounds)
        if observation.input_required is None:
            turn.input_requests.pop(call.id, None)
            turn.answers.pop(call.id, None)
            turn.completed_calls[call.id] = observation
        if agent.listening:
            agent.emit(
                ToolCallCompleted(agent=agent.name, run_id=run.run_id, step=run.step, observation=observation)
            )
            await agent.flush_listeners()  # its completion is durable before its result can enter memory
        return observation

    async def execute(self, call: ToolCall) -> Observation:
        """Run `call`'s tool; every failure comes back as an error observation, never an exception."""
        agent = self.agent
        started = time.perf_counter()
        name = call.name
        tool = agent.tools.get(name)
        image: str | None = None
        usage: Usage | None = None
        if tool is None:
            content, is_error = f"Error: Unknown tool '{name}'", True
        elif isinstance(arguments := _arguments(call), str):
            content, is_error = arguments, True
        else:
            run = agent.run_state
            if isinstance(tool, FinalResult):
                return final_result(run, call, tool, arguments, started)
            context = functools.partial(
                ToolCallContext, agent.name, run.run_id, run.step, call.id, name, agent.deps
            )
            asking = run.turn.input_requests.get(call.id)  # answered in AWAITING_INPUT
            try:
                if asking is not None:
                    answers = run.turn.answers.get(call.id, {})
                    result = await executing(context, tool.answered(asking, answers, **arguments))
                else:
                    result = await executing(context, tool(**arguments))
            except ArgumentError as exc:
                content, is_error = f"Error: Invalid arguments for {name}: {exc}", True
            except Exception as exc:  # the tool's own failure is the model's observation
                content, is_error = f"Error: ⚠️ Tool '{name}' encountered a problem: {exc}", True
            else:
                content, image, is_error = _observed(name, result)
                usage = result.usage
                if result.input_required is not None:
                    return Observation(
                        call=call,
                        content=_asking(name, result.input_required.questions),
                        input_required=result.input_required,
                        duration_s=time.perf_counter() - started,
                    )
        limit = agent.max_observe
        if limit is not None and len(content) > limit:
            cut = len(content) - limit
            content = f"{content[:limit]}\n... [truncated {cut} of {len(content)} characters]"
        return Observation(
            call=call,
            content=content,
            base64_image=image,
            is_error=is_error,
            duration_s=time.perf_counter() - started,
            usage=usage,
        )


async def _exits_held(
    run_once: Callable[[ToolCall], Awaitable[Observation]], call: ToolCall
) -> Observation | BaseException:
    """`run_once(call)`'s observation, or the KeyboardInterrupt or SystemExit it raised.

    asyncio re-raises those two out of the event loop itself when a task raises them, past the
    task that awaits it: a parallel call that raised one would leave the run in ACTING. Held
    here, the caller raises it in the run's own task, once the other calls are done. The call's
    coroutine is made here, so a task cancelled before it started leaves none unawaited.
    """
    try:
        return await run_once(call)
    except (KeyboardInterrupt, SystemExit) as exc:
        return exc


def _arguments(call: ToolCall) -> dict[str, Any] | str:
    """The call's arguments as a dict, or the error observation saying why they are not one."""
    try:
        arguments = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return f"Error: Error parsing arguments for {call.name}: Invalid JSON format"
    except RecursionError:  # the decoder recurses per level: a model's runaway nesting is its mistake
        return (
            f"Error: Error parsing arguments for {call.name}: nested too deeply to parse; "
            "send a flatter JSON object"
        )
    if not isinstance(arguments, dict):
        kind = type(arguments).__name__
        return f"Error: Error parsing arguments for {call.name}: expected a JSON object, got {kind}"
    return arguments


def _asking(name: str, questions: Sequence[Question]) -> str:
    """What a trace shows for a call that asked for input (the model never reads it)."""
    asked_for = "; ".join(q.message for q in questions)
    return f"`{name}` asks for input: {asked_for}"


def _observed(name: str, result: ToolResult) -> tuple[str, str | None, bool]:
    """What the model reads of a tool's result: (content, image, is_error)."""
    if result.error:
        return f"Error: {result.error}", result.base64_image, True
    try:
        text = str(result)
    except Exception as exc:  # the tool's output has no text (its __str__ raises, or recurses too deep)
        problem = f"its result cannot be shown as text ({type(exc).__name__}: {exc})"
        return f"Error: ⚠️ Tool '{name}' encountered a problem: {problem}", None, True
    if not text:
        return f"Cmd `{name}` completed with no output", result.base64_image, False
    return f"Observed output of cmd `{name}` executed:\n{text}", result.base64_image, False
