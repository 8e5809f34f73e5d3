"""A recorded run as the inspector's page reads it: its row in the list, its machine, its timeline,
and its memory at any transition.

Why a module of its own: the page asks for a run in pieces (the list, then the machine and the
first page of the timeline, then the memory at the transition a person steps to), and a trace of
ten thousand transitions must open in well under a second; so a file is parsed once into a
`RunView` (kept while the file is unchanged, by `agentfsm.ui.reader.Reader`) and each piece is cut
from that.
Everything here reads; nothing writes or imports a run's classes.

A trace's header records its table (`MachineTable.describe()`); for a trace written before it
did, and for a checkpoint (whose header does not), the table is the default one of its kind,
or, when the run took an edge that table lacks (an extended agent's), one made of the edges the
run took, so the page always draws what happened.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import AgentfsmError, IndexOutOfRangeError
from ..fsm.drawing import to_svg
from ..recording.kinds import FileKind, file_kind
from ..recording.restore import read_journal
from ..recording.trace import read_trace

__all__ = [
    "RunRow",
    "RunView",
    "default_table",
    "find_runs",
    "read_file",
    "redacted",
    "state_only",
    "trace_view",
]

SUFFIXES = (".jsonl", ".json", ".ckpt")
"""The files a folder is searched for (a file named on the command line is read whatever its name)."""

_SECRET = re.compile(r"api[_-]?key|token|secret|password|authori[sz]ation|credential", re.IGNORECASE)


@dataclass(frozen=True)
class RunRow:
    """One run in the list: what a person scans for (which, what state, why it stopped), or the
    one-line `problem` of a file that could not be read."""

    key: str
    """The run's name in URLs: the index of the path given, then the file's path under it."""
    path: str
    kind: str
    run_id: str | None = None
    agent: str | None = None
    agent_class: str | None = None
    request: str | None = None
    state: str | None = None
    step: int | None = None
    stop_reason: str | None = None
    started_at: str | None = None
    worker: str | None = None
    """A durable run's worker: the one that holds (or last held) it."""
    live: bool = False
    """Held by a manager: followed as it goes, and steered (approve, answer, cancel) from the page."""
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def find_runs(paths: list[Path]) -> dict[str, RunRow]:
    """The runs recorded under `paths`, by key: each file given, and each trace or checkpoint
    found in the folders given (recursively, in name order). A file given that is no recording
    is a row with its problem; in a folder, files that are none are passed over."""
    rows: dict[str, RunRow] = {}
    for index, root in enumerate(paths):
        if root.is_dir():
            for found in sorted(root.rglob("*")):
                if found.suffix in SUFFIXES and found.is_file():
                    kind = file_kind(found)
                    if kind is not None:
                        key = f"{index}/{found.relative_to(root).as_posix()}"
                        rows[key] = _row(key, found, kind)
        else:
            key = f"{index}/{root.name}"
            kind = file_kind(root)
            rows[key] = (
                _row(key, root, kind)
                if kind is not None
                else RunRow(key=key, path=str(root), kind="unknown", problem=_not_a_recording(root))
            )
    return rows


def _not_a_recording(path: Path) -> str:
    if not path.exists():
        return f"{path} does not exist"
    if path.is_dir():
        return f"{path} is a folder"
    return f"{path} is no agentfsm trace or checkpoint: its first line is no recording's header"


