"""Checkpoints: the whole state of a run in one JSON file, rewritten after every transition.

Why: a run killed at any point (SIGKILL, a lost machine) continues with
`BaseAgent.resume(path)` or `agentfsm resume PATH` from its last transition,
instead of starting over and running its tools again.

Schema version `CHECKPOINT_SCHEMA` = 1. One JSON object:

- ``schema``, ``agent`` (name), ``agent_class`` (``module.QualName``);
- ``config``: the agent's `trace_config()` (as a trace's header records it;
  never an API key), checked on resume against the agent that resumes;
- ``run_state``: the `RunState` dump (machine state, step, pending calls,
  observations, usage, stuck counters, and the step's started and completed calls);
- ``memory``: the `MemorySnapshot` dump;
- ``written_at`` (ISO 8601, UTC).

The file is replaced atomically (a temporary file in the same directory,
fsync, `os.replace`, then an fsync of the directory), so a reader, or a
resume after a kill, sees the previous checkpoint or the new one, never a
partial file. A kill in the middle of a write leaves the temporary file
(``.<name>.<pid>.<random>.tmp``); the next run or resume on that checkpoint
removes those of dead processes. The engine holds no random state, so nothing else is needed.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from datetime import UTC, datetime
from typing import Any

from ..errors import CheckpointError
from ..memory import Memory, MemorySnapshot
from ..run.events import AgentEvent, LLMCall, Transition
from ..run.result import StopReason
from ..run.state import RunState
from ..run.view import Recorded
from .trace import TracePath

__all__ = [
    "CHECKPOINT_SCHEMA",
    "CheckpointError",
    "Checkpointer",
    "read_checkpoint",
    "remove_stale_temporaries",
    "restore",
    "write_atomic",
]

CHECKPOINT_SCHEMA = 1
_UNCHECKED = frozenset({"llm"})
"""Config keys a resume may change: the model and its settings (a run may resume on another server)."""


def _temp_head(target: str) -> str:
    """How the temporary files of `target` begin: ``.<name>.``, then the writer's pid."""
    return f".{os.path.basename(target)}."


def remove_stale_temporaries(path: TracePath) -> list[str]:
    """Delete the temporary files of `path` left by processes killed mid-write; return their names.

    A temporary file is named after its checkpoint and the writing process, so
    only those of dead processes are removed (a live writer's file is its own).
    """
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    head = _temp_head(target)
    removed = []
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            if not (name.startswith(head) and name.endswith(".tmp")):
                continue
            pid = name[len(head) :].split(".", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(directory, name))
                    removed.append(name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        pass
    return True


def write_atomic(path: TracePath, text: str) -> None:
    """Replace `path` with `text` so that the file is always either the old or the new content."""
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    fd, temp = tempfile.mkstemp(prefix=f"{_temp_head(target)}{os.getpid()}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a crash of the machine
    finally:
        os.close(dir_fd)


class Checkpointer:
    """Writes `agent`'s run to `path` after every event that changes it: a listener of the run.

    Every transition (but the `reset` back to the initial state, which ends the
    previous run rather than changing this one), every edit, and the start
    and the completion of every tool call. The model's calls change nothing a
    resume needs until the transition that follows them. Subscribed from the
    start; `close()` (called when the run ends) unsubscribes.
    """

    def __init__(self, path: TracePath, agent: Recorded) -> None:
        self.path = path
        self.agent = agent
        remove_stale_temporaries(path)
        self.close = agent.on_event(self._on_event)

    def _on_event(self, event: AgentEvent) -> None:
        if isinstance(event, LLMCall):
            return
        if isinstance(event, Transition) and event.dest == self.agent.table.initial:
            return
        self.write()

    def snapshot(self) -> dict[str, Any]:
        agent = self.agent
        cls = type(agent)
        return {
            "schema": CHECKPOINT_SCHEMA,
            "agent": agent.name,
            "agent_class": f"{cls.__module__}.{cls.__qualname__}",
            "config": agent.trace_config(),
            "run_state": agent.run_state.model_dump(mode="json"),
            "memory": agent.memory.snapshot().model_dump(mode="json"),
            "written_at": datetime.now(UTC).isoformat(),
        }

    def write(self) -> None:
        write_atomic(self.path, json.dumps(self.snapshot(), ensure_ascii=False))


def read_checkpoint(path: TracePath) -> dict[str, Any]:
    """The checkpoint at `path`, checked for its schema and parts; `CheckpointError` otherwise."""
    try:
        with open(path, encoding="utf-8") as source:
            data = json.load(source)
    except OSError as exc:
        raise CheckpointError(f"cannot read the checkpoint {os.fspath(path)}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"the checkpoint {os.fspath(path)} is not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema") != CHECKPOINT_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else None
        raise CheckpointError(
            f"{os.fspath(path)} is not an agentfsm checkpoint of schema {CHECKPOINT_SCHEMA} "
            f"(schema: {found!r})"
        )
    missing = [key for key in ("agent_class", "config", "run_state", "memory") if key not in data]
    if missing:
        raise CheckpointError(f"the checkpoint {os.fspath(path)} lacks {', '.join(missing)}")
    return data


def restore(agent: Recorded, data: dict[str, Any]) -> None:
    """Put the checkpointed run into `agent`, after checking it is the agent that wrote it."""
    cls = type(agent)
    recorded_class = data["agent_class"]
    if recorded_class != f"{cls.__module__}.{cls.__qualname__}":
        raise CheckpointError(f"the checkpoint was written by a {recorded_class}, not a {cls.__qualname__}")
    current = json.loads(json.dumps(agent.trace_config()))  # tuples -> lists, as in the file
    recorded = data["config"]
    differ = sorted(
        key
        for key in set(current) | set(recorded)
        if key not in _UNCHECKED and current.get(key) != recorded.get(key)
    )
    if differ:
        raise CheckpointError(
            "the agent is not configured as the one that wrote the checkpoint; "
            f"these options differ: {', '.join(differ)}"
        )
    run_state = RunState.model_validate(data["run_state"])
    if run_state.state == agent.table.initial:
        raise CheckpointError("the checkpoint's run has not started; there is nothing to resume")
    if run_state.state not in agent.table.by_name:
        raise CheckpointError(
            f"the checkpoint's state {run_state.state!r} is not in {cls.__qualname__}'s machine"
        )
    if run_state.stop_reason is not None:
        run_state.stop_reason = StopReason.of(run_state.stop_reason)
    agent.memory = Memory.from_snapshot(MemorySnapshot.model_validate(data["memory"]))
    agent.run_state = run_state
