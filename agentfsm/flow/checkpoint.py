"""A flow's checkpoint: the agents' journal, each record holding the whole flow as of a transition.

Why the agents' journal (`agentfsm.recording.checkpoint`): one checkpoint
mechanism, with one lease, one writer off the event loop, one torn-tail rule
and one cancellation rule, for agents and flows alike. The flow's records are
written by the same `Checkpointer`, after each of the flow's own transitions
(its agents' events are the flow's next record's business). Beside the
flow's `RunState`, each record holds under ``parts`` (`flow_parts`) the
flow's `FlowState` (the plan with its statuses, the runs so far, a review's
decision), each agent's memory as of that transition, and the run state of a
step's agent that paused (approval, input), so that pause survives a restart
too, or else the final state its last run ended in (``ended``), which its
next run resets from as the flow's trace recorded it. A flow moves on only
between agent runs (one transition per step, a few per replan), so writing
its parts whole each time is a few records a run. A
kill loses at most the current phase: `PlanningFlow.resume(checkpoint=...)`
enters it again, so a step whose agent was killed runs again from the memory
it started with, and a flow paused for plan review or for its agent pauses
again, waiting for the same decision or answer.

The journal's header records how the flow was built (``config``: its
`trace_config()`: its limits, the planner's model, each agent's class,
options and model); a resume by a flow built otherwise is refused, naming
the options that differ, as an agent's checkpoint refuses one. The models
may differ: a flow may resume on another server. A cancelled flow (Ctrl-C,
its task cancelled) is stopped, not finished, as an agent's run is: a resume
leaves out the record of its edge into ERROR on `cancelled` and continues
from the one before, as if the process had been killed at that moment.

Before the journal, a flow's checkpoint was one JSON document replaced
after every transition (schemas 2 and 3 of `FLOW_CHECKPOINT_SCHEMA`, with
``resume_from`` in a cancelled flow's). Such a file still resumes: it is
read as before, then written again in place as a journal of one record
(to a file beside it, renamed over it), which the resumed run appends to.
Either way `read_flow_checkpoint` gives the flow as one document of the
same parts, checked whole (`_checked`) before anything is restored.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Protocol

from ..agent.turn import AgentRunState
from ..errors import CheckpointError
from ..fsm.machine import MachineTable
from ..memory import Memory
from ..recording.checkpoint import fsync_journal, write_checkpoint
from ..recording.files import RecordPath
from ..recording.kinds import file_kind, not_a
from ..recording.restore import config_differences, damaged, read_journal, read_memory, read_run_state
from ..run.result import StopReason
from ..run.state import RunState
from .plan import Plan, PlanStep
from .state import FlowState

__all__ = [
    "FLOW_CHECKPOINT_SCHEMA",
    "CheckpointedAgent",
    "CheckpointedFlow",
    "as_journal",
    "flow_parts",
    "is_journal",
    "read_flow_checkpoint",
    "restore_flow",
]

FLOW_CHECKPOINT_SCHEMA = 3
"""The layout of the flow as `read_flow_checkpoint` gives it, and of a flow's checkpoint
document before the journal: 2, the flow's configuration (``config``) and each agent's paused run
(``agents``); 3, that run's step in a record of its own (`AgentRunState.turn`)."""
_READ_SCHEMAS = (2, FLOW_CHECKPOINT_SCHEMA)
"""The schemas a resume reads (2's agents' runs read as `AgentRunState.model_validate` reads them)."""


class CheckpointedAgent(Protocol):
    """What a flow's checkpoint reads and writes of one of its agents (`BaseAgent` is one)."""

    memory: Memory

    @property
    def table(self) -> MachineTable: ...

    @property
    def run_state(self) -> RunState: ...

    @property
    def phase(self) -> str | None: ...

    def restore_paused(self, dump: Any, *, what: str) -> None: ...

    def prepare_resume(self, config: Mapping[str, Any]) -> None: ...


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
    def agents(self) -> Mapping[str, CheckpointedAgent]: ...

    def trace_config(self) -> dict[str, Any]: ...


