"""The step layout of a durable run (agentfsm.durable.run, layout 2), on a journal kept in memory: which
steps a run records, where a call's start is recorded, and a run recorded in another layout refused at its
first model step. (The same layout under SIGKILL, on PostgreSQL: test_durable_crash.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from durable_agents import AGENTS, TASK

from agentfsm import Terminate, ToolCallAgent, tool
from agentfsm.durable import AgentSpec, DurableRuns, Worker
from agentfsm.durable import run as durable
from agentfsm.durable.run import DECISION_TOPIC, LAYOUT, durable_run
from agentfsm.messages import ToolCall
from agentfsm.testing import FunctionLLM, ModelRequest, reply


class ListJournal:
    """A journal of (kind, name, output) entries; the entries of `recorded` are read back in order, as a
    recovered workflow reads its recorded steps, and the steps after them run."""

    def __init__(self, recorded: list[tuple[str, str, Any]] = (), decisions: list[dict] = ()) -> None:
        self.recorded = list(recorded)
        self.entries: list[tuple[str, str, Any]] = []
        self.decisions = list(decisions)

    @property
    def run_id(self) -> str:
        return "run-1"

    def _next(self, kind: str, name: str) -> tuple[bool, Any]:
        index = len(self.entries)
        if index < len(self.recorded):
            assert self.recorded[index][:2] == (kind, name), (index, self.recorded[index], kind, name)
            return True, self.recorded[index][2]
        return False, None

    async def step(self, name: str, body: Callable[[], Awaitable[Any]]) -> Any:
        found, output = self._next("step", name)
        if not found:
            output = await body()
        self.entries.append(("step", name, output))
        return output

    async def receive(self, topic: str, timeout_s: float) -> Any:
        assert topic == DECISION_TOPIC
        found, message = self._next("recv", topic)
        if not found:
            message = self.decisions.pop(0) if self.decisions else None
        self.entries.append(("recv", topic, message))
        return message

    async def publish(self, key: str, value: Any) -> None:
        self._next("event", key)
        self.entries.append(("event", key, value))


def names(journal: ListJournal) -> list[str]:
    return [name for kind, name, _ in journal.entries if kind == "step"]


async def test_a_call_s_start_is_carried_by_the_step_just_before_it(tmp_path):
    journal = ListJournal()
    spec = {"agent": "record", "options": {"effects": str(tmp_path / "effects.txt")}}
    result = await durable_run(journal, AGENTS, TASK, spec)
    assert (result["stop_reason"], result["steps"]) == ("terminated", 3)
    assert names(journal) == ["model", "tool", "tool", "model", "tool", "model", "tool"]
    assert all(output["layout"] == LAYOUT for _, name, output in journal.entries if name == "model")
    assert (tmp_path / "effects.txt").read_text().split() == ["1", "2", "3"]


async def test_a_call_after_a_decision_has_a_start_record_of_its_own(tmp_path):
    journal = ListJournal(decisions=[{"kind": "approve", "call_id": "c1"}])
    spec = {"agent": "approval", "options": {"effects": str(tmp_path / "effects.txt")}}
    result = await durable_run(journal, AGENTS, "record 7", spec)
    assert result["stop_reason"] == "terminated"
    kinds = [(kind, name) for kind, name, _ in journal.entries if name != "trace"]
    assert kinds == [
        ("step", "model"),
        ("event", "pause"),
        ("recv", DECISION_TOPIC),
        ("event", "pause"),
        ("step", "tool_started"),
        ("step", "tool"),
        ("step", "model"),
        ("step", "tool"),
    ]
    assert (tmp_path / "effects.txt").read_text().split() == ["7"]


async def test_a_start_read_back_without_its_call_s_record_is_an_interrupted_call(tmp_path):
    """Recovered after the first tool step (call 1 done; call 2's start carried by that step): call 2 is
    reported interrupted and not run; call 3, whose start this process records, runs."""
    spec = {"agent": "record", "options": {"effects": str(tmp_path / "effects.txt")}}
    first = ListJournal()
    await durable_run(first, AGENTS, TASK, spec)
    (tmp_path / "effects.txt").write_text("1\n")
    journal = ListJournal(recorded=first.entries[:2])
    result = await durable_run(journal, AGENTS, TASK, spec)
    assert (result["stop_reason"], result["steps"]) == ("terminated", 3)
    assert (tmp_path / "effects.txt").read_text().split() == ["1", "3"]
    second_call = journal.entries[2][2]
    assert second_call["is_error"] and "the run was interrupted while `record` ran" in second_call["content"]


async def test_a_run_recorded_in_another_layout_ends_in_error_saying_so(tmp_path):
    """Layout 1 recorded a model step without its layout, and a start record before every call: such a run
    is not replayed step by mismatched step, it ends at its first model record, and runs no tool."""
    spec = {"agent": "record", "options": {"effects": str(tmp_path / "effects.txt")}}
    first = ListJournal()
    await durable_run(first, AGENTS, TASK, spec)
    reply = {key: value for key, value in first.entries[0][2].items() if key != "layout"}
    journal = ListJournal(recorded=[("step", "model", reply), ("step", "tool_started", {"call": "c1"})])
    (tmp_path / "effects.txt").unlink()
    result = await durable_run(journal, AGENTS, TASK, spec)
    assert (result["state"], result["stop_reason"]) == ("ERROR", "error")
    assert result["error"] == (
        "CheckpointError: run 'run-1' was recorded in step layout 1 and this worker replays layout 2 only: "
        "finish it with a worker of the release that started it, or submit its task again"
    )
    assert names(journal) == ["model"] and not (tmp_path / "effects.txt").exists()
    assert [kind for kind, _, _ in journal.entries] == ["step"]  # nothing else: no trace is published


def hanging_agent(spec: AgentSpec) -> ToolCallAgent:
    """One call of a tool that says it began (a file) and then waits for good."""

    @tool
    async def hang() -> str:
        """Wait for good."""
        Path(spec.options["began"]).touch()
        await asyncio.sleep(3600)
        return "never"

    def script(request: ModelRequest) -> object:
        return reply("hanging", [ToolCall.create("c1", "hang", {})])

    return ToolCallAgent(llm=FunctionLLM(script), tools=[hang, Terminate()], name="hanger", max_steps=2)


async def test_a_worker_recovering_a_run_of_another_layout_ends_it_in_error_saying_so(tmp_path, monkeypatch):
    """On SQLite, through DBOS: a run recorded under another layout and left running by its worker is
    recovered by a worker of this layout (same worker id and version), which ends it at once, saying why."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    began = tmp_path / "began"
    agents = {"hang": hanging_agent}
    monkeypatch.setattr(durable, "LAYOUT", LAYOUT - 1)
    runs = DurableRuns(db)
    async with Worker(db, agents=agents, worker_id="solo", polling_s=0.05):
        run_id = await runs.submit("hang", AgentSpec(agent="hang", options={"began": str(began)}))
        for _ in range(400):
            if began.exists():
                break
            await asyncio.sleep(0.05)
        assert began.exists()
    assert (await runs.status(run_id)).state == "running"  # left as it was, to be recovered
    monkeypatch.setattr(durable, "LAYOUT", LAYOUT)
    began.unlink()
    async with Worker(db, agents=agents, worker_id="solo", polling_s=0.05):
        result = await runs.result(run_id, wait=True, timeout=30)
    runs.close()
    assert result is not None and (str(result.state), str(result.stop_reason)) == ("ERROR", "error")
    assert result.error == (
        f"CheckpointError: run {run_id!r} was recorded in step layout {LAYOUT - 1} and this worker "
        f"replays layout {LAYOUT} only: finish it with a worker of the release that started it, or "
        "submit its task again"
    )
    assert not began.exists()  # its tool did not run again
