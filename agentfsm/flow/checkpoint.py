"""A flow's checkpoint: the whole flow as one JSON document, replaced after every flow transition.

Why a snapshot, not the agents' journal: a flow moves on only between agent
runs (one transition per step, a few per replan), so rewriting its state on
each is a few writes a run, and the file is always one whole document. It
holds the flow's `RunState` and `FlowState` (the plan with its statuses, the
runs so far, a review's decision) and each agent's memory as of that
transition. A kill loses at most the current phase: `PlanningFlow.resume(
checkpoint=...)` enters it again, so a step whose agent was killed runs again
from the memory it started with, and a flow paused for plan review pauses
again, waiting for the same decision.

Each write goes to a temporary file beside the checkpoint, is fsynced, and
replaces it (`os.replace`), so a kill mid-write leaves the previous one. The
checkpoint's `Lease` is held while the flow runs or waits: a second owner is
refused (`CheckpointLeasedError`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..errors import CheckpointError
from ..fsm.machine import MachineTable
from ..memory import Memory, MemorySnapshot
from ..recording.files import RecordPath
from ..recording.lease import Lease
from ..run.events import Transition, TransitionListener
from ..run.result import StopReason
from ..run.state import RunState
from .state import FlowState

__all__ = [
    "FLOW_CHECKPOINT_SCHEMA",
    "CheckpointedFlow",
    "FlowCheckpointer",
    "read_flow_checkpoint",
    "restore_flow",
]

FLOW_CHECKPOINT_SCHEMA = 1


class _HasMemory(Protocol):
    memory: Memory


class CheckpointedFlow(Protocol):
    """What a checkpoint reads and writes of a flow (`PlanningFlow` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def table(self) -> MachineTable: ...

    executors: tuple[str, ...]
    reviewing: bool
    run_state: RunState
    flow_state: FlowState

    @property
    def agents(self) -> Mapping[str, _HasMemory]: ...

    def on_transition(self, callback: TransitionListener) -> Callable[[], None]: ...


class FlowCheckpointer:
    """Writes `flow` to `path` after each of its transitions, holding the checkpoint's lease."""

    def __init__(self, path: RecordPath, flow: CheckpointedFlow, *, lease: Lease | None = None) -> None:
        self.path = os.fspath(path)
        self.flow = flow
        self.lease = lease if lease is not None else Lease.acquire(path)
        self._unsubscribe = flow.on_transition(self._on_transition)

    def close(self) -> None:
        self._unsubscribe()
        self.lease.release()

    def _on_transition(self, transition: Transition) -> None:
        self.lease.verify()
        flow = self.flow
        document = {
            "schema": FLOW_CHECKPOINT_SCHEMA,
            "flow": flow.name,
            "executors": list(flow.executors),
            "reviewing": flow.reviewing,
            "run_state": flow.run_state.model_dump(mode="json"),
            "flow_state": flow.flow_state.model_dump(mode="json"),
            "memories": {
                name: agent.memory.snapshot().model_dump(mode="json") for name, agent in flow.agents.items()
            },
        }
        _replace(self.path, json.dumps(document, ensure_ascii=False))


def _replace(path: str, text: str) -> None:
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    directory = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def read_flow_checkpoint(path: RecordPath) -> dict[str, Any]:
    """The document at `path`; `CheckpointError` naming what is wrong with it."""
    try:
        with open(path, encoding="utf-8") as source:
            data = json.load(source)
    except FileNotFoundError:
        raise CheckpointError(
            f"no flow checkpoint at {os.fspath(path)!r}; pass the file `execute(checkpoint=...)` wrote"
        ) from None
    except (ValueError, OSError) as exc:  # not JSON, not text, a directory, unreadable
        raise CheckpointError(f"{os.fspath(path)!r} is not a flow checkpoint ({exc})") from None
    keys = ("flow", "executors", "reviewing", "run_state", "flow_state", "memories")
    if (
        not isinstance(data, dict)
        or data.get("schema") != FLOW_CHECKPOINT_SCHEMA
        or not all(k in data for k in keys)
    ):
        raise CheckpointError(
            f"{os.fspath(path)!r} is not a flow checkpoint of schema {FLOW_CHECKPOINT_SCHEMA}; "
            "resume an agent's checkpoint with the agent's `resume`"
        )
    return data


def restore_flow(flow: CheckpointedFlow, data: dict[str, Any]) -> None:
    """Put the checkpointed flow into `flow`, after checking it is built as the one that wrote it."""
    recorded = (data.get("flow"), data.get("executors"), data.get("reviewing"))
    current = (flow.name, list(flow.executors), flow.reviewing)
    if recorded != current:
        raise CheckpointError(
            f"the checkpoint was written by flow {recorded[0]!r} with executors {recorded[1]!r} "
            f"(review {recorded[2]!r}); this flow is {current[0]!r} with {current[1]!r} (review "
            f"{current[2]!r}): build it as the one that wrote it"
        )
    run_state = RunState.model_validate(data["run_state"])
    if run_state.state not in flow.table.by_name or run_state.state == flow.table.initial:
        raise CheckpointError(
            f"the checkpoint's state {run_state.state!r} is not a state to resume the flow in"
        )
    if run_state.stop_reason is not None:
        run_state.stop_reason = StopReason.of(run_state.stop_reason)
    flow.run_state = run_state
    flow.flow_state = FlowState.model_validate(data["flow_state"])
    for name, snapshot in data["memories"].items():
        flow.agents[name].memory = Memory.from_snapshot(MemorySnapshot.model_validate(snapshot))