def flow_parts(flow: CheckpointedFlow) -> dict[str, Any]:
    """What each record of a flow's journal holds beside its run state (``parts``): its name,
    executors and review, its state, and each agent's memory and paused run."""
    agents: dict[str, Any] = {}
    for name, agent in flow.agents.items():
        saved: dict[str, Any] = {"memory": agent.memory.snapshot().model_dump(mode="json")}
        if agent.phase is not None:  # paused in the middle of its run: the run goes on after a restart
            saved["run_state"] = agent.run_state.model_dump(mode="json")
        else:  # where its last run ended: its next run resets from there, as it would have
            saved["ended"] = {"state": agent.run_state.state, "step": agent.run_state.step}
        agents[name] = saved
    return {
        "flow": flow.name,
        "executors": list(flow.executors),
        "reviewing": flow.reviewing,
        "flow_state": flow.flow_state.model_dump(mode="json"),
        "agents": agents,
    }


def as_journal(path: RecordPath, document: dict[str, Any], agent_class: str) -> None:
    """Write the flow `document` (a checkpoint of schema 3 or before, as read) in place of the file
    at `path`, as a journal of one record: to a file beside it, fsynced, renamed over it, so a
    kill leaves one or the other whole. The caller holds `path`'s lease."""
    temporary = f"{os.fspath(path)}.journal"
    write_checkpoint(
        temporary,
        {
            "agent": document["flow"],
            "agent_class": agent_class,
            "config": document["config"],
            "run_state": document["run_state"],
            "memory": Memory().snapshot().model_dump(mode="json"),
            "parts": {key: document[key] for key in _RECORD_PARTS},
        },
    )
    os.replace(temporary, path)
    fsync_journal(path, directory=True)


def is_journal(path: RecordPath) -> bool:
    """Whether the file at `path` begins as a journal does (a header record), not as a flow's
    document of schema 3 or before."""
    try:
        with open(path, "rb") as source:
            first = json.loads(source.readline())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(first, dict) and first.get("kind") == "header"


_RESUME_FROM = "resume_from"
"""A cancelled flow's document holds here the one before it, which a resume continues from."""


def _cancelled(document: dict[str, Any]) -> bool:
    """The document of a flow's edge into a final state on `cancelled`."""
    run_state = document.get("run_state")
    return isinstance(run_state, dict) and run_state.get("stop_reason") == StopReason.CANCELLED.value


_PARTS = ("flow", "executors", "reviewing", "config", "run_state", "flow_state", "agents")
_RECORD_PARTS = ("flow", "executors", "reviewing", "flow_state", "agents")
"""What a journal's record holds of the flow under ``parts`` (`flow_parts`)."""


def read_flow_checkpoint(path: RecordPath, *, resuming: bool = False) -> dict[str, Any]:
    """The document at `path`; `CheckpointError` naming what is wrong with it. `resuming`: the
    document a resume continues from: a cancelled flow's is the one before its cancellation.

    What a resume reads of it is checked here (`_checked`): a damaged document is one
    `CheckpointError` naming the file and the part, never pydantic's or memory's own exception
    from inside the resume. An agent's checkpoint or a trace given for it is said to be one."""
    try:
        return _read(path, resuming)
    except CheckpointError:
        found = file_kind(path)
        if found is not None and found != "flow checkpoint":
            raise CheckpointError(not_a(path, "flow checkpoint", found)) from None
        raise


