"""A flow's checkpoint: a pause for plan review survives a SIGKILL; a killed step runs again."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentfsm import ToolCallAgent
from agentfsm.errors import CheckpointError, CheckpointLeasedError
from agentfsm.flow import PlanningFlow
from agentfsm.flow.checkpoint import read_flow_checkpoint
from agentfsm.testing import ScriptedLLM, reply

CHILD = Path(__file__).with_name("flow_checkpoint_child.py")


def child(action: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHILD), action, str(workdir)], capture_output=True, text=True, timeout=60
    )


def test_a_review_pause_survives_a_sigkill_and_the_approved_plan_runs(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, str(CHILD), "run", str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "paused"
        process.kill()  # SIGKILL
    finally:
        process.wait(timeout=30)
    assert process.returncode == -9

    again = child("resume", tmp_path)
    assert again.returncode == 0, again.stderr
    paused = json.loads(again.stdout)
    assert (paused["state"], paused["stop_reason"]) == ("RUNNING", "awaiting_plan_review")
    assert [s["text"] for s in paused["plan"]["steps"]] == ["one", "two"]

    done = child("approve", tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["state"], result["stop_reason"]) == ("FINISHED", "completed")
    assert [(s["agent"], s["status"]) for s in result["plan"]["steps"]] == [
        ("coder", "completed"),
        ("writer", "completed"),
    ]
    assert result["summary"] == "summary after the restart"
    final = read_flow_checkpoint(tmp_path / "flow.checkpoint.json")
    assert final["run_state"]["state"] == "DONE"


def test_a_step_paused_for_approval_survives_a_sigkill_and_its_call_runs_once_after(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, str(CHILD), "step-run", str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "paused"
        process.kill()  # SIGKILL while the step's agent waits for approval
    finally:
        process.wait(timeout=30)
    assert process.returncode == -9
    saved = read_flow_checkpoint(tmp_path / "flow.checkpoint.json")
    assert saved["run_state"]["state"] == "AWAITING_AGENT"
    assert saved["agents"]["coder"]["run_state"]["state"] == "AWAITING_APPROVAL"
    assert not (tmp_path / "ran").exists()

    done = child("step-approve", tmp_path)
    assert done.returncode == 0, done.stderr
    waiting, final = (json.loads(line) for line in done.stdout.splitlines())
    assert [(c["name"], c["arguments"]) for c in waiting] == [("record", '{"n": 1}')]
    assert (final["state"], final["stop_reason"]) == ("FINISHED", "completed")
    assert [(s["status"], s["attempts"], s["notes"]) for s in final["plan"]["steps"]] == [
        ("completed", 1, "recorded after the restart")
    ]
    assert (tmp_path / "ran").read_text() == "1\n"  # the approved call ran once, after the restart
    assert final["summary"] == "summary after the restart"


def test_a_kill_in_the_middle_of_a_checkpoint_write_leaves_the_one_before(tmp_path: Path) -> None:
    killed = child("write-kill", tmp_path)
    assert killed.returncode == -9, killed.stderr
    assert not (tmp_path / "flow.checkpoint.json").read_text().endswith("\n")  # the write cut short
    saved = read_flow_checkpoint(tmp_path / "flow.checkpoint.json")  # whole, and the one before
    assert saved["run_state"]["state"] == "EXECUTING"
    assert [s["status"] for s in saved["flow_state"]["plan"]["steps"]] == ["not_started", "not_started"]


def test_a_flow_killed_inside_a_step_runs_that_step_again_and_keeps_the_one_before(tmp_path: Path) -> None:
    killed = child("run-kill", tmp_path)
    assert killed.returncode == -9, killed.stderr
    saved = read_flow_checkpoint(tmp_path / "flow.checkpoint.json")
    assert saved["run_state"]["state"] == "EXECUTING"
    assert [s["status"] for s in saved["flow_state"]["plan"]["steps"]] == ["completed", "not_started"]

    done = child("resume-kill", tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["stop_reason"] == "completed"
    assert [(s["status"], s["attempts"], s["notes"]) for s in result["plan"]["steps"]] == [
        ("completed", 1, "one done"),
        ("completed", 1, "two done"),
    ]
    assert [r["agent"] for r in result["runs"]] == ["coder", "writer"]  # the killed run left no result


async def test_resume_refuses_another_flow_and_a_held_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "flow.json"
    plan = reply(tool_calls=[("planning", {"command": "create", "title": "T", "steps": ["[coder] a"]})])
    flow = PlanningFlow(
        agents={"coder": ToolCallAgent(llm=ScriptedLLM([]), name="coder")},
        planner_llm=ScriptedLLM([plan]),
        review=True,
    )
    assert (await flow.execute("task", checkpoint=path)).paused
    other = PlanningFlow(
        agents={"coder": ToolCallAgent(llm=ScriptedLLM([]), name="coder")},
        planner_llm=ScriptedLLM([]),
        review=True,
    )
    with pytest.raises(CheckpointLeasedError):
        await other.resume(checkpoint=path)
    flow.cancel_plan()
    assert (await flow.resume()).stop_reason == "plan_cancelled"
    wrong = PlanningFlow(
        agents={"writer": ToolCallAgent(llm=ScriptedLLM([]), name="writer")}, planner_llm=ScriptedLLM([])
    )
    with pytest.raises(CheckpointError, match="build it as the one that wrote it"):
        await wrong.resume(checkpoint=path)


def test_a_document_that_is_not_a_flow_s_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"schema": 1, "agent_class": "x"}')
    with pytest.raises(CheckpointError, match="is not a flow checkpoint of schema 3"):
        read_flow_checkpoint(path)


async def test_flow_checkpoint_writes_run_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every write and fsync of a flow's checkpoint happens in a thread other than the event loop's
    (an fsync takes a millisecond, or hundreds under load: the loop's other runs never wait on it),
    and each one leaves the whole flow of a transition in the journal."""
    import threading

    from agentfsm.recording import checkpoint

    loop_thread = threading.get_ident()
    threads: list[int] = []
    states: list[str] = []
    write = checkpoint._write_batch

    def writing(path: object, batch: list[tuple[str, bool]]) -> None:
        threads.append(threading.get_ident())
        write(path, batch)  # type: ignore[arg-type]
        states.append(read_flow_checkpoint(Path(str(path)))["run_state"]["state"])

    monkeypatch.setattr(checkpoint, "_write_batch", writing)
    plan = reply(
        tool_calls=[("planning", {"command": "create", "title": "T", "steps": ["[coder] a", "[coder] b"]})]
    )
    flow = PlanningFlow(
        agents={"coder": ToolCallAgent(llm=ScriptedLLM([reply("a done"), reply("b done")]), name="coder")},
        planner_llm=ScriptedLLM([plan, reply("sum")]),
    )
    result = await flow.execute("task", checkpoint=tmp_path / "flow.json")
    assert result.ok
    assert threads and loop_thread not in threads
    assert states[-1] == "DONE" and set(states) <= {"PLANNING", "EXECUTING", "FINALIZING", "DONE"}
    assert read_flow_checkpoint(tmp_path / "flow.json")["run_state"]["state"] == "DONE"


