"""The plan a flow works through, as typed state: steps with their owner, status, attempts and notes.

Upstream keeps the plan as dicts of parallel lists inside the planning tool
and reads a step's owner out of its text each time; here a step is a record
that says who does it and how far it got, so the flow's guards, its result
and a checkpoint read the same data.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from ..serde import Serializable

__all__ = ["Plan", "PlanStep", "StepStatus", "owner_of"]

_TAG = re.compile(r"\[([A-Za-z0-9_-]+)\]")


class StepStatus(StrEnum):
    """How far a step got (upstream's four values)."""

    NOT_STARTED = "not_started"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    BLOCKED = "blocked"


_MARKS = {
    StepStatus.NOT_STARTED: "[ ]",
    StepStatus.IN_PROGRESS: "[→]",
    StepStatus.COMPLETED: "[✓]",
    StepStatus.BLOCKED: "[!]",
}


def owner_of(text: str, executors: Sequence[str]) -> tuple[str, str]:
    """The executor a step's text names with an ``[agent_name]`` tag (any case), and the text without
    it. No tag, or a tag naming no executor, gives the first executor: a step always has an owner."""
    by_lower = {name.lower(): name for name in executors}
    match = _TAG.search(text)
    owner = by_lower.get(match.group(1).lower()) if match else None
    if match and owner is not None:
        text = (text[: match.start()] + text[match.end() :]).strip()
    return owner or executors[0], text.strip()


@dataclass(slots=True, kw_only=True)
class PlanStep(Serializable):
    """One step of a plan."""

    id: int
    """The step's number, unique in its plan (kept when the plan is revised)."""
    text: str
    """What to do, without its owner tag."""
    agent: str
    """The executor that does it."""
    status: StepStatus = StepStatus.NOT_STARTED
    attempts: int = 0
    """Runs of its agent spent on it so far."""
    notes: str = ""
    """What the last attempt left: the agent's summary when completed, why it failed otherwise."""

    @property
    def tagged(self) -> str:
        """The text with its owner tag, as a planner writes it."""
        return f"[{self.agent}] {self.text}"


@dataclass(slots=True, kw_only=True)
class Plan(Serializable):
    """A titled list of steps, under an id unique to the flow that made it."""

    plan_id: str
    title: str
    steps: list[PlanStep] = field(default_factory=list)

    def step(self, step_id: int) -> PlanStep | None:
        return next((s for s in self.steps if s.id == step_id), None)

    @property
    def next_step(self) -> PlanStep | None:
        """The first step not yet completed nor blocked: the one to run next, or None."""
        live = (StepStatus.NOT_STARTED, StepStatus.IN_PROGRESS)
        return next((s for s in self.steps if s.status in live), None)

    @property
    def completed(self) -> list[PlanStep]:
        return [s for s in self.steps if s.status is StepStatus.COMPLETED]

    def add_steps(self, texts: Sequence[str], executors: Sequence[str]) -> None:
        """Append a step for each text, its owner read from its tag, numbered after the last one."""
        next_id = max((s.id for s in self.steps), default=0) + 1
        for offset, raw in enumerate(texts):
            agent, text = owner_of(raw, executors)
            self.steps.append(PlanStep(id=next_id + offset, text=text, agent=agent))

    def revise(self, texts: Sequence[str], executors: Sequence[str]) -> None:
        """Keep the completed steps (with their ids and notes); `texts` replace all the others. A text
        that repeats a completed step's is dropped: it is done already."""
        self.steps = self.completed
        done = {s.text for s in self.steps}
        self.add_steps([t for t in texts if owner_of(t, executors)[1] not in done], executors)

    def render(self) -> str:
        """The plan as the models read it: title, progress, and each step with its mark and notes."""
        done = len(self.completed)
        total = len(self.steps)
        percent = f" ({done / total:.0%})" if total else ""
        lines = [
            f"Plan: {self.title} (ID: {self.plan_id})",
            f"Progress: {done}/{total} steps completed{percent}",
        ]
        counts = ", ".join(f"{sum(s.status is status for s in self.steps)} {status}" for status in StepStatus)
        lines += [f"Status: {counts}", "", "Steps:"]
        for s in self.steps:
            lines.append(f"{s.id}. {_MARKS[s.status]} {s.tagged}")
            if s.notes:
                lines.append(f"   Notes: {s.notes}")
        return "\n".join(lines)