def _read(path: RecordPath, resuming: bool) -> dict[str, Any]:
    if is_journal(path):
        data = read_journal(path, resuming=resuming)
        parts = data.get("parts")
        if not isinstance(parts, dict):  # an agent's journal
            raise CheckpointError(not_a(path, "flow checkpoint", "checkpoint"))
        whole = {**parts, "config": data["config"], "run_state": data["run_state"]}
        return _checked(path, {**whole, "schema": FLOW_CHECKPOINT_SCHEMA})
    try:
        with open(path, encoding="utf-8") as source:
            data = json.load(source)
    except FileNotFoundError:
        raise CheckpointError(
            f"no flow checkpoint at {os.fspath(path)!r}; pass the file `execute(checkpoint=...)` wrote"
        ) from None
    except (ValueError, OSError, RecursionError) as exc:  # not JSON, not text, a directory, too deep
        raise CheckpointError(f"{os.fspath(path)!r} is not a flow checkpoint ({exc})") from None
    document = _checked(path, data)
    if resuming and _cancelled(document) and _RESUME_FROM in document:
        return _checked(path, document[_RESUME_FROM])
    return document


def _checked(path: RecordPath, data: object) -> dict[str, Any]:
    """`data`, if it is a flow's document, whole: every part a resume reads reads back."""
    name = os.fspath(path)
    if not isinstance(data, dict) or not ({"flow", "flow_state"} & set(data)):
        raise CheckpointError(
            f"{name!r} is not a flow checkpoint of schema {FLOW_CHECKPOINT_SCHEMA}: "
            "it is not the JSON document of a flow"
        )
    if data.get("schema") not in _READ_SCHEMAS:
        raise CheckpointError(
            f"{name}: flow checkpoint schema {data.get('schema')!r} is not supported; this agentfsm "
            f"reads schemas {' and '.join(map(str, _READ_SCHEMAS))}; finish that flow with the agentfsm "
            "that wrote it, or start it again"
        )
    missing = [key for key in _PARTS if key not in data]
    if missing:
        raise damaged(name, f"it lacks {', '.join(missing)}")
    kinds = {"flow": str, "reviewing": bool, "executors": list, "config": dict, "agents": dict}
    for key, kind in kinds.items():
        if not isinstance(data[key], kind):
            raise damaged(name, f"its {key} is {data[key]!r}, not {_KIND_NAMES[kind]}")
    for executor in data["executors"]:
        if not isinstance(executor, str):
            raise damaged(name, f"its executors hold {executor!r}, not an agent's name")
    llms = {"llm": data["config"].get("llm")}  # what `agentfsm resume` reads of it: the models
    agent_configs = data["config"].get("agents") or {}
    if not isinstance(agent_configs, dict):
        raise damaged(name, f"its config's agents is {agent_configs!r}, not a table")
    for agent, recorded in agent_configs.items():
        config = (recorded.get("config") if isinstance(recorded, dict) else recorded) or {}
        if not isinstance(config, dict):
            raise damaged(name, f"its config of agent {agent!r} is {config!r}, not a table")
        llms[f"agents.{agent}.config.llm"] = config.get("llm")
    for where, llm in llms.items():
        if not isinstance(llm or {}, dict):
            raise damaged(name, f"its config's {where} is {llm!r}, not a table")
    _check_config(name, data["config"])
    run_state = read_run_state(name, data["run_state"], RunState, what="its run_state")
    _check_keys(name, "run_state", data["run_state"], _RUN_STATE_KEYS)
    _check_run_state(name, run_state)
    _check_keys(name, "run_state's usage", data["run_state"]["usage"], _USAGE_KEYS)
    _check_keys(name, "flow_state", data["flow_state"], _FLOW_STATE_KEYS)
    plan = data["flow_state"]["plan"]
    if isinstance(plan, dict):
        _check_keys(name, "flow_state's plan", plan, _PLAN_KEYS)
        for index, step in enumerate(plan["steps"] if isinstance(plan["steps"], list) else ()):
            if isinstance(step, dict):
                _check_keys(name, f"flow_state's plan.steps.{index}", step, _STEP_KEYS)
    try:
        flow_state = FlowState.model_validate(data["flow_state"])
    except ValueError as exc:  # pydantic's ValidationError
        raise damaged(name, "its flow_state does not read back", exc) from None
    if flow_state.plan is None and run_state.state not in _BEFORE_PLAN:
        raise damaged(name, f"its flow_state's plan is null in state {run_state.state!r}, which has one")
    for agent, saved in data["agents"].items():
        if not isinstance(saved, dict) or "memory" not in saved:
            raise damaged(name, f"its agent {agent!r} is {saved!r}, not a table with its memory")
        read_memory(name, saved["memory"], what=f"the memory of its agent {agent!r}")
        if "run_state" in saved:
            what = f"the paused run of its agent {agent!r}"
            read_run_state(name, saved["run_state"], AgentRunState, what=what)
    return data