def _row(key: str, path: Path, kind: FileKind) -> RunRow:
    """The row of a recording, from its header and its last records, each checked as a replay
    checks it. The file is read but only those records are parsed (parsing a long trace whole
    would make the list as slow as opening each run); a damaged record elsewhere shows when the
    run is opened, and on its row from then on."""
    from ..recording.trace_records import check_record  # pydantic, loaded by what reads traces

    try:
        with open(path, "rb") as source:
            lines = source.read().split(b"\n")
        header = json.loads(lines[0])
        if kind in ("trace", "flow trace"):
            check_record(path, 1, header)
    except AgentfsmError as exc:
        return RunRow(key=key, path=str(path), kind=kind, problem=str(exc))
    except (OSError, ValueError) as exc:
        return RunRow(key=key, path=str(path), kind=kind, problem=f"cannot read {path}: {exc}")
    row: dict[str, Any] = {
        "run_id": header.get("run_id"),
        "agent": header.get("agent"),
        "agent_class": header.get("agent_class"),
        "request": header.get("request"),
        "started_at": header.get("started_at"),
    }
    for number in range(len(lines) - 1, 0, -1):
        try:
            record = json.loads(lines[number])
        except ValueError:  # a last line cut mid-write; any other shows when the run is opened
            continue
        if not isinstance(record, dict) or record.get("agent") is not None:  # a flow's agent's record
            continue
        kind_of = record.get("kind")
        if kind_of in ("result", "transition"):
            try:
                check_record(path, number + 1, record)
            except AgentfsmError as exc:
                return RunRow(key=key, path=str(path), kind=kind, problem=str(exc), **row)
        if kind_of == "result":
            result = record["result"]
            row.update(
                state=result.get("state"), step=result.get("steps"), stop_reason=result.get("stop_reason")
            )
            row["run_id"] = row["run_id"] or result.get("run_id")
            break
        if kind_of == "transition":
            row.update(state=record["dest"], step=record["step"])
            break
        if kind_of == "checkpoint" and isinstance(record.get("run_state"), dict):
            run = record["run_state"]
            row.update(
                state=run.get("state"),
                step=run.get("step"),
                stop_reason=run.get("stop_reason"),
                run_id=run.get("run_id"),
                request=run.get("request"),
            )
            break
    return RunRow(key=key, path=str(path), kind=kind, **row)


def redacted(value: Any) -> Any:
    """`value` with every field named like a secret (an API key, a token, a password) hidden:
    a config recorded with one never shows it."""
    if isinstance(value, dict):
        return {k: "(hidden)" if _SECRET.search(str(k)) and v else redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redacted(item) for item in value]
    return value


