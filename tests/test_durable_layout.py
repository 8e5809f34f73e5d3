"""The step layout of a durable run (agentfsm.durable.run, layout 6), on a journal kept in memory: which
steps a run records, where a call's start is recorded, and a run recorded in another layout refused at its
first model step. (The same layout under SIGKILL, on PostgreSQL: test_durable_crash.py.)"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest
from durable_agents import AGENTS, BATCH_TASK, TASK

from agentfsm import Terminate, ToolCallAgent, tool
from agentfsm.agent.tool_runner import ToolRunner
from agentfsm.durable import AgentSpec, DurableRuns, Worker
from agentfsm.durable import run as durable
from agentfsm.durable.run import DECISION_TOPIC, LAYOUT, TRACE_KEY, durable_run
from agentfsm.messages import ToolCall
from agentfsm.testing import FunctionLLM, ModelRequest, reply


class ListJournal:
    """A journal of (kind, name, output) entries, each at the place drawn for it (a step's when it is
    reserved); the entries of `recorded` are read back at their places, as a recovered workflow reads its
    recorded steps, and the steps after them run."""

    def __init__(self, recorded: list[tuple[str, str, Any] | None] = (), decisions: list[dict] = ()) -> None:
        self.recorded = list(recorded)
        self.places: list[tuple[str, str, Any] | None] = []
        self.decisions = list(decisions)

    @property
    def entries(self) -> list[tuple[str, str, Any]]:
        return [entry for entry in self.places if entry is not None]

    @property
    def run_id(self) -> str:
        return "run-1"

    def _draw(self, kind: str, name: str) -> tuple[int, bool, Any]:
        index = len(self.places)
        self.places.append(None)
        recorded = self.recorded[index] if index < len(self.recorded) else None
        if recorded is not None:  # None: a place whose step did not complete
            assert recorded[:2] == (kind, name), (index, recorded, kind, name)
            return index, True, recorded[2]
        return index, False, None

    def reserve(self, name: str) -> ListStep:
        return ListStep(self, name, *self._draw("step", name))

    async def receive(self, topic: str, timeout_s: float) -> Any:
        assert topic == DECISION_TOPIC
        index, found, message = self._draw("recv", topic)
        if not found:
            message = self.decisions.pop(0) if self.decisions else None
        self.places[index] = ("recv", topic, message)
        return message

    async def publish(self, key: str, value: Any) -> None:
        index, _, _ = self._draw("event", key)
        self.places[index] = ("event", key, value)

    marks: list[int | None]

    async def mark_parked(self, pause: int | None) -> None:
        self.__dict__.setdefault("marks", []).append(pause)

    async def leave(self) -> NoReturn:
        raise Left


class Left(Exception):
    """The execution left: the run parked."""


class ListStep:
    def __init__(self, journal: ListJournal, name: str, index: int, found: bool, output: Any) -> None:
        self.journal, self.name, self.index, self.found, self.output = journal, name, index, found, output

    async def run(self, body: Callable[[], Awaitable[Any]]) -> Any:
        output = self.output if self.found else await body()
        self.journal.places[self.index] = ("step", self.name, output)
        return output


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
    # The trace goes with the output: no entry of its own (an event was one more transaction a run).
    records = [json.loads(line) for line in result[TRACE_KEY].splitlines()]
    assert (records[0]["kind"], records[-1]["kind"]) == ("header", "result")
    assert records[-1]["result"] == {key: value for key, value in result.items() if key != TRACE_KEY}
    assert [kind for kind, _, _ in journal.entries] == ["step"] * 7


async def test_a_call_after_a_decision_has_a_start_record_of_its_own(tmp_path):
    journal = ListJournal(decisions=[{"kind": "approve", "call_id": "c1", "pause": 1}])
    spec = {"agent": "approval", "options": {"effects": str(tmp_path / "effects.txt")}}
    result = await durable_run(journal, AGENTS, "record 7", spec)
    assert result["stop_reason"] == "terminated"
    kinds = [(kind, name) for kind, name, _ in journal.entries]
    assert kinds == [
        ("step", "model"),
        ("step", "park_after"),
        ("event", "pause"),
        ("recv", DECISION_TOPIC),
        ("event", "pause"),
        ("step", "tool_started"),
        ("step", "tool"),
        ("step", "model"),
        ("step", "tool"),
    ]
    assert (tmp_path / "effects.txt").read_text().split() == ["7"]


async def test_a_pause_without_a_decision_parks_and_its_replay_waits_where_it_parked(tmp_path):
    """No decision within `park_after_s`: a ``park`` step, the mark, one last look, and the execution
    leaves. The next execution reads all of that back, clears the mark, waits instead of leaving, and
    takes the decision; the approved call runs once."""
    effects = tmp_path / "effects.txt"
    spec = {"agent": "approval", "options": {"effects": str(effects)}}
    first = ListJournal()
    with pytest.raises(Left):
        await durable_run(first, AGENTS, "record 7", spec, park_after_s=0.5)
    assert [(kind, name, value) for kind, name, value in first.entries if name != "pause"] == [
        ("step", "model", first.entries[0][2]),
        ("step", "park_after", {"park_after_s": 0.5}),
        ("recv", DECISION_TOPIC, None),
        ("step", "park", True),
        ("recv", DECISION_TOPIC, None),  # the last look, after the mark
    ]
    assert first.marks == [1] and not effects.exists()

    second = ListJournal(recorded=first.places, decisions=[{"kind": "approve", "call_id": "c1", "pause": 1}])
    result = await durable_run(second, AGENTS, "record 7", spec, park_after_s=60.0)
    assert result["stop_reason"] == "terminated"
    assert second.marks == [None]  # cleared by the execution that goes on; it did not leave again
    assert effects.read_text().split() == ["7"]
    # the recorded setting of the first pause rules the replay, not this worker's 60 s
    assert second.entries[1] == ("step", "park_after", {"park_after_s": 0.5})


async def test_a_decision_seen_in_the_last_look_keeps_the_run_on_its_worker(tmp_path):
    """A decision sent while the run was being marked parked is taken in the last look: the run stays,
    the mark is cleared, and nothing leaves."""
    effects = tmp_path / "effects.txt"
    spec = {"agent": "approval", "options": {"effects": str(effects)}}
    journal = ListJournal(decisions=[None, {"kind": "approve", "call_id": "c1", "pause": 1}])
    result = await durable_run(journal, AGENTS, "record 7", spec, park_after_s=0.1)
    assert result["stop_reason"] == "terminated"
    assert journal.marks == [1, None]
    assert effects.read_text().split() == ["7"]


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
        f"CheckpointError: run 'run-1' was recorded in step layout 1 and this worker replays layout {LAYOUT} "
        "only: "
        "finish it with a worker of the release that started it, or submit its task again"
    )
    assert names(journal) == ["model"] and not (tmp_path / "effects.txt").exists()
    assert [kind for kind, _, _ in journal.entries] == ["step"]  # nothing else
    assert TRACE_KEY not in result  # a refused run's trace would say nothing


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


def times(effects: Path) -> dict[int, tuple[float, float]]:
    """Each call's start and end, as ``mark`` wrote them."""
    lines = (line.split() for line in effects.with_suffix(".times").read_text().splitlines())
    return {int(n): (float(began), float(ended)) for n, began, ended in lines}