_KIND_NAMES: dict[type, str] = {
    str: "a name",
    bool: "true or false",
    list: "a list",
    dict: "a table",
    int: "a whole number",
}

_RUN_STATE_KEYS = ("run_id", "state", "step", "request", "stop_reason", "error", "output", "usage")
"""What every flow checkpoint's run state holds (the ones a flow's result is made of): one missing
is damage, not a default."""
_USAGE_KEYS = ("input_tokens", "output_tokens", "llm_calls", "tool_calls")
_FLOW_STATE_KEYS = tuple(FlowState.__dataclass_fields__)
_PLAN_KEYS = tuple(Plan.__dataclass_fields__)
_STEP_KEYS = tuple(PlanStep.__dataclass_fields__)
"""Every part of the flow's state: each is written in every document of this schema."""
_BEFORE_PLAN = frozenset({"IDLE", "PLANNING"})
"""The flow's states that come before it has a plan."""


def _flow_tables() -> tuple[MachineTable, ...]:
    """The tables a checkpoint's flow may run on: with plan review and without."""
    from .review import with_review
    from .table import FLOW_TABLE

    return FLOW_TABLE, with_review(FLOW_TABLE)


def _check_keys(name: str, part: str, dump: Any, keys: tuple[str, ...]) -> None:
    missing = [key for key in keys if key not in dump]
    if missing:
        raise damaged(name, f"its {part} lacks {', '.join(missing)}")


def _check_run_state(name: str, run_state: RunState) -> None:
    """The flow's state is one of its table's, and its stop reason one its edges give (a final
    state's is never missing): a resume of an unknown one would report it as the flow's end."""
    tables = _flow_tables()
    specs = [table.by_name[run_state.state] for table in tables if run_state.state in table.by_name]
    if not specs or run_state.state == tables[0].initial:
        states = sorted({state for table in tables for state in table.by_name} - {tables[0].initial})
        raise damaged(
            name, f"its run_state's state is {run_state.state!r}, not one of the flow's ({', '.join(states)})"
        )
    reason = run_state.stop_reason
    known = {str(r) for r in StopReason} | {
        str(edge.stop_reason) for table in tables for edge in table.edges if edge.stop_reason is not None
    }
    if reason is not None and str(reason) not in known:
        raise damaged(name, f"its run_state's stop_reason is {str(reason)!r}, not one of {sorted(known)}")
    if reason is None and specs[0].final is not None:
        raise damaged(
            name, f"its run_state's stop_reason is missing, and state {run_state.state!r} is an end"
        )