@dataclass
class RunView:
    """A run read whole: its machine (as data and drawn), its transitions, and the records the
    memory at each transition is rebuilt from."""

    row: RunRow
    header: dict[str, Any]
    table: dict[str, Any]
    table_source: str
    """Where the table came from: ``recorded``, ``default`` or ``taken`` (made of the run's edges)."""
    transitions: list[dict[str, Any]] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    result: dict[str, Any] | None = None
    memory: list[dict[str, Any]] | None = None
    """A checkpoint's memory as of its last record (a trace's is rebuilt per transition)."""
    status: dict[str, Any] | None = None
    """A managed run's status now (its state, its pause and what it waits for); None for a file."""
    flow: dict[str, Any] | None = None
    """A flow's trace: its `FlowResult` (the plan with each step's status, attempts and agent)."""
    fork: dict[str, Any] | None = None
    """How the page may fork the run: None (it cannot), ``{"into": PREFIX}`` (by its own agent or
    flow, among its manager's runs), or with ``"agents"`` too (a file's, an agent's or a flow's
    trace or checkpoint: into an app's runs, by one of those factories). A flow's fork edits its
    agents' memories (`Runs.fork`)."""

    def summary(self) -> dict[str, Any]:
        """What the run's page shows first: the machine with the run's path, totals, the result."""
        taken = Counter(t["edge"] for t in self.transitions if t["edge"] is not None)
        calls = [r for r in self.records if r["kind"] == "llm" and r.get("agent") is None]
        usage = {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "priced": True}
        for call in calls:
            spent = call.get("usage") or {}
            usage["input_tokens"] += spent.get("input_tokens", 0)
            usage["output_tokens"] += spent.get("output_tokens", 0)
            if spent.get("cost_usd") is None:
                usage["priced"] = False
            else:
                usage["cost_usd"] += spent["cost_usd"]
        return {
            "row": self.row.to_json(),
            "config": redacted(self.header.get("config", {})),
            "request": self.header.get("request"),
            "agent": self.header.get("agent"),
            "forked_from": self.header.get("forked_from"),
            "begins_after": self.header.get("begins_after"),
            "fork": self.fork,
            "status": self.status,
            "table": self.table,
            "table_source": self.table_source,
            "svg": _drawn(json.dumps(self.table, sort_keys=True)),
            "count": len(self.transitions),
            "taken": {str(edge): times for edge, times in taken.items()},
            "states": [t["dest"] for t in self.transitions],
            "llm_calls": [
                {
                    "step": call.get("step"),
                    "usage": call.get("usage"),
                    "duration_s": call.get("duration_s"),
                    "error": call.get("error"),
                    "model": (call.get("reply") or {}).get("model"),
                }
                for call in calls
            ],
            "usage": usage,
            "result": self.result,
            "plan": None if self.flow is None else self.flow.get("plan"),
            "agent_runs": self._agent_runs(),
        }

    def _agent_runs(self) -> list[dict[str, Any]]:
        """A flow's agent runs in its trace, in order: each step's agent, with its key's suffix."""
        found: dict[tuple[str, int], int] = {}
        for record in self.records:
            agent, step = record.get("agent"), record.get("flow_step")
            if isinstance(agent, str) and isinstance(step, int) and record["kind"] == "transition":
                found[(agent, step)] = found.get((agent, step), 0) + 1
        return [
            {"agent": a, "flow_step": n, "transitions": count, "key": f"~{a}~{n}"}
            for (a, n), count in found.items()
        ]

    def agent_run(self, agent: str, step: int) -> RunView:
        """In a flow's trace, the run of `agent` on the plan step `step`, read as a run of its own
        (its records, its memory before the flow): so the page steps through it as any run."""
        records = [
            {k: v for k, v in r.items() if k not in ("agent", "flow_step")}
            for r in self.records
            if r.get("agent") == agent and r.get("flow_step") == step
        ]
        if not any(r["kind"] == "transition" for r in records):
            raise IndexOutOfRangeError(f"the flow ran no agent {agent!r} on step {step}")
        steps = (self.flow or {}).get("plan", {}) or {}
        text = next((s["text"] for s in steps.get("steps", ()) if s.get("id") == step), f"step {step}")
        history = ((self.header.get("agents") or {}).get(agent) or {}).get("history", [])
        header = {"agent": agent, "request": text, "history": history}
        row = replace(self.row, key=f"{self.row.key}~{agent}~{step}", kind="trace", agent=agent)
        return trace_view(row, header, records)

    def page(self, offset: int, limit: int) -> list[dict[str, Any]]:
        """Transitions `offset` to `offset + limit - 1` (the page loads the timeline in pages)."""
        return self.transitions[offset : offset + limit]

    def memory_at(self, index: int) -> dict[str, Any]:
        """The conversation as it stood when transition `index` was taken: the last request the
        model was sent before it, the model's reply, and the tool results and edits since (a
        checkpoint: its memory at its last record, whatever `index`)."""
        if self.memory is not None:
            return {"messages": self.memory, "system": [], "at": None}
        if not 0 <= index < len(self.transitions):
            raise IndexOutOfRangeError(f"transition {index} is not in this run of {len(self.transitions)}")
        upto = self.transitions[index]["record"]
        history = list(self.header.get("history", ()))
        messages: list[dict[str, Any]] = [*history, {"role": "user", "content": self.header.get("request")}]
        system: list[dict[str, Any]] = []
        asked_at = None
        for position, record in enumerate(self.records[:upto]):
            if record.get("agent") is not None:
                continue
            kind = record["kind"]
            if kind == "llm":
                request = record["request"]
                messages, system, asked_at = list(request["messages"]), list(request["system_msgs"]), position
                reply = record.get("reply")
                if reply is not None:
                    messages.append(
                        {
                            "role": "assistant",
                            "content": reply.get("content"),
                            "tool_calls": reply.get("tool_calls"),
                        }
                    )
            elif kind == "tool":
                messages.append(
                    {
                        "role": "tool",
                        "name": record.get("name"),
                        "tool_call_id": record.get("call_id"),
                        "content": record.get("observation"),
                        "base64_image": record.get("base64_image"),
                        "is_error": record.get("is_error"),
                    }
                )
            elif kind == "edit":
                messages.append({"role": "edit", "content": _edit_text(record)})
        return {"messages": messages, "system": system, "at": asked_at}


@functools.lru_cache(maxsize=64)
def _drawn(table: str) -> str:
    """The drawing of a described table (its JSON): laid out once, however often a page asks."""
    return to_svg(json.loads(table))


def _edit_text(record: dict[str, Any]) -> str:
    what = record.get("edit")
    call = record.get("call_id")
    return f"{what} edited{f' for call {call}' if call else ''}: {json.dumps(record.get('after'))[:2000]}"


def read_file(row: RunRow) -> RunView:
    """The run in a recording file: its trace read whole, or its checkpoint's last state."""
    if row.kind in ("checkpoint", "flow checkpoint"):
        data = read_journal(row.path)
        run = data["run_state"]
        header = {k: data.get(k) for k in ("agent", "agent_class", "config")} | {"edges": run.get("edges")}
        table, source = default_table(row.kind, [])
        memory = data.get("memory", {}).get("messages", [])
        transitions: list[dict[str, Any]] = []
        if run.get("state") is not None:  # no timeline in a journal: the state it stands in
            transitions.append(state_only(run))
        return RunView(row, header, table, source, transitions, [], None, memory)
    header, records = read_trace(row.path)
    return trace_view(row, header, records)