async def test_resume_refuses_a_flow_whose_agents_or_limits_differ_and_takes_another_model(
    tmp_path: Path,
) -> None:
    path = tmp_path / "flow.json"
    plan = reply(tool_calls=[("planning", {"command": "create", "title": "T", "steps": ["[coder] a"]})])

    def build(planner: ScriptedLLM, *, max_steps: int = 5, max_replans: int = 3) -> PlanningFlow:
        coder = ToolCallAgent(llm=ScriptedLLM([reply("a done")]), name="coder", max_steps=max_steps)
        return PlanningFlow(
            agents={"coder": coder}, planner_llm=planner, review=True, max_replans=max_replans
        )

    first = build(ScriptedLLM([plan]))
    assert (await first.execute("task", checkpoint=tmp_path / "held.json")).paused
    shutil.copy(tmp_path / "held.json", path)  # as a process killed in the pause left it: nobody holds it
    saved = read_flow_checkpoint(path)
    assert saved["config"]["llm"]["class"] == "ScriptedLLM"
    assert saved["config"]["agents"]["coder"]["agent_class"] == "agentfsm.agent.toolcall.ToolCallAgent"
    assert saved["config"]["agents"]["coder"]["config"]["max_steps"] == 5
    assert saved["config"]["agents"]["coder"]["config"]["llm"]["class"] == "ScriptedLLM"

    with pytest.raises(CheckpointError) as refused:
        await build(ScriptedLLM([]), max_steps=9).resume(checkpoint=path)
    message = str(refused.value)
    assert "\n" not in message
    assert "coder.max_steps is 5 in the checkpoint, 9 here" in message and "agentfsm resume" in message
    with pytest.raises(CheckpointError, match="max_replans is 3 in the checkpoint, 1 here"):
        await build(ScriptedLLM([]), max_replans=1).resume(checkpoint=path)

    from agentfsm.testing import FunctionLLM

    other_model = FunctionLLM(lambda request: reply("summed by another model"))  # type: ignore[arg-type,return-value]
    again = PlanningFlow(
        agents={"coder": ToolCallAgent(llm=ScriptedLLM([reply("a done")]), name="coder", max_steps=5)},
        planner_llm=other_model,
        review=True,
    )
    assert (await again.resume(checkpoint=path)).paused
    again.approve_plan()
    result = await again.resume()
    assert result.ok and result.summary == "summed by another model"


