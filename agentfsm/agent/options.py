"""`AgentOptions`: the options every agent has, those the engine's own edges read.

Each agent class has one record (`agentfsm.options` says how they are declared and checked):
this one is `BaseAgent`'s; `ToolCallOptions` (beside `ToolCallAgent`) extends it, and
`ManusOptions` (beside `Manus`) changes defaults only. The agent keeps its record as
`agent.options`; a trace's header, a checkpoint, replay and the command line read that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from ..options import Options, Spec

__all__ = ["AgentOptions"]


@dataclass(frozen=True, kw_only=True)
class AgentOptions(Options):
    """The limits of a run, and whether an answer ends it."""

    max_steps: Annotated[int, Spec(ge=1, flag="steps before the run stops (max_steps)")] = 10
    """Steps a run may take; reaching it ends the run with `max_steps`."""
    stuck_limit: Annotated[int | None, Spec(ge=1, none="no limit", file_none=0)] = 3
    """Stuck steps in a row that end the run with `stuck` (None: never; a config file writes 0)."""
    duplicate_threshold: Annotated[int, Spec(ge=1)] = 2
    """Earlier turns with the same content and tool calls that make a step stuck."""
    finish_on_answer: bool = True
    """A reply with text and no tool calls ends the run with `final_answer`."""
