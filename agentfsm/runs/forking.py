"""Forking a run: a new run that starts where another stood after one of its transitions, with its
memory as it was there, edited if the caller wants (`Runs.fork`).

Why from the checkpoint, not the trace: a checkpoint journal holds a record after every edge, each
with the run's whole state (`RunState.edges` counts the edges taken), so the first record after
transition *k* is exactly the run at that point, memory included; a trace holds what was sent to
the model, which is not the memory itself. A fork is then made of the parent's own files:

- its checkpoint: the parent's journal up to that record, then one record of its own with the
  fork's run id and, when the memory was edited, a snapshot of the edited memory. Resuming it is
  the restart path every run already has: a phase runs again, a pause waits again, no call recorded
  as done runs twice.
- its trace: the parent's, its header naming the fork's id and where it was forked from
  (``forked_from``), which the resume cuts back to transition *k* (`cut_for_resume`) and writes on.
  The fork's trace therefore holds the parent's history up to the fork point, then its own.

A run known only by its trace (`run(trace=...)`, without a checkpoint) is forked the same way once
its state at transition *k* is known: the trace is replayed (`agentfsm.agent.replay`, its model's
replies and tools' results read back, nothing run) up to that transition, and the replayed agent's
run state and memory there make a one-record journal under the trace's own header (its agent
class and configuration, which the resume checks as it checks any checkpoint's).

A run known only by its checkpoint file (`run(checkpoint=...)` without a trace) forks from its
journal as an app's run does; its fork's trace then begins at the fork point, its header saying
how far the run had gone (``begins_after``), since no trace holds the history before it.

A `PlanningFlow`'s run forks the same way: each record of its journal holds the whole flow (its
plan, its runs so far, each agent's memory and a paused step's run, under ``parts``), so the fork
goes on from that record as a flow resumed there does, and no step completed before it runs again.
A flow has no memory of its own: what a fork edits is its agents' (`ForkPoint.agents`), given by
agent name. A flow's trace forks too: it is replayed (`agentfsm.flow.replay`) up to the transition,
and the replayed flow's parts there make the record.

An edited memory is made whole before it is used: a tool result whose call was dropped goes, and a
call whose result was dropped is taken out of its assistant message (a provider refuses a call
without its result), unless it is one of the calls still pending at the fork point.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import CheckpointError, IndexOutOfRangeError, TraceError, WrongPhaseError, WrongValueError
from ..memory import MemorySnapshot
from ..messages import Message, Role
from ..recording.restore import CHECKPOINT_SCHEMA, read_journal_text
from ..recording.trace import TRACE_SCHEMA

__all__ = ["ForkMemory", "ForkPoint", "check_fork_memory", "fork_point", "replayed_journal", "write_fork"]


@dataclass(frozen=True, slots=True)
class ForkPoint:
    """Run `run_id` as it stood after its transition `transition`: its `state`, `step` and `memory`,
    and the calls made and not answered yet there (`pending`: their ids)."""

    run_id: str
    transition: int
    state: str
    step: int
    memory: MemorySnapshot
    pending: tuple[str, ...]
    journal: str
    """The parent's journal up to that record (a fork's checkpoint begins with it)."""
    record: dict[str, Any]
    request: str = ""
    """The run's request (the fork's task)."""
    agents: dict[str, MemorySnapshot] = field(default_factory=dict)
    """A flow's run: each of its agents' memory there, by name (`memory` is the flow's own: empty);
    an agent's run: none."""
    trace: str | None = None
    """The trace it was replayed from, when the run is known only by its trace."""
    checkpoint: str | None = None
    """The checkpoint file it was read from, when the run is known only by that file."""

    @property
    def flow(self) -> bool:
        """Whether the run is a `PlanningFlow`'s (its record holds the whole flow, ``parts``)."""
        return "parts" in self.record

    @property
    def parent(self) -> dict[str, Any]:
        """The parent as a fork names it (``forked_from``): its run, the transition, its file."""
        named: dict[str, Any] = {"run_id": self.run_id, "transition": self.transition}
        for name, path in (("trace", self.trace), ("checkpoint", self.checkpoint)):
            if path is not None:
                named[name] = path
        return named


def fork_point(run_id: str, checkpoint: Path | str, transition: int) -> ForkPoint:
    """Where run `run_id` (its journal at `checkpoint`, or the journal's text) stood after transition
    `transition` (from 0). `IndexOutOfRangeError` when its journal holds no record of that
    transition; `WrongPhaseError` when that transition ended the run (nothing to go on with)."""
    _check_transition(transition)
    if isinstance(checkpoint, str):
        text = checkpoint
    else:
        try:
            text = checkpoint.read_text(encoding="utf-8")
        except OSError as exc:
            raise CheckpointError(
                f"run {run_id!r} has no checkpoint to fork from ({exc.strerror}): it has not started yet"
            ) from None
    record: dict[str, Any] | None = None
    lines = text.split("\n")[:-1]  # what follows the last newline: nothing, or a write cut short
    length = len(lines[0]) + 1 if lines else 0  # the header
    for line in lines[1:]:
        length += len(line) + 1
        try:
            found = json.loads(line)
        except ValueError:
            raise CheckpointError(f"the checkpoint of run {run_id!r} is damaged: a line is no JSON") from None
        edges = found.get("run_state", {}).get("edges") if found.get("kind") == "checkpoint" else None
        if edges == transition + 1:
            record = found
            break
    if record is None:
        raise IndexOutOfRangeError(
            f"run {run_id!r} has no transition {transition} in its checkpoint; fork from one of the "
            "transitions its page shows"
        )
    name = f"the checkpoint of run {run_id}"
    data = read_journal_text(text[:length], name)
    state = data["run_state"]
    if state.get("stop_reason") is not None:
        raise WrongPhaseError(
            f"transition {transition} of run {run_id!r} ended it ({state['state']}): fork from one before it"
        )
    memory = MemorySnapshot.model_validate(data["memory"])
    pending = _pending(memory, state)
    agents: dict[str, MemorySnapshot] = {}
    for name, saved in (data.get("parts") or {}).get("agents", {}).items():  # a flow's
        agents[name] = MemorySnapshot.model_validate(saved["memory"])
        pending += _pending(agents[name], saved.get("run_state") or {})
    return ForkPoint(
        run_id=run_id,
        transition=transition,
        state=str(state["state"]),
        step=int(state["step"]),
        memory=memory,
        pending=pending,
        journal=text[:length],
        record=record,
        request=str(state.get("request") or ""),
        agents=agents,
    )


def _pending(memory: MemorySnapshot, state: Mapping[str, Any]) -> tuple[str, ...]:
    """The calls of the run `state` made and not answered yet in `memory`."""
    answered = {m.tool_call_id for m in memory.messages if m.role is Role.TOOL}
    turn = state.get("turn") or {}  # a step's calls stay in its record until the next think
    return tuple(str(call["id"]) for call in turn.get("pending_calls", ()) if call["id"] not in answered)


async def replayed_journal(trace: Path, transition: int) -> tuple[str, str]:
    """The run of the trace at `trace` as it stood after transition `transition`, replayed: a
    journal of one record (see the module's docstring), and the run's id. `ReplayError` when the
    trace does not replay that far."""
    from ..agent.replay import Replayer
    from ..flow.checkpoint import flow_parts
    from ..flow.replay import FlowReplayer, is_flow_trace
    from ..recording.trace import read_trace

    _check_transition(transition)
    replayer: Replayer | FlowReplayer
    replayer = FlowReplayer(trace) if is_flow_trace(read_trace(trace)[0]) else Replayer(trace)
    header, taken, record = replayer.header, 0, None
    async with aclosing(replayer.transitions()) as steps:
        async for _ in steps:
            if taken == transition:  # before the run goes on (or the iteration's end cancels it)
                model = replayer.flow if isinstance(replayer, FlowReplayer) else replayer.agent
                record = {
                    "kind": "checkpoint",
                    "run_state": model.run_state.model_dump(mode="json"),
                    "memory": [{"op": "snapshot", "memory": model.memory.snapshot().model_dump(mode="json")}],
                    "written_at": _now(),
                }
                if isinstance(replayer, FlowReplayer):
                    record["parts"] = flow_parts(replayer.flow)
                break
            taken += 1
    if record is None:
        raise IndexOutOfRangeError(
            f"the trace {trace} has no transition {transition} (it replays {taken}); fork from one it shows"
        )
    journal = {
        "kind": "header",
        "schema": CHECKPOINT_SCHEMA,
        "agent": header.get("agent"),
        "agent_class": header.get("agent_class"),
        "config": header.get("config"),
        "started_at": _now(),
    }
    lines = [json.dumps(journal, ensure_ascii=False), json.dumps(record, ensure_ascii=False)]
    return "\n".join(lines) + "\n", str(header.get("run_id"))


def _check_transition(transition: object) -> None:
    if isinstance(transition, bool) or not isinstance(transition, int) or transition < 0:
        raise IndexOutOfRangeError(f"a transition is a whole number from 0, got {transition!r}")


def whole_memory(messages: Sequence[Message], pending: Sequence[str]) -> list[Message]:
    """`messages` with every call answered: a tool result whose call is gone is dropped, and a call
    whose result is gone is taken out of its message (kept if `pending`: it has not run yet); an
    assistant message left with neither text nor calls goes too."""
    answered = {m.tool_call_id for m in messages if m.role is Role.TOOL}
    kept: list[Message] = []
    calls: set[str] = set()
    for message in messages:
        if message.role is Role.ASSISTANT and message.tool_calls:
            live = tuple(c for c in message.tool_calls if c.id in answered or c.id in pending)
            if not live and not message.content:
                continue
            message = replace(message, tool_calls=live)
            calls |= {c.id for c in live}
        elif message.role is Role.TOOL and message.tool_call_id not in calls:
            continue
        kept.append(message)
    return kept


ForkMemory = Sequence[Message] | Mapping[str, Sequence[Message]]
"""A fork's memory: an agent's run's messages, or a flow's agents' messages by agent name."""


def check_fork_memory(point: ForkPoint, memory: ForkMemory | None) -> Any:
    """`memory` as the run forked at `point` takes it: an agent's messages (a sequence), or a flow's
    agents' by name (a mapping of some of its agents; {} when None); `WrongValueError` otherwise."""
    if not point.flow:
        if isinstance(memory, Mapping):
            raise WrongValueError(
                f"run {point.run_id!r} is an agent's: its fork's `memory` is its messages, not a table "
                f"of agents ({', '.join(map(str, memory))})"
            )
        return memory
    if memory is None:
        return {}
    if not isinstance(memory, Mapping):
        raise WrongValueError(
            f"run {point.run_id!r} is a flow's, which has no memory of its own: give `memory` as its "
            f"agents' messages by name ({', '.join(sorted(point.agents))})"
        )
    unknown = sorted(str(name) for name in memory if name not in point.agents)
    if unknown:
        raise WrongValueError(
            f"flow run {point.run_id!r} has no agent {', '.join(map(repr, unknown))}; its agents: "
            f"{', '.join(sorted(point.agents))}"
        )
    return memory


def _edited(before: MemorySnapshot, messages: Sequence[Message], pending: Sequence[str]) -> dict[str, Any]:
    """The snapshot of `messages` (made whole) in place of the memory `before`, as JSON."""
    whole = whole_memory(messages, pending)
    pinned = before.pinned_index
    if pinned is not None:  # the run's request stays pinned: the first user message
        pinned = next((i for i, m in enumerate(whole) if m.role is Role.USER), None)
    snapshot = MemorySnapshot(max_messages=before.max_messages, messages=whole, pinned_index=pinned)
    return snapshot.model_dump(mode="json")


def write_fork(
    point: ForkPoint,
    fork_id: str,
    *,
    checkpoint: Path,
    trace: Path,
    parent_trace: Path | None,
    memory: ForkMemory | None,
) -> None:
    """The fork's checkpoint and trace (see the module's docstring), from `point` and the parent's
    trace (None: the parent has none, and the fork's begins at the fork point); `memory`: the
    fork's messages (a flow's: its agents', by name; None: as they were)."""
    state = {**point.record["run_state"], "run_id": fork_id}
    state.pop("seen", None)  # the stuck counts so far are in the records before
    changes: list[dict[str, Any]] = []
    own: dict[str, Any] = {"kind": "checkpoint", "run_state": state, "seen": {}, "memory": changes}
    if point.flow:  # its agents' memories are in its parts, whole in each record
        own["parts"] = parts = json.loads(json.dumps(point.record["parts"]))
        for name, messages in check_fork_memory(point, memory).items():
            parts["agents"][name]["memory"] = _edited(point.agents[name], messages, point.pending)
    elif memory is not None:
        changes.append(
            {
                "op": "snapshot",
                "memory": _edited(point.memory, check_fork_memory(point, memory), point.pending),
            }
        )
    own["written_at"] = _now()
    checkpoint.write_text(point.journal + json.dumps(own, ensure_ascii=False) + "\n", encoding="utf-8")
    forked = {**point.parent, "memory_edited": memory is not None}
    if parent_trace is None:  # no trace holds the history: the fork's begins here
        journal = json.loads(point.journal.split("\n", 1)[0])
        begun = {
            "kind": "header",
            "schema": TRACE_SCHEMA,
            "run_id": fork_id,
            **{name: journal.get(name) for name in ("agent", "agent_class", "config")},
            "request": point.request,
            "history": [],
            "started_at": _now(),
            "forked_from": forked,
            "begins_after": {"edges": state.get("edges", 0), "edits": state.get("edits", 0)},
        }
        trace.write_text(json.dumps(begun, ensure_ascii=False) + "\n", encoding="utf-8")
        return
    try:
        lines = parent_trace.read_text(encoding="utf-8").split("\n")
        header = json.loads(lines[0])
    except (OSError, ValueError) as exc:
        raise TraceError(f"cannot read the trace of run {point.run_id!r} to fork it: {exc}") from None
    header = {**header, "run_id": fork_id, "forked_from": forked}
    trace.write_text("\n".join([json.dumps(header, ensure_ascii=False), *lines[1:]]), encoding="utf-8")


def _now() -> str:
    return datetime.now(UTC).isoformat()
