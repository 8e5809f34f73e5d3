"""Checkpoints and resume: a run killed with SIGKILL anywhere continues to the same result.

The kill tests run `checkpoint_child.py` in subprocesses: once to the end (the
reference), then killed after each checkpoint write, inside a write and
inside a tool call, then resumed in a new process. The in-process tests pin
what each phase does on resume, the journal (append-only, replayed into the
same state as memory's), and the errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from agentfsm.agent import ToolCallAgent
from agentfsm.agent.replay import replay
from agentfsm.agent.tool_runner import INTERRUPTED_CALL
from agentfsm.cli import commands as cli_main
from agentfsm.cli import config
from agentfsm.errors import AgentBusyError, CheckpointError, CheckpointLeasedError
from agentfsm.memory import Memory
from agentfsm.messages import Role, ToolCall
from agentfsm.recording import checkpoint, writer
from agentfsm.recording.checkpoint import read_checkpoint
from agentfsm.recording.lease import Lease
from agentfsm.testing import FunctionLLM, ModelRequest, reply
from agentfsm.toolbox import Terminate
from agentfsm.toolbox.tool import tool

CHILD = Path(__file__).with_name("checkpoint_child.py")
WRITES = 18
"""Checkpoint writes of the child's run: 12 transitions and a start and a completion per tool call."""
SIGKILLED = -9


def child(action: str, workdir: Path, kill: str = "none") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHILD), action, str(workdir), kill], capture_output=True, text=True, timeout=60
    )


def outcome(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    result.pop("run_id")
    return result


def effects(workdir: Path) -> list[str]:
    path = workdir / "effects.txt"
    return path.read_text().split() if path.exists() else []


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    workdir = tmp_path_factory.mktemp("reference")
    result = outcome(child("run", workdir))
    assert effects(workdir) == ["1", "2", "3"]
    assert result["stop_reason"] == "terminated"
    assert read_checkpoint(workdir / "run.checkpoint.json")["run_state"]["state"] == "FINISHED"
    return result


def kill_then_resume(base: Path, kill: str) -> tuple[dict[str, Any], dict[str, Any], list[str], list[str]]:
    """Kill a run as `kill` says, resume it: (killed checkpoint, resumed result, effects, resumed memory)."""
    workdir = base / kill.replace(":", "-")
    workdir.mkdir()
    killed = child("run", workdir, kill)
    assert killed.returncode == SIGKILLED, killed.stderr
    saved = read_checkpoint(workdir / "run.checkpoint.json")  # always a whole, valid checkpoint
    assert not [p.name for p in workdir.iterdir() if p.name.endswith(".tmp")]
    result = outcome(child("resume", workdir))
    _replays_as_one_run(workdir / "run.trace.jsonl", result)
    final = read_checkpoint(workdir / "run.checkpoint.json")
    assert final["run_state"]["run_id"] == saved["run_state"]["run_id"]
    tool_texts = [m["content"] for m in final["memory"]["messages"] if m["role"] == "tool"]
    return saved, result, effects(workdir), tool_texts


def _replays_as_one_run(trace: Path, result: dict[str, Any]) -> None:
    """The trace of a run killed and resumed (cut back to the checkpoint, then written on) replays
    as one run, to the result the resumed run printed."""
    replayed = asyncio.run(replay(trace))
    assert replayed.ended_early is None and replayed.result is not None
    again = replayed.result.model_dump(mode="json")
    assert {k: again[k] for k in ("state", "stop_reason", "steps", "output")} == {
        k: result[k] for k in ("state", "stop_reason", "steps", "output")
    }


def test_a_run_killed_after_any_checkpoint_resumes_to_the_same_result_and_runs_no_call_twice(
    reference: dict[str, Any], tmp_path: Path
) -> None:
    kills = [f"write:{k}" for k in range(1, WRITES + 1)]
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 2)) as pool:
        runs = list(pool.map(lambda kill: kill_then_resume(tmp_path, kill), kills))
    states = set()
    in_flight = 0
    for kill, (saved, result, done, tool_texts) in zip(kills, runs, strict=True):
        assert result == reference, kill
        run_state = saved["run_state"]
        states.add((run_state["state"], len(run_state["turn"]["completed_calls"]) > 0))
        turn = run_state["turn"]
        started = [c for c in turn["started_calls"] if c not in turn["completed_calls"]]
        if started in ([], ["c4"]):  # c4 is `terminate`: idempotent, so simply run again
            assert done == ["1", "2", "3"], kill  # each side effect exactly once
            assert INTERRUPTED_CALL.format(name="record") not in tool_texts
        else:  # killed just after a call's start record: not run again (at most once), the model is told
            in_flight += 1
            assert done == [n for n in ("1", "2", "3") if f"c{n}" not in started], kill
            assert INTERRUPTED_CALL.format(name="record") in tool_texts, kill
    assert in_flight == 3  # the kills just after the start record of each `record` call
    assert {("THINKING", False), ("ACTING", False), ("ACTING", True), ("OBSERVING", True)} <= states
    assert ("FINISHED", True) in states  # the last write: resuming gives back the recorded result