async def test_a_cancelled_flow_resumes_from_the_state_it_was_cancelled_in(tmp_path: Path) -> None:
    """The flow's task cancelled while the second step's agent thinks: the checkpoint says
    `cancelled`, and a resume (by the same flow, then by a new one) runs that step again from the
    memory its agent started with, keeping the first step done; ended otherwise, it stays ended."""
    import asyncio

    from agentfsm.testing import FunctionLLM, ModelRequest

    path = tmp_path / "flow.json"
    thinking = asyncio.Event()

    async def never(request: ModelRequest) -> object:
        thinking.set()
        await asyncio.sleep(60)
        raise AssertionError("cancelled before")

    plan = reply(
        tool_calls=[
            ("planning", {"command": "create", "title": "T", "steps": ["[coder] one", "[writer] two"]})
        ]
    )

    def build(planner: ScriptedLLM, writer: Any) -> PlanningFlow:
        coder = ToolCallAgent(llm=ScriptedLLM([reply("one done")]), name="coder")
        agents = {"coder": coder, "writer": ToolCallAgent(llm=writer, name="writer")}
        return PlanningFlow(agents=agents, planner_llm=planner)

    flow = build(ScriptedLLM([plan]), FunctionLLM(never))
    task = asyncio.ensure_future(flow.execute("two steps", checkpoint=path))
    await asyncio.wait_for(thinking.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    saved = read_flow_checkpoint(path)
    assert (saved["run_state"]["state"], saved["run_state"]["stop_reason"]) == ("ERROR", "cancelled")
    before = read_flow_checkpoint(path, resuming=True)
    assert before["run_state"]["state"] == "EXECUTING" and before["run_state"]["stop_reason"] is None
    assert [s["status"] for s in before["flow_state"]["plan"]["steps"]] == ["completed", "not_started"]
    assert before["agents"]["writer"]["memory"]["messages"] == []  # as the step found it
    assert read_flow_checkpoint(path)["run_state"]["state"] == "ERROR"  # what a reader is shown

    shutil.copy(path, tmp_path / "copy.json")
    flow.agents["writer"].llm = ScriptedLLM([reply("two done")])
    flow.planner_llm = ScriptedLLM([reply("summed up")])
    result = await flow.resume(checkpoint=path)  # the same flow, in the same process
    assert (result.stop_reason, result.summary) == ("completed", "summed up")
    assert [(s.status, s.attempts, s.notes) for s in result.plan.steps] == [  # type: ignore[union-attr]
        ("completed", 1, "one done"),
        ("completed", 1, "two done"),
    ]
    assert [r.agent for r in result.runs] == ["coder", "writer"]  # the cancelled run left no result
    assert [m.content for m in flow.agents["writer"].memory.messages][1:] == ["two done"]

    again = build(ScriptedLLM([reply("summed up anew")]), ScriptedLLM([reply("two done anew")]))
    result = await again.resume(checkpoint=tmp_path / "copy.json")  # a new flow, as a new process's
    assert (result.stop_reason, result.summary) == ("completed", "summed up anew")
    assert read_flow_checkpoint(tmp_path / "copy.json")["run_state"]["state"] == "DONE"

    finished = build(ScriptedLLM([]), ScriptedLLM([]))  # a flow that ended: its result, nothing runs
    ended = await finished.resume(checkpoint=path)
    assert (ended.stop_reason, ended.summary) == ("completed", "summed up")
    assert finished.planner_llm.requests == []  # type: ignore[attr-defined]


async def test_a_flow_cancelled_right_after_its_resume_resumes_from_the_same_state(tmp_path: Path) -> None:
    """Cancelled before any transition of the resumed run: the document it was restored from is
    the one a second resume continues from."""
    import asyncio

    from agentfsm.testing import FunctionLLM, ModelRequest

    path = tmp_path / "flow.json"
    thinking = asyncio.Event()

    async def never(request: ModelRequest) -> object:
        thinking.set()
        await asyncio.sleep(60)
        raise AssertionError("cancelled before")

    plan = reply(tool_calls=[("planning", {"command": "create", "title": "T", "steps": ["[coder] one"]})])
    flow = PlanningFlow(
        agents={"coder": ToolCallAgent(llm=FunctionLLM(never), name="coder")}, planner_llm=ScriptedLLM([plan])
    )
    for run in (lambda: flow.execute("one step", checkpoint=path), lambda: flow.resume(checkpoint=path)):
        thinking.clear()
        task = asyncio.ensure_future(run())
        await asyncio.wait_for(thinking.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert read_flow_checkpoint(path)["run_state"]["stop_reason"] == "cancelled"
        before = read_flow_checkpoint(path, resuming=True)
        assert before["run_state"]["state"] == "EXECUTING"
        assert [s["status"] for s in before["flow_state"]["plan"]["steps"]] == ["not_started"]


async def test_a_flow_cancelled_while_its_approver_decides_asks_again_on_resume(tmp_path: Path) -> None:
    """Cancelled in AWAITING_AGENT, its step's agent still paused: the same flow resumed from the
    checkpoint ends that agent's old pause and waits again for the same call, which then runs once."""
    import asyncio

    from agentfsm import tool

    path = tmp_path / "flow.json"
    ran: list[int] = []
    deciding = asyncio.Event()

    @tool
    def record(n: int) -> str:
        """Records `n` (a call that needs approval)."""
        ran.append(n)
        return f"recorded {n}"

    async def slow_approver(calls: Any) -> Any:
        deciding.set()
        await asyncio.sleep(60)

    plan = reply(tool_calls=[("planning", {"command": "create", "title": "T", "steps": ["[coder] record"]})])
    replies = [reply("recording", [("record", {"n": 1})]), reply("recorded")]
    coder = ToolCallAgent(llm=ScriptedLLM(replies), tools=[record], name="coder", require_approval=["record"])
    flow = PlanningFlow(
        agents={"coder": coder}, planner_llm=ScriptedLLM([plan, reply("sum")]), approver=slow_approver
    )
    task = asyncio.ensure_future(flow.execute("record one", checkpoint=path))
    await asyncio.wait_for(deciding.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert read_flow_checkpoint(path)["run_state"]["stop_reason"] == "cancelled"
    assert coder.fsm_state == "AWAITING_APPROVAL"  # the flow's run ended; its agent's pause did not

    flow.approver = None  # the app decides this time
    paused = await flow.resume(checkpoint=path)
    assert (paused.stop_reason, [c.name for c in paused.pending_approval]) == (
        "awaiting_approval",
        ["record"],
    )
    flow.approve()
    result = await flow.resume()
    assert (result.stop_reason, ran) == ("completed", [1])


def _flow_damages(doc: dict[str, Any]) -> dict[str, tuple[dict[str, Any], str]]:
    """Damaged copies of a flow's document, each with what the refusal says is wrong."""
    coder = doc["agents"]["coder"]
    memory = coder["memory"]  # empty: the flow paused before its first step

    def agent(**changed: Any) -> dict[str, Any]:
        return {**doc, "agents": {"coder": {**coder, "memory": {**memory, **changed}}}}

    orphan = {"role": "tool", "content": "x", "tool_call_id": "zz"}
    return {
        "tool message answering no pending call": (
            agent(messages=[{"role": "user", "content": "go"}, orphan]),
            "the memory of its agent 'coder' does not read back (tool message for call id 'zz' "
            "answers no pending call",
        ),
        "unknown role": (
            agent(messages=[{"role": "wizard", "content": "go"}]),
            "(messages.0.role: Input should be 'system', 'user', 'assistant' or 'tool', got 'wizard')",
        ),
        "max_messages of 1": (agent(max_messages=1), "(`max_messages` must be at least 2"),
        "flow state of the wrong shape": (
            {**doc, "flow_state": {**doc["flow_state"], "replans": "many"}},
            "its flow_state does not read back (replans: Input should be a valid integer",
        ),
        "run state of the wrong shape": (
            {**doc, "run_state": {**doc["run_state"], "step": "x"}},
            "its run_state does not read back (step:",
        ),
        "agents not a table": ({**doc, "agents": []}, "its agents is [], not a table"),
        "agent without memory": ({**doc, "agents": {"coder": 3}}, "its agent 'coder' is 3, not a table"),
        "llm config not a table": (
            {**doc, "config": {**doc["config"], "llm": "m"}},
            "its config's llm is 'm'",
        ),
        "a part missing": ({k: v for k, v in doc.items() if k != "flow_state"}, "it lacks flow_state"),
    }


async def test_a_damaged_flow_checkpoint_is_one_checkpoint_error(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], clean_env: Path
) -> None:
    """Each damage is refused by the reader, by `PlanningFlow.resume` and by `agentfsm resume` with
    the one `CheckpointError` line naming the file and what is wrong, never another exception."""
    from agentfsm.cli import commands as cli_main

    path = tmp_path / "flow.json"
    plan = reply(tool_calls=[("planning", {"command": "create", "title": "T", "steps": ["[coder] a"]})])

    def flow() -> PlanningFlow:
        coder = ToolCallAgent(llm=ScriptedLLM([]), name="coder")
        return PlanningFlow(agents={"coder": coder}, planner_llm=ScriptedLLM([plan]), review=True)

    assert (await flow().execute("task", checkpoint=path)).paused
    doc = read_flow_checkpoint(path)
    for label, (damaged, cause) in _flow_damages(doc).items():
        broken = tmp_path / f"{label.replace(' ', '-')}.json"
        broken.write_text(json.dumps(damaged))
        with pytest.raises(CheckpointError) as refused:
            read_flow_checkpoint(broken)
        assert type(refused.value) is CheckpointError, label
        assert f"the checkpoint {broken} is damaged: " in str(refused.value), (label, refused.value)
        assert cause in str(refused.value), (label, refused.value)
        with pytest.raises(CheckpointError, match=re.escape(cause)):
            await flow().resume(checkpoint=broken)
        capfd.readouterr()
        assert cli_main.main(["resume", str(broken)]) == 2, label
        out, err = capfd.readouterr()
        assert out == "" and err.count("\n") == 1 and "Traceback" not in err, (label, err)
        assert cause in err, (label, err)


@pytest.mark.parametrize(
    ("where", "value", "named"),
    [
        (("parts", "flow_state", "plan", "steps", 0, "status"), "bogus", "status"),
        (("parts", "agents", "coder", "memory", "max_messages"), 1, "memory"),
        (("run_state", "state"), "NOWHERE", "NOWHERE"),
        (("parts", "reviewing"), "yes", "reviewing"),
    ],
)
async def test_a_damaged_record_of_a_flow_s_journal_is_one_checkpoint_error(
    tmp_path: Path, where: tuple[Any, ...], value: object, named: str
) -> None:
    """The journal's last record holds the whole flow: each part is checked as a document's is."""
    path = tmp_path / "flow.checkpoint.jsonl"
    plan = reply(tool_calls=[("planning", {"command": "create", "title": "T", "steps": ["[coder] a"]})])

    def flow(planner: ScriptedLLM) -> PlanningFlow:
        coder = ToolCallAgent(llm=ScriptedLLM([]), name="coder")
        return PlanningFlow(agents={"coder": coder}, planner_llm=planner, review=True)

    assert (await flow(ScriptedLLM([plan])).execute("task", checkpoint=path)).paused
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["kind"] == "header" and all("parts" in r for r in lines[1:])
    target = lines[-1]
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(CheckpointError) as refused:
        await flow(ScriptedLLM([])).resume(checkpoint=damaged)
    message = str(refused.value)
    assert str(damaged) in message and named in message and "\n" not in message