def _check_config(name: str, config: dict[str, Any]) -> None:
    """What a resume builds the flow from, and compares with the flow it built: a damaged part is
    said to be damaged here, not taken for a flow configured otherwise."""
    kinds = {"max_replans": int, "max_attempts": int, "reviewing": bool, "executors": list, "agents": dict}
    for key, kind in kinds.items():
        value = config.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise damaged(name, f"its config's {key} is {value!r}, not {_KIND_NAMES[kind]}")
    for executor in config["executors"]:
        if not isinstance(executor, str):
            raise damaged(name, f"its config's executors hold {executor!r}, not an agent's name")
        if executor not in config["agents"]:
            raise damaged(name, f"its config's agents lack {executor!r}, one of its executors")
    for agent, recorded in config["agents"].items():
        if not isinstance(recorded, dict):
            raise damaged(name, f"its config's agents.{agent} is {recorded!r}, not a table")
        if not isinstance(recorded.get("agent_class"), str):
            raise damaged(
                name,
                f"its config's agents.{agent}.agent_class is {recorded.get('agent_class')!r}, not a name",
            )
        if not isinstance(recorded.get("config"), dict):
            raise damaged(
                name, f"its config's agents.{agent}.config is {recorded.get('config')!r}, not a table"
            )


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
    differ = _differences(flow.trace_config(), data["config"])
    if differ:
        raise CheckpointError(
            f"flow {flow.name!r} is not configured as the one that wrote the checkpoint: "
            f"{'; '.join(differ)}; build it with the options the checkpoint records "
            "(`agentfsm resume` does), or start the flow again"
        )
    run_state = read_run_state("", data["run_state"], RunState)
    if run_state.state not in flow.table.by_name or run_state.state == flow.table.initial:
        raise CheckpointError(
            f"the checkpoint's state {run_state.state!r} is not a state to resume the flow in"
        )
    if run_state.stop_reason is not None:
        run_state.stop_reason = StopReason.of(run_state.stop_reason)
    try:
        flow_state = FlowState.model_validate(data["flow_state"])
    except ValueError as exc:  # pydantic's ValidationError
        raise damaged("", "its flow state does not read back", exc) from None
    unknown = sorted(set(data["agents"]) - set(flow.agents))
    if unknown:
        raise CheckpointError(
            f"the checkpoint holds agents {unknown!r} that flow {flow.name!r} has not (its agents: "
            f"{sorted(flow.agents)!r}); build it as the one that wrote it"
        )
    configs = data["config"].get("agents") or {}
    for name, agent in flow.agents.items():  # each agent's parts as its run had them (Manus: its sandbox)
        config = (configs.get(name) or {}).get("config")
        if isinstance(config, dict):
            agent.prepare_resume(config)
    flow.run_state = run_state
    flow.flow_state = flow_state
    for name, saved in data["agents"].items():
        agent = flow.agents[name]
        agent.memory = read_memory("", saved["memory"], what=f"the memory of its agent {name!r}")
        if "run_state" in saved:
            agent.restore_paused(saved["run_state"], what=f"the paused run of its agent {name!r}")
        elif _ended_in(agent, saved.get("ended")):  # its last run's end: a trace goes on with its reset
            agent.run_state.state, agent.run_state.step = saved["ended"]["state"], saved["ended"]["step"]


def _ended_in(agent: CheckpointedAgent, ended: object) -> bool:
    """Whether `ended` (a record's ``ended`` of `agent`) names a final state of its machine and a step."""
    if not isinstance(ended, dict) or isinstance(ended.get("step"), bool):
        return False
    return ended.get("state") in {spec.name for spec in agent.table.finals} and isinstance(
        ended.get("step"), int
    )


def _differences(current: dict[str, Any], recorded: dict[str, Any]) -> list[str]:
    """Each option of the flow or of one of its agents that differs, with both values; the models
    are not compared (`config_differences`)."""
    mine, theirs = dict(current), dict(recorded)
    agents_now, agents_then = mine.pop("agents", {}), theirs.pop("agents", {})
    differ = [_both(key, theirs.get(key), mine.get(key)) for key in config_differences(mine, theirs)]
    for name in sorted(set(agents_now) | set(agents_then)):
        now, then = agents_now.get(name) or {}, agents_then.get(name) or {}
        if now.get("agent_class") != then.get("agent_class"):
            differ.append(_both(f"agent {name!r}", then.get("agent_class"), now.get("agent_class")))
            continue
        now_config, then_config = now.get("config") or {}, then.get("config") or {}
        for key in config_differences(now_config, then_config):
            differ.append(_both(f"{name}.{key}", then_config.get(key), now_config.get(key)))
    return differ


def _both(what: str, recorded: object, current: object) -> str:
    def short(value: object) -> str:
        text = json.dumps(value, ensure_ascii=False, default=str)
        return text if len(text) <= 60 else text[:57] + "..."

    return f"{what} is {short(recorded)} in the checkpoint, {short(current)} here"
