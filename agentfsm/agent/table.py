"""The agent's machine, declared once: the states, the named guards and the edges.

This table *is* the specification (SPEC.md, "The machine"): the engine fires
its triggers, the diagram renderer draws it, the docs print it. Guards read
the run's state (`agent.run_state`, an `AgentRunState`: the run and its
step's `turn`) and a few settings of the agent; they never do I/O.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

from ..fsm.machine import Edge, Effect, Guard, MachineTable, Payload, StateSpec
from ..run.result import AgentState, StopReason
from .turn import Turn

__all__ = [
    "AGENT_TABLE",
    "FINAL_ANSWER",
    "HAS_TOOL_CALLS",
    "MAX_STEPS",
    "STUCK",
    "TERMINATED",
    "TOKEN_LIMIT",
    "TOOL_CALLS_REQUIRED",
]

TOOL_CALLS_REQUIRED_MESSAGE = "Tool calls required but none provided"

# -- guards ------------------------------------------------------------------

TOKEN_LIMIT = Guard(
    "token_limit",
    lambda agent: agent.run_state.turn.token_limit is not None,
    "the request is over the model's input window, the provider reported a "
    "context-window error, or the run's token budget is spent",
)
HAS_TOOL_CALLS = Guard(
    "has_tool_calls", lambda agent: bool(agent.run_state.turn.pending_calls), "the reply has tool calls"
)
FINAL_ANSWER = Guard(
    "final_answer",
    lambda agent: bool(
        agent.finish_on_answer
        and agent.run_state.turn.reply is not None
        and agent.run_state.turn.reply.content
        and agent.run_state.missed_tool_calls == 0
    ),
    "the reply has content and no tool calls, finish_on_answer is on, and tool calls are not required",
)
TOOL_CALLS_REQUIRED = Guard(
    "tool_calls_required",
    lambda agent: agent.run_state.missed_tool_calls >= 2,
    "tool_choice is `required` and this is the second reply in a row without tool calls",
)
TERMINATED = Guard(
    "terminated",
    lambda agent: agent.run_state.turn.terminated_by is not None,
    "a special tool (terminate) ran",
)
MAX_STEPS = Guard("max_steps", lambda agent: agent.run_state.step >= agent.max_steps, "step == max_steps")
STUCK = Guard(
    "stuck",
    lambda agent: agent.stuck_limit is not None and agent.run_state.stuck_streak >= agent.stuck_limit,
    "stuck detected `stuck_limit` times in a row",
)

# -- effects -----------------------------------------------------------------


# The table cannot import the agent class (the agent imports the table); guards, effects and
# actions receive the agent and read it by duck typing, as `transitions` hands it over.


def _start(agent: Any) -> None:
    agent.run_state.step = 1


def _next_step(agent: Any) -> None:
    agent.run_state.step += 1


def _tool_calls_required(agent: Any) -> None:
    agent.run_state.error = TOOL_CALLS_REQUIRED_MESSAGE


START = Effect("step := 1", _start)
NEXT_STEP = Effect("step += 1", _next_step)
RECORD_REQUIRED_ERROR = Effect("error := 'Tool calls required but none provided'", _tool_calls_required)

# -- phases: the engine's I/O, awaited between triggers ------------------------
# Each returns the agent's phase (a coroutine) for the driver to await, rather than awaiting it
# itself: one coroutine a phase, not two.


class _Phases(Protocol):
    """The agent, as its phases call it."""

    run_state: Any

    def think(self) -> Awaitable[None]: ...

    def act(self) -> Awaitable[None]: ...

    def observe(self) -> Awaitable[None]: ...


def _think(agent: _Phases) -> Awaitable[None]:
    agent.run_state.turn = Turn()  # a step's record begins empty: nothing of the step before leaks in
    return agent.think()


def _act(agent: _Phases) -> Awaitable[None]:
    return agent.act()


def _observe(agent: _Phases) -> Awaitable[None]:
    return agent.observe()


RUNNING = AgentState.RUNNING.value

AGENT_TABLE = MachineTable(
    initial="IDLE",
    states=(
        StateSpec("IDLE", doc="ready for `run()`"),
        StateSpec(
            "THINKING",
            RUNNING,
            _think,
            "think_done",
            "ask the LLM; record the assistant message",
            produces=frozenset({Payload.REPLY, Payload.PENDING_CALLS}),
        ),
        StateSpec(
            "ACTING",
            RUNNING,
            _act,
            "act_done",
            "execute the tool calls",
            consumes=frozenset({Payload.PENDING_CALLS}),
            produces=frozenset({Payload.OBSERVATIONS}),
        ),
        StateSpec(
            "OBSERVING",
            RUNNING,
            _observe,
            "observe_done",
            "record results; detect stuck",
            consumes=frozenset({Payload.OBSERVATIONS}),
        ),
        StateSpec("FINISHED", doc="ended by the model or by a limit", final=AgentState.FINISHED),
        StateSpec("ERROR", doc="ended by an error or cancellation", final=AgentState.ERROR),
    ),
    edges=(
        Edge("start", "IDLE", "THINKING", effect=START),
        Edge("think_done", "THINKING", "FINISHED", TOKEN_LIMIT, StopReason.TOKEN_LIMIT),
        Edge("think_done", "THINKING", "ACTING", HAS_TOOL_CALLS),
        Edge("think_done", "THINKING", "FINISHED", FINAL_ANSWER, StopReason.FINAL_ANSWER),
        Edge("think_done", "THINKING", "ERROR", TOOL_CALLS_REQUIRED, StopReason.ERROR, RECORD_REQUIRED_ERROR),
        Edge("think_done", "THINKING", "OBSERVING"),
        Edge("act_done", "ACTING", "OBSERVING"),
        Edge("observe_done", "OBSERVING", "FINISHED", TERMINATED, StopReason.TERMINATED),
        Edge("observe_done", "OBSERVING", "FINISHED", MAX_STEPS, StopReason.MAX_STEPS),
        Edge("observe_done", "OBSERVING", "FINISHED", STUCK, StopReason.STUCK),
        Edge("observe_done", "OBSERVING", "THINKING", effect=NEXT_STEP),
        Edge("fail", RUNNING, "ERROR", stop_reason=StopReason.ERROR),
        Edge("cancel", RUNNING, "ERROR", stop_reason=StopReason.CANCELLED),
    ),
)