async def test_a_batch_of_concurrent_calls_is_carried_by_its_reply_s_model_step(tmp_path):
    """Three calls of one reply run together (each waits for the others inside its call); their tool steps
    take their places in call order though they finish in the reverse one, and the model step before them
    carries all three starts."""
    effects = tmp_path / "effects.txt"
    journal = ListJournal()
    spec = {"agent": "batch", "options": {"effects": str(effects), "delays": [0.3, 0.15, 0]}}
    result = await durable_run(journal, AGENTS, BATCH_TASK, spec)
    assert (result["stop_reason"], result["steps"]) == ("terminated", 2)
    assert names(journal) == ["model", "tool", "tool", "tool", "model", "tool"]
    assert [output["call"]["id"] for _, name, output in journal.entries[1:4]] == ["p1", "p2", "p3"]
    assert effects.read_text().split() == ["3", "2", "1"]  # finished in the reverse order
    spans = times(effects)
    assert max(began for began, _ in spans.values()) < min(ended for _, ended in spans.values())


async def test_a_batch_read_back_after_its_model_step_reports_its_unrecorded_calls_interrupted(tmp_path):
    """Recovered with the model step and the first call to finish (p3) recorded: p1 and p2 may have run
    beside it, so both are reported interrupted and neither runs; p3 keeps its own observation."""
    effects = tmp_path / "effects.txt"
    spec = {"agent": "batch", "options": {"effects": str(effects), "delays": [0.3, 0.15, 0]}}
    first = ListJournal()
    await durable_run(first, AGENTS, BATCH_TASK, spec)
    effects.write_text("3\n")
    journal = ListJournal(recorded=[first.places[0], None, None, first.places[3]])
    result = await durable_run(journal, AGENTS, BATCH_TASK, spec)
    assert (result["stop_reason"], result["steps"]) == ("terminated", 2)
    assert effects.read_text().split() == ["3"]
    observations = {output["call"]["id"]: output for _, name, output in journal.entries[1:4]}
    assert observations["p3"]["content"].endswith("marked 3")
    for call in ("p1", "p2"):
        assert "the run was interrupted while `mark` ran" in observations[call]["content"], call