def test_a_kill_inside_a_tool_call_never_runs_it_twice(reference: dict[str, Any], tmp_path: Path) -> None:
    """The one window without exactly-once: between a call's start record and its completion record.

    The call is not run again (at most once); the model is told it was
    interrupted. Killed after the side effect, it happened once; killed
    before it, it never happened. The run still ends as the reference does.
    """
    for n in (1, 2, 3):
        for when in ("before", "after"):
            _, result, done, tool_texts = kill_then_resume(tmp_path, f"{when}:{n}")
            assert result == reference
            expected = ["1", "2", "3"] if when == "after" else [x for x in ("1", "2", "3") if x != str(n)]
            assert done == expected, (when, n)
            assert INTERRUPTED_CALL.format(name="record") in tool_texts


def test_a_kill_inside_a_write_leaves_the_previous_checkpoint_and_resume_cleans_up(
    reference: dict[str, Any], tmp_path: Path
) -> None:
    workdir = tmp_path / "torn"
    workdir.mkdir()
    killed = child("run", workdir, "torn:4")
    assert killed.returncode == SIGKILLED, killed.stderr
    journal = workdir / "run.checkpoint.json"
    text = journal.read_text()
    assert not text.endswith("\n") and text.count("\n") == 4  # the header, 3 records, half the 4th
    assert read_checkpoint(journal)["run_state"]["state"] == "ACTING"  # the 3rd write: whole
    assert outcome(child("resume", workdir)) == reference
    lines = journal.read_text().splitlines()
    assert all(json.loads(line) for line in lines)  # the torn line was cut off before appending
    assert [json.loads(line)["kind"] for line in lines].count("header") == 1


def parent_kill_then_resume(base: Path, k: int) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """The parent SIGKILLs the child once it reported its k-th checkpoint (the kill lands a little later)."""
    workdir = base / f"mark-{k}"
    workdir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), "run", str(workdir), "mark"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    seen = 0
    for line in proc.stdout:
        seen += line.strip() == "checkpoint"
        if seen == k:
            proc.send_signal(signal.SIGKILL)
            break
    proc.stdout.close()
    proc.wait(timeout=60)
    saved = read_checkpoint(workdir / "run.checkpoint.json")
    return saved, outcome(child("resume", workdir)), effects(workdir)


def test_a_run_killed_by_the_parent_at_any_moment_finishes_the_same(
    reference: dict[str, Any], tmp_path: Path
) -> None:
    """Real kills at unplanned moments (inside calls, mid-write): no call ever runs twice."""
    ks = list(range(1, WRITES))
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 2)) as pool:
        runs = list(pool.map(lambda k: parent_kill_then_resume(tmp_path, k), ks))
    for k, (saved, result, done) in zip(ks, runs, strict=True):
        assert result == reference, k
        assert sorted(done) == sorted(set(done)), k  # at most once, always
        run_state = saved["run_state"]
        turn = run_state["turn"]
        in_flight = {c for c in turn["started_calls"] if c not in turn["completed_calls"]}
        assert {n for n in ("1", "2", "3") if f"c{n}" not in in_flight} <= set(done), k


# -- leases: one owner at a time ------------------------------------------------------------


def killed_before_the_tools(base: Path, name: str) -> Path:
    """A workdir whose run was killed in ACTING before any call started (everything left to run)."""
    workdir = base / name
    workdir.mkdir()
    assert child("run", workdir, "write:2").returncode == SIGKILLED
    assert read_checkpoint(workdir / "run.checkpoint.json")["run_state"]["state"] == "ACTING"
    return workdir