def trace_view(row: RunRow, header: dict[str, Any], records: list[dict[str, Any]]) -> RunView:
    """The run a trace's header and records (`read_trace`'s) hold."""
    row = replace(row, agent=row.agent or header.get("agent"))
    own = [(position, r) for position, r in enumerate(records) if r.get("agent") is None]
    recorded = header.get("table")
    raw = [r for _, r in own if r["kind"] == "transition"]
    if isinstance(recorded, dict):
        table, source = recorded, "recorded"
    else:
        table, source = default_table(row.kind, raw)
    edges = _edge_finder(table)
    transitions: list[dict[str, Any]] = []
    for position, record in own:
        if record["kind"] != "transition":
            continue
        transitions.append(
            {
                "index": len(transitions),
                "record": position,
                "step": record["step"],
                "trigger": record["trigger"],
                "source": record["source"],
                "dest": record["dest"],
                "guards": record["guards"],
                "stop_reason": record.get("stop_reason"),
                "error": record.get("error"),
                "duration_s": record.get("duration_s"),
                "edge": edges(record),
            }
        )
    results = [r for _, r in own if r["kind"] == "result"]
    result = results[-1]["result"] if results else None
    flow = results[-1].get("flow") if results else None
    return RunView(row, header, table, source, transitions, records, result, flow=flow)


def state_only(run: dict[str, Any]) -> dict[str, Any]:
    return {
        "index": 0,
        "record": 0,
        "step": run.get("step"),
        "trigger": None,
        "source": None,
        "dest": run["state"],
        "guards": [],
        "stop_reason": run.get("stop_reason"),
        "error": run.get("error"),
        "duration_s": None,
        "edge": None,
    }


def default_table(kind: str, transitions: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """The default table of a run's kind (an agent's or a flow's), or, when the run took an edge
    it lacks, one made of the edges taken."""
    if kind.startswith("flow"):
        from ..flow.table import FLOW_TABLE as default
    else:
        from ..agent.table import AGENT_TABLE as default
    described = default.describe()
    find = _edge_finder(described)
    if all(find(t) is not None for t in transitions):
        return described, "default"
    return _taken_table(transitions, described["initial"]), "taken"


def _taken_table(transitions: list[dict[str, Any]], initial: str) -> dict[str, Any]:
    names = [initial]
    edges: list[dict[str, Any]] = []
    for t in transitions:
        for name in (t["source"], t["dest"]):
            if name not in names:
                names.append(name)
        held = [g["name"] for g in t["guards"] if g["held"]]
        edge = {
            "trigger": t["trigger"],
            "source": t["source"],
            "dest": t["dest"],
            "guard": held[0] if held else None,
            "guard_doc": "",
            "stop_reason": t.get("stop_reason"),
            "effect": None,
        }
        if edge not in edges:
            edges.append(edge)
    ends = {e["dest"] for e in transitions if e["dest"] not in {t["source"] for t in transitions}}
    states = [
        {
            "name": n,
            "group": None,
            "role": "final" if n in ends else "phase",
            "final": None,
            "done": None,
            "doc": "",
        }
        for n in names
    ]
    return {
        "initial": names[0],
        "reset": "reset",
        "fail": "fail",
        "cancel": "cancel",
        "states": states,
        "edges": edges,
    }


def _edge_finder(table: dict[str, Any]) -> Any:
    """A function from a transition record to the index of the table's edge it took (told apart by
    its guards: the one that held, or the unguarded fallback), or None."""
    groups: dict[str, set[str]] = {}
    for state in table["states"]:
        if state["group"]:
            groups.setdefault(state["group"], set()).add(state["name"])
    by_trigger: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for index, edge in enumerate(table["edges"]):
        by_trigger.setdefault(edge["trigger"], []).append((index, edge))

    def find(record: dict[str, Any]) -> int | None:
        held = [g["name"] for g in record.get("guards", ()) if g["held"]]
        for index, edge in by_trigger.get(record["trigger"], ()):
            if (
                edge["dest"] == record["dest"]
                and record["source"] in groups.get(edge["source"], {edge["source"]})
                and (edge["guard"] in held if edge["guard"] else not held)
            ):
                return index
        return None

    return find