async def test_a_batch_after_a_decision_has_one_start_record_for_all_its_calls(tmp_path):
    """Approved p1 and p3, rejected p2: one ``tool_started`` step records the starts of the two calls that
    run (together), then their tool steps in call order; the rejected call takes no step."""
    effects = tmp_path / "effects.txt"
    decisions = [
        {"kind": "approve", "call_id": "p1", "pause": 1},
        {"kind": "reject", "call_id": "p2", "reason": "not 2", "pause": 1},
        {"kind": "approve", "call_id": "p3", "pause": 1},
    ]
    journal = ListJournal(decisions=decisions)
    spec = {"agent": "batch", "options": {"effects": str(effects), "approval": True, "together": 2}}
    result = await durable_run(journal, AGENTS, BATCH_TASK, spec)
    assert result["stop_reason"] == "terminated"
    kinds = [(kind, name) for kind, name, _ in journal.entries]
    assert kinds == [
        ("step", "model"),
        ("step", "park_after"),
        ("event", "pause"),
        *[("recv", DECISION_TOPIC), ("event", "pause")] * 2,  # the pause again, with what is left
        ("recv", DECISION_TOPIC),
        ("event", "pause"),
        ("step", "tool_started"),
        ("step", "tool"),
        ("step", "tool"),
        ("step", "model"),
        ("step", "tool"),
    ]
    assert journal.entries[9][2] == {"calls": ["p1", "p3"]}
    assert sorted(effects.read_text().split()) == ["1", "3"]
    pauses = [value for kind, name, value in journal.entries if name == "pause" and value is not None]
    assert [(p["pause"], [c["id"] for c in p["calls"]], p["decided"]) for p in pauses] == [
        (1, ["p1", "p2", "p3"], []),
        (1, ["p2", "p3"], ["p1"]),
        (1, ["p3"], ["p1", "p2"]),
    ]


async def test_a_decision_of_another_pause_or_of_none_is_dropped_and_the_pause_waits_on(tmp_path):
    """Decisions for pause 2, naming no pause, and a second one of a call decided already, while
    the run is at pause 1: each a receive the run drops; only pause 1's own decision lets it go on."""
    effects = tmp_path / "effects.txt"
    decisions = [
        {"kind": "approve", "call_id": "c1", "pause": 2},
        {"kind": "approve", "call_id": "c1"},
        {"kind": "reject", "call_id": "c1", "reason": "no", "pause": 1},
        {"kind": "approve", "call_id": "c1", "pause": 1},
    ]
    journal = ListJournal(decisions=decisions)
    spec = {"agent": "approval", "options": {"effects": str(effects)}}
    result = await durable_run(journal, AGENTS, "a", spec)
    assert result["stop_reason"] == "terminated"
    assert not effects.exists()  # the first decision of pause 1 was the rejection: nothing ran
    recvs = [value for kind, _, value in journal.entries if kind == "recv"]
    assert recvs == decisions[:3]  # the last one was never needed


async def test_a_durable_run_hands_its_agent_a_model_and_a_tool_path_and_patches_no_method(tmp_path):
    """The durable steps come through two seams the agent has, its model (`llm`) and its tool-call
    path (`tool_runner`), and its run's id through `run(run_id=)`: no method of the instance is
    replaced, so an agent class's own methods run as written."""
    built: list[ToolCallAgent] = []

    def keeping(spec: AgentSpec) -> ToolCallAgent:
        agent = AGENTS["record"](spec)
        built.append(agent)
        return agent

    journal = ListJournal()
    spec = {"agent": "record", "options": {"effects": str(tmp_path / "effects.txt")}}
    result = await durable_run(journal, {"record": keeping}, TASK, spec)
    assert (result["run_id"], result["stop_reason"]) == ("run-1", "terminated")
    [agent] = built
    assert isinstance(agent.llm, durable.DurableModel) and isinstance(agent.tool_runner, ToolRunner)
    assert type(agent.tool_runner) is not ToolRunner  # the durable run's own
    replaced = [name for name, value in vars(agent).items() if callable(value) and hasattr(value, "__code__")]
    assert replaced == [], replaced
    assert names(journal) == ["model", "tool", "tool", "model", "tool", "model", "tool"]