def test_a_second_resume_while_the_first_runs_is_refused_and_no_tool_runs_twice(
    reference: dict[str, Any], tmp_path: Path
) -> None:
    """A job delivered twice: the second process starts while the first holds the run."""
    workdir = killed_before_the_tools(tmp_path, "twice")
    first = subprocess.Popen(
        [sys.executable, str(CHILD), "resume", str(workdir), "wait"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert first.stdout is not None
    try:
        assert first.stdout.readline().strip() == "checkpoint"  # the first one holds the run now
        second = child("resume", workdir)
    finally:
        (workdir / "go").touch()
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    result = json.loads(out)
    result.pop("run_id")
    assert result == reference
    assert effects(workdir) == ["1", "2", "3"]  # each side effect once: only the first one ran
    assert second.returncode == 2, second.stderr
    message = second.stdout.strip()
    host = os.uname().nodename
    assert message.startswith(f"refused: the checkpoint {str(workdir / 'run.checkpoint.json')!r} is leased ")
    assert f"pid {first.pid} on host {host!r} since 20" in message and "\n" not in message
    assert "wait for that run to end" in message
    assert not (workdir / "run.checkpoint.json.lease").exists()  # released when the run ended


def test_resumes_started_together_run_each_tool_once(reference: dict[str, Any], tmp_path: Path) -> None:
    """Two processes resume the same checkpoint at the same moment, three times over."""

    def race(trial: int) -> tuple[list[subprocess.CompletedProcess[str]], list[str]]:
        workdir = killed_before_the_tools(tmp_path, f"race-{trial}")
        with ThreadPoolExecutor(max_workers=2) as pair:
            procs = list(pair.map(lambda _: child("resume", workdir, "mark"), range(2)))
        return procs, effects(workdir)

    with ThreadPoolExecutor(max_workers=3) as pool:
        trials = list(pool.map(race, range(3)))
    for procs, done in trials:
        assert done == ["1", "2", "3"], [p.stdout for p in procs]
        for proc in procs:
            if proc.returncode == 2:  # refused while the other one held the run
                assert proc.stdout.startswith("refused: the checkpoint "), proc.stdout
            else:  # ran it, or came after and found it finished
                last = json.loads(proc.stdout.splitlines()[-1])
                last.pop("run_id")
                assert last == reference, proc.stderr


def test_the_lease_of_a_killed_process_is_taken_over_by_the_next_resume(
    reference: dict[str, Any], tmp_path: Path
) -> None:
    workdir = killed_before_the_tools(tmp_path, "killed")
    lease = workdir / "run.checkpoint.json.lease"
    owner = json.loads(lease.read_text())  # left behind by the kill, naming the dead process
    assert owner["host"] == os.uname().nodename and owner["pid"] != os.getpid()
    with pytest.raises(ProcessLookupError):
        os.kill(owner["pid"], 0)
    assert outcome(child("resume", workdir)) == reference
    assert effects(workdir) == ["1", "2", "3"]
    assert not lease.exists()


# -- in process: what each phase does on resume --------------------------------------------


class Tools:
    """A counting side-effect tool and a model that answers from the conversation alone."""

    def __init__(self) -> None:
        self.ran: list[int] = []
        recorder = self

        @tool
        async def record(n: int) -> str:
            """Record n."""
            await asyncio.sleep(0.001 * n)  # parallel calls overlap: both start before either ends
            recorder.ran.append(n)
            return f"recorded {n}"

        self.record = record

    def agent(self, **options: Any) -> ToolCallAgent:
        return ToolCallAgent(llm=FunctionLLM(_script), tools=[self.record, Terminate()], name="t", **options)


def _script(request: ModelRequest) -> object:
    done = sum(1 for m in request.messages if m.role is Role.TOOL)
    if done == 0:
        calls = [ToolCall.create("c1", "record", {"n": 1}), ToolCall.create("c2", "record", {"n": 2})]
        return reply("one and two", calls)
    return reply("done", [ToolCall.create("c3", "terminate", {"status": "success"})])


async def checkpoints_by_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **options: Any
) -> list[dict[str, Any]]:
    """Run to the end with checkpointing; every checkpoint as written (each read back right away).

    Each write appends to the journal (what was there stays as it was), and
    the journal read back holds the run state and the memory of the moment the
    record was handed to the journal's writer (it appends in a thread of its own).
    """
    seen: list[dict[str, Any]] = []
    original = checkpoint.append_record
    before = [""]
    expected: list[tuple[dict[str, Any], dict[str, Any]]] = []
    add = writer.RecordWriter.add

    def handed(writer: Any, text: str, *, new: bool) -> None:
        expected.append(
            (agent.run_state.model_dump(mode="json"), agent.memory.snapshot().model_dump(mode="json"))
        )
        add(writer, text, new=new)

    def write_and_read(path: checkpoint.RecordPath, text: str, *, new: bool = False) -> None:
        original(path, text, new=new)
        names = sorted(p.name for p in tmp_path.iterdir())
        assert names == ["run.json", "run.json.lease"]  # the journal and its lease, nothing else
        written = Path(path).read_text()
        assert written == before[0] + text and text.count("\n") == (2 if new else 1)
        assert new == (not before[0])  # the run's first write begins the journal
        before[0] = written
        seen.append(read_checkpoint(path))
        run_state, memory = expected.pop(0)
        assert seen[-1]["run_state"] == run_state
        assert seen[-1]["memory"] == memory

    monkeypatch.setattr(checkpoint, "append_record", write_and_read)
    monkeypatch.setattr(writer.RecordWriter, "add", handed)
    agent = Tools().agent(**options)
    async for transition in agent.iter("go", checkpoint=tmp_path / "run.json"):
        assert seen[-1]["run_state"]["state"] == transition.dest  # written before the edge is yielded
        assert seen[-1]["run_state"]["step"] == agent.current_step
    monkeypatch.undo()
    return seen


async def resume_from(
    saved: dict[str, Any], tmp_path: Path, **options: Any
) -> tuple[Tools, ToolCallAgent, Any]:
    path = tmp_path / "resume.json"
    checkpoint.write_checkpoint(path, saved)
    tools = Tools()
    agent = tools.agent(**options)
    result = await agent.resume(path)
    return tools, agent, result


async def test_resume_in_each_phase(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written = await checkpoints_by_write(tmp_path, monkeypatch)
    reference = await Tools().agent().run("go")

    def first(state: str, completed: int) -> dict[str, Any]:
        return next(
            c
            for c in written
            if c["run_state"]["state"] == state
            and len(c["run_state"]["turn"]["completed_calls"]) == completed
        )

    cases = {  # checkpoint -> (model calls on resume, tool calls that run again)
        "THINKING": (first("THINKING", 0), 2, [1, 2]),  # the model is asked again
        "ACTING": (first("ACTING", 0), 1, [1, 2]),
        "ACTING, c1 completed": (first("ACTING", 1), 1, [2]),  # only the uncompleted call runs
        "OBSERVING": (first("OBSERVING", 2), 1, []),  # observations recorded, nothing re-executed
    }
    for label, (saved, asks, reruns) in cases.items():
        tools, agent, result = await resume_from(saved, tmp_path)
        assert len(agent.llm.requests) == asks, label  # type: ignore[attr-defined]
        assert tools.ran == reruns, label
        assert (result.state, result.stop_reason, result.steps, result.output, result.usage) == (
            reference.state,
            reference.stop_reason,
            reference.steps,
            reference.output,
            reference.usage,
        ), label
        assert result.run_id == saved["run_state"]["run_id"]
        messages = agent.memory.messages
        assert [m.tool_call_id for m in messages if m.role is Role.TOOL] == ["c1", "c2", "c3"], label


async def test_parallel_calls_resume_at_most_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parallel calls start together: a checkpoint can hold both started, none or one completed.

    A resume runs again only what never started; a started call without a
    completion record is reported interrupted, as in sequential ACTING.
    """
    written = await checkpoints_by_write(tmp_path, monkeypatch, parallel_tool_calls=True)
    acting = [c["run_state"]["turn"] for c in written if c["run_state"]["state"] == "ACTING"]
    shapes = [(sorted(r["started_calls"]), sorted(r["completed_calls"])) for r in acting]
    assert ([], []) in shapes and (["c1", "c2"], []) in shapes  # both started before either ended
    assert (["c1", "c2"], ["c1"]) in shapes
    cases = {  # (started, completed) -> (calls run again, calls reported interrupted)
        ((), ()): ([1, 2], []),
        (("c1", "c2"), ()): ([], ["c1", "c2"]),
        (("c1", "c2"), ("c1",)): ([], ["c2"]),
    }
    for (started, completed), (reruns, interrupted) in cases.items():
        saved = next(
            c
            for c in written
            if c["run_state"]["state"] == "ACTING"
            and sorted(c["run_state"]["turn"]["started_calls"]) == list(started)
            and sorted(c["run_state"]["turn"]["completed_calls"]) == list(completed)
        )
        tools, agent, result = await resume_from(saved, tmp_path, parallel_tool_calls=True)
        assert tools.ran == reruns, started
        texts = {m.tool_call_id: m.content for m in agent.memory.messages if m.role is Role.TOOL}
        assert [i for i, t in texts.items() if t == INTERRUPTED_CALL.format(name="record")] == interrupted
        assert all(
            texts[c] == f"Observed output of cmd `record` executed:\nrecorded {c[1]}" for c in completed
        )
        assert (result.stop_reason, result.steps) == ("terminated", 2)


async def test_a_finished_checkpoint_gives_back_its_result(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    tools = Tools()
    result = await tools.agent().run("go", checkpoint=path)
    again = await tools.agent().resume(path)
    assert again == result
    assert tools.ran == [1, 2]


async def test_a_cancelled_run_resumes_from_where_it_was_cancelled(tmp_path: Path) -> None:
    """Its cancellation is the journal's last record; a resume leaves it out and thinks again."""
    path = tmp_path / "run.jsonl"
    thinking = asyncio.Event()

    async def slow(request: ModelRequest) -> Any:
        thinking.set()
        await asyncio.sleep(60)

    first = ToolCallAgent(llm=FunctionLLM(slow), tools=[Terminate()])
    run = asyncio.ensure_future(first.run("go", checkpoint=path))
    await thinking.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert first.last_result is not None and first.last_result.stop_reason == "cancelled"
    assert json.loads(path.read_text().splitlines()[-1])["run_state"]["stop_reason"] == "cancelled"
    assert read_checkpoint(path)["run_state"]["state"] == "ERROR"  # the journal as it ends
    assert read_checkpoint(path, resuming=True)["run_state"]["state"] == "THINKING"  # when cancelled

    done = reply(tool_calls=[("terminate", {"status": "success"})])
    again = ToolCallAgent(llm=FunctionLLM(lambda request: done), tools=[Terminate()])
    result = await again.resume(path)
    assert (result.state, result.stop_reason, result.steps) == ("FINISHED", "terminated", 1)
    assert read_checkpoint(path)["run_state"]["stop_reason"] == "terminated"  # appended after it


async def test_this_process_cannot_resume_a_checkpoint_it_is_still_running(tmp_path: Path) -> None:
    """Nor start a new run on it: the run in progress owns the journal until it ends."""
    path = tmp_path / "run.json"
    tools = Tools()
    refusals: list[str] = []
    async for transition in tools.agent().iter("go", checkpoint=path):
        if transition.dest == "ACTING" and not refusals:
            for attempt in (
                lambda: tools.agent().resume_iter(path),
                lambda: tools.agent().iter("again", checkpoint=path),
            ):
                with pytest.raises(CheckpointLeasedError) as refused:
                    attempt()
                refusals.append(str(refused.value))
            with pytest.raises(CheckpointLeasedError):
                await tools.agent().resume(path)
    assert len(refusals) == 2 and tools.ran == [1, 2]  # the first run's calls, once
    message = refusals[0]
    assert message.startswith(f"the checkpoint {str(path)!r} is leased by this process (pid {os.getpid()} ")
    assert "\n" not in message and "resume()" in message
    assert not (tmp_path / "run.json.lease").exists()
    again = await tools.agent().resume(path)  # the lease went with the run: the result comes back
    assert again.stop_reason == "terminated" and tools.ran == [1, 2]


async def test_a_run_whose_lease_file_was_removed_stops_before_its_next_call(tmp_path: Path) -> None:
    """Its lease is lost (another run may own the journal now): no tool runs, the run ends in ERROR."""
    path = tmp_path / "run.json"
    tools = Tools()
    agent = tools.agent()
    with contextlib.suppress(CheckpointLeasedError):
        async for transition in agent.iter("go", checkpoint=path):
            if transition.dest == "ACTING":
                os.unlink(tmp_path / "run.json.lease")
    assert tools.ran == []  # the call's start record is refused before the call runs
    assert agent.last_result is not None and agent.last_result.state == "ERROR"
    assert (agent.last_result.error or "").startswith(
        f"CheckpointLeasedError: the lease of the checkpoint {str(path)!r} was lost: "
    )


async def test_a_compacted_copy_is_not_written_over_a_checkpoint_in_use(tmp_path: Path) -> None:
    path, copy = tmp_path / "run.json", tmp_path / "copy.json"
    async for transition in Tools().agent().iter("go", checkpoint=path):
        if transition.dest == "ACTING":
            with pytest.raises(CheckpointLeasedError, match="is leased by this process"):
                checkpoint.write_checkpoint(path, read_checkpoint(path))
            checkpoint.write_checkpoint(copy, read_checkpoint(path))  # elsewhere: a compacted copy
    assert read_checkpoint(path)["run_state"]["state"] == "FINISHED"
    assert read_checkpoint(copy)["run_state"]["state"] == "ACTING"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.json", "run.json"]


async def test_resume_refuses_another_configuration(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    await Tools().agent().run("go", checkpoint=path)
    with pytest.raises(CheckpointError, match="these options differ: max_steps"):
        await Tools().agent(max_steps=3).resume(path)
    other = ToolCallAgent(llm=FunctionLLM(_script), tools=[Terminate()])
    with pytest.raises(CheckpointError, match="tools"):
        other.resume_iter(path)


def test_unreadable_checkpoints_are_clear_errors(tmp_path: Path) -> None:
    agent = Tools().agent()
    with pytest.raises(CheckpointError, match="cannot read"):
        agent.resume_iter(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not JSON"):
        agent.resume_iter(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text('{"schema": 99}')
    with pytest.raises(CheckpointError, match="schema"):
        agent.resume_iter(tmp_path / "other.json")
    (tmp_path / "torn.json").write_text('{"kind": "header", "schema": 2, "agent_class": "x", "con')
    with pytest.raises(CheckpointError, match="holds no whole record"):
        agent.resume_iter(tmp_path / "torn.json")


def test_a_checkpoint_of_another_schema_is_refused_with_the_fix(tmp_path: Path) -> None:
    """A schema 1 checkpoint (one JSON object, rewritten whole) names the file, both versions, the fix."""
    old = tmp_path / "run.json"
    old.write_text(json.dumps({"schema": 1, "agent_class": "x", "config": {}, "run_state": {}, "memory": {}}))
    with pytest.raises(CheckpointError) as refused:
        Tools().agent().resume_iter(old)
    message = str(refused.value)
    assert message == (
        f"{old}: checkpoint schema 1 is not supported; this agentfsm reads schemas 2 and 3; "
        "finish that run with the agentfsm that wrote it, or start it again"
    )
    assert checkpoint.CHECKPOINT_SCHEMA == 3 and "\n" not in message


async def test_a_new_run_on_a_checkpoint_begins_a_new_journal(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    tools = Tools()
    first = await tools.agent().run("go", checkpoint=path)
    second = await tools.agent().run("go again", checkpoint=path)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["kind"] for r in records[:2]] == ["header", "checkpoint"]
    assert [r["kind"] for r in records].count("header") == 1
    assert {r["run_state"]["run_id"] for r in records[1:]} == {second.run_id} != {first.run_id}
    assert records[1]["memory"][0]["op"] == "snapshot"  # memory whole once, then what changed
    assert all(c["op"] != "snapshot" for r in records[2:] for c in r["memory"])
    assert "seen" in records[1]["run_state"]  # stuck detection's counts too: whole once, then changes
    assert not any("seen" in r["run_state"] for r in records[2:])
    assert any(r["seen"] for r in records[2:]) and all(len(r["seen"]) <= 1 for r in records[2:])


async def test_the_journal_follows_memory_relimited_replaced_or_cleared_mid_run(tmp_path: Path) -> None:
    """Changes a caller makes between steps reach the next record: memory reads back as it is."""
    path = tmp_path / "run.json"
    agent = Tools().agent()
    changes = {
        ("THINKING", 1): lambda: setattr(agent.memory, "max_messages", 50),
        ("ACTING", 1): lambda: setattr(agent, "memory", Memory.from_snapshot(agent.memory.snapshot())),
        ("THINKING", 2): lambda: agent.memory.clear(),
    }
    seen = []
    async for transition in agent.iter("go", checkpoint=path):
        assert read_checkpoint(path)["memory"] == agent.memory.snapshot().model_dump(mode="json")
        seen.append((transition.dest, transition.step))
        changes.get((transition.dest, transition.step), lambda: None)()
    assert {("THINKING", 1), ("ACTING", 1), ("THINKING", 2)} <= set(seen)
    ops = [c["op"] for line in path.read_text().splitlines()[1:] for c in json.loads(line)["memory"]]
    assert ops.count("snapshot") == 3 and "clear" in ops  # the first, the new limit, the new object


async def test_a_resumed_run_appends_and_reads_back_as_it_ran(tmp_path: Path) -> None:
    """Killed in ACTING, resumed: the journal goes on from there, and reads back as memory is."""
    path, killed = tmp_path / "run.json", tmp_path / "killed.json"
    agent = Tools().agent(memory=Memory(3))  # trimming: drops in the journal, the request pinned
    async for transition in agent.iter("go", checkpoint=path):
        if (transition.dest, transition.step) == ("ACTING", 1):
            shutil.copyfile(path, killed)  # the journal a kill on entering ACTING would leave
    lines = killed.read_text().count("\n")
    resumed = Tools().agent(memory=Memory(3))
    result = await resumed.resume(killed)
    assert result.stop_reason == "terminated"
    records = [json.loads(line) for line in killed.read_text().splitlines()]
    appended = records[lines:]
    assert [r["kind"] for r in appended] == ["checkpoint"] * len(appended)
    assert appended[0]["memory"][0]["op"] == "snapshot" and "config" in appended[0]
    assert all("config" not in r for r in appended[1:])
    assert any(c["op"] == "drop" for r in appended for c in r["memory"])
    assert read_checkpoint(killed)["memory"] == resumed.memory.snapshot().model_dump(mode="json")
    assert read_checkpoint(killed)["memory"] == read_checkpoint(path)["memory"]


# -- the command line ------------------------------------------------------------------------


@pytest.fixture
def scripted_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[ModelRequest]]:
    """`cli.main` with a scripted model that reports a model name (recorded, then reused by resume)."""
    for name in list(os.environ):
        if name.upper().startswith("AGENTFSM_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    requests: list[ModelRequest] = []

    def build(settings: Any) -> FunctionLLM:
        assert settings.model == "openai/test-model"
        llm = FunctionLLM(_cli_script)
        llm.model = "openai/test-model"  # type: ignore[attr-defined]
        llm.requests = requests
        return llm

    monkeypatch.setattr(config, "build_llm", build)
    yield requests


def _cli_script(request: ModelRequest) -> object:
    if not any(m.role is Role.TOOL for m in request.messages):
        return reply("look", [ToolCall.create("s1", "search", {"q": "x"})])  # unknown: an error observation
    return reply("done", [ToolCall.create("t1", "terminate", {"status": "success"})])


def test_cli_resume_continues_a_killed_run(
    scripted_cli: list[ModelRequest],
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cp, mid = tmp_path / "run.json", tmp_path / "mid.json"
    original = checkpoint.append_record

    def keep_step_2_thinking(path: checkpoint.RecordPath, text: str, *, new: bool = False) -> None:
        original(path, text, new=new)
        run_state = json.loads(text.splitlines()[-1])["run_state"]
        if (run_state["state"], run_state["step"]) == ("THINKING", 2):
            shutil.copyfile(path, mid)  # the file a kill on entering step 2's THINKING would leave

    monkeypatch.setattr(checkpoint, "append_record", keep_step_2_thinking)
    assert (
        cli_main.main(["run", "do it", "--model", "openai/test-model", "--json", "--checkpoint", str(cp)])
        == 0
    )
    monkeypatch.setattr(checkpoint, "append_record", original)
    finished = json.loads(capfd.readouterr().out)
    assert len(scripted_cli) == 2

    scripted_cli.clear()
    assert cli_main.main(["resume", str(cp), "--json"]) == 0
    out, err = capfd.readouterr()
    assert json.loads(out) == finished
    assert "the run already finished" in err
    assert scripted_cli == []  # nothing ran

    assert cli_main.main(["resume", str(mid)]) == 0  # the model name comes from the checkpoint
    out, err = capfd.readouterr()
    assert len(scripted_cli) == 1  # the model was asked again
    assert out.splitlines()[0] == finished["output"]
    assert "FINISHED  stop_reason=terminated  steps=2" in err
    assert read_checkpoint(mid)["run_state"]["state"] == "FINISHED"


def test_cli_resume_rebuilds_the_recorded_options_whatever_the_file_says(
    scripted_cli: list[ModelRequest], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    cp = tmp_path / "run.json"
    run = ["run", "do it", "--model", "openai/test-model", "--max-steps", "7", "--checkpoint", str(cp)]
    assert cli_main.main([*run, "--json"]) == 0
    finished = json.loads(capfd.readouterr().out)
    assert read_checkpoint(cp)["config"]["max_steps"] == 7
    (tmp_path / "agentfsm.toml").write_text(
        '[agent]\nmax_steps = 2\nstuck_limit = 5\nsystem_prompt = "other"\n'
    )
    assert cli_main.main(["resume", str(cp), "--json"]) == 0  # the checkpoint's options, not the file's
    out, err = capfd.readouterr()
    assert json.loads(out) == finished and "the run already finished" in err


def test_cli_resume_errors_are_usage_errors(scripted_cli: list[ModelRequest], tmp_path: Path) -> None:
    assert cli_main.main(["resume", str(tmp_path / "missing.json")]) == 2


def test_cli_resume_of_a_leased_checkpoint_is_one_line_and_status_2(
    scripted_cli: list[ModelRequest],
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentfsm.recording.lease import Lease

    done, cp = tmp_path / "done.json", tmp_path / "run.json"
    original = checkpoint.append_record

    def keep_step_2_thinking(path: checkpoint.RecordPath, text: str, *, new: bool = False) -> None:
        original(path, text, new=new)
        run_state = json.loads(text.splitlines()[-1])["run_state"]
        if (run_state["state"], run_state["step"]) == ("THINKING", 2):
            shutil.copyfile(path, cp)  # a run in progress: the one that holds the lease

    monkeypatch.setattr(checkpoint, "append_record", keep_step_2_thinking)
    assert cli_main.main(["run", "do it", "--model", "openai/test-model", "--checkpoint", str(done)]) == 0
    monkeypatch.setattr(checkpoint, "append_record", original)
    capfd.readouterr()
    held = Lease.acquire(cp)  # another run holds it
    try:
        scripted_cli.clear()
        assert cli_main.main(["resume", str(cp), "--json"]) == 2
        out, err = capfd.readouterr()
        assert out == "" and scripted_cli == []
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            f"agentfsm: error: the checkpoint {str(cp)!r} is leased"
        )
        assert cli_main.main(["run", "do it", "--model", "openai/test-model", "--checkpoint", str(cp)]) == 2
        assert "is leased" in capfd.readouterr().err
    finally:
        held.release()
    assert cli_main.main(["resume", str(cp), "--json"]) == 0
    assert len(scripted_cli) == 1  # the model asked once, by the resume that held the lease


# -- the file system off the event loop: a run's lease, and the lease's check before each append


def _blocking_acquire(
    monkeypatch: pytest.MonkeyPatch, release: threading.Event, taken: threading.Event | None = None
) -> list[str]:
    """`Lease.acquire`, made to wait for `release` (set from the loop) and to say where it ran
    (`taken`: set once it has taken the lease)."""
    acquire = Lease.acquire
    threads: list[str] = []

    def waiting(path: Any) -> Lease:
        threads.append(threading.current_thread().name)
        if not release.wait(5):  # on the loop it would wait out the timeout: the loop is what sets it
            raise AssertionError("the lease was taken on the event loop: the loop could not go on")
        lease = acquire(path)
        if taken is not None:
            taken.set()
        return lease

    monkeypatch.setattr(Lease, "acquire", staticmethod(waiting))
    return threads


async def test_a_run_leases_its_checkpoint_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fifty runs starting at once would otherwise each wait on the loop for the file system (a
    create, a lock, a stat wait while it commits another run's fsync): the loop goes on meanwhile."""
    release = threading.Event()
    threads = _blocking_acquire(monkeypatch, release)
    tools = Tools()
    run = asyncio.create_task(tools.agent().run("go", checkpoint=tmp_path / "run.json"))
    await asyncio.sleep(0.05)
    release.set()  # the loop runs while the lease is being taken
    result = await run
    assert result.stop_reason == "terminated" and tools.ran == [1, 2]
    assert threads and threads[0].startswith("agentfsm-recording")


async def test_a_run_cancelled_while_it_leases_its_checkpoint_leaves_it_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.json"
    release, taken = threading.Event(), threading.Event()
    threads = _blocking_acquire(monkeypatch, release, taken)
    tools = Tools()
    run = asyncio.create_task(tools.agent().run("go", checkpoint=path))
    while not threads:  # the run is waiting for its lease
        await asyncio.sleep(0.01)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    release.set()  # the lease is taken after its run was cancelled: it is released, not kept
    assert await asyncio.to_thread(taken.wait, 10)
    monkeypatch.undo()
    for _ in range(500):  # released by the job's callback, in the writers' thread, right after
        if not (tmp_path / "run.json.lease").exists():
            break
        await asyncio.sleep(0.01)
    assert not (tmp_path / "run.json.lease").exists()
    Lease.acquire(path).release()  # free: no CheckpointLeasedError
    assert tools.ran == [] and not path.exists()


async def test_a_second_run_of_a_busy_agent_is_refused_and_leaves_its_checkpoint_free(tmp_path: Path) -> None:
    """Both pass the first check while their leases are taken; whichever is second to claim the
    agent is refused then, and gives its lease back."""
    tools = Tools()
    agent = tools.agent()
    paths = [tmp_path / "first.json", tmp_path / "second.json"]
    outcomes = await asyncio.gather(*(agent.run("go", checkpoint=p) for p in paths), return_exceptions=True)
    refused = [i for i, o in enumerate(outcomes) if isinstance(o, AgentBusyError)]
    assert len(refused) == 1, outcomes
    ran = outcomes[1 - refused[0]]
    assert not isinstance(ran, BaseException) and ran.stop_reason == "terminated" and tools.ran == [1, 2]
    for path in paths:
        Lease.acquire(path).release()  # both free again: no CheckpointLeasedError
    assert not paths[refused[0]].exists()


async def test_the_lease_is_checked_before_each_append_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    verify = Lease.verify
    threads: set[str] = set()

    def where(self: Lease) -> None:
        threads.add(threading.current_thread().name)
        verify(self)

    monkeypatch.setattr(Lease, "verify", where)
    result = await Tools().agent().run("go", checkpoint=tmp_path / "run.json")
    assert result.stop_reason == "terminated"
    assert threads and all(name.startswith("agentfsm-recording") for name in threads), threads
