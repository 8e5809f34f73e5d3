"""Durable runs on SQLite in one process: `Worker` and `DurableRuns` side by side, the same API as across
machines. What a run does and returns, its trace, approvals and rejections, a tool's questions and their
answers, cancellation, and refusals."""

from __future__ import annotations

import asyncio
import json
import os
import re

import pytest
from durable_agents import AGENTS, TASK

from agentfsm.durable import AgentSpec, DurableRuns, Worker
from agentfsm.errors import ConfigError, KeyNotFoundError, WrongPhaseError, WrongValueError


@pytest.fixture
async def sqlite_runs(tmp_path):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    async with Worker(db, agents=AGENTS, worker_id="solo", polling_s=0.05):
        runs = DurableRuns(db)
        try:
            yield runs
        finally:
            runs.close()


async def until(runs: DurableRuns, run_id: str, state: str, timeout: float = 20.0):
    for _ in range(int(timeout / 0.05)):
        status = await runs.status(run_id)
        if status.state == state:
            return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} is {status.state}, not {state}")


async def test_a_durable_run_returns_the_result_and_trace_of_its_run(sqlite_runs, tmp_path):
    effects = tmp_path / "effects.txt"
    run_id = await sqlite_runs.submit(TASK, AgentSpec(agent="record", options={"effects": str(effects)}))
    result = await sqlite_runs.result(run_id, wait=True, timeout=30)
    assert result is not None and result.run_id == run_id
    assert (str(result.state), str(result.stop_reason), result.steps, result.output) == (
        "FINISHED",
        "terminated",
        3,
        "done",
    )
    assert result.usage.llm_calls == 3 and result.usage.tool_calls == 4
    assert effects.read_text().split() == ["1", "2", "3"]
    status = await sqlite_runs.status(run_id)
    assert (status.state, status.worker, status.task) == ("finished", "solo", TASK)
    records = [json.loads(line) for line in (await sqlite_runs.trace(run_id)).splitlines()]
    assert records[0]["kind"] == "header" and records[0]["run_id"] == run_id
    assert [r["kind"] for r in records].count("tool") == 4
    assert records[-1]["kind"] == "result" and records[-1]["result"]["stop_reason"] == "terminated"


async def test_a_paused_run_is_approved_or_rejected_through_the_database(sqlite_runs, tmp_path):
    effects = tmp_path / "effects.txt"
    spec = AgentSpec(agent="approval", options={"effects": str(effects)})
    approved, rejected = await sqlite_runs.submit("a", spec), await sqlite_runs.submit("b", spec)
    for run_id in (approved, rejected):
        status = await until(sqlite_runs, run_id, "paused")
        assert [(c.id, c.name) for c in status.pending_approval] == [("c1", "record")]
    assert not effects.exists()  # nothing runs before its decision
    with pytest.raises(KeyNotFoundError, match="waits for no call 'c9'"):
        await sqlite_runs.approve(approved, "c9")
    with pytest.raises(
        WrongValueError,
        match=re.escape(f"call 'c1' of run {approved!r} waits for approval: approve or reject it"),
    ):
        await sqlite_runs.answer(approved, "c1", {"ok": True})
    await sqlite_runs.approve(approved, "c1")
    await sqlite_runs.reject(rejected, "c1", "not today")
    first = await sqlite_runs.result(approved, wait=True, timeout=30)
    second = await sqlite_runs.result(rejected, wait=True, timeout=30)
    assert str(first.stop_reason) == str(second.stop_reason) == "terminated"
    assert effects.read_text().split() == ["7"]  # the approved call ran, the rejected one did not
    assert "not today" in await sqlite_runs.trace(rejected)
    with pytest.raises(WrongPhaseError, match="is finished, not paused"):
        await sqlite_runs.approve(approved, "c1")
    # `list`, as `agentfsm.Runs` has it: every run in submission order, or those in one state
    assert [s.run_id for s in await sqlite_runs.list()] == [approved, rejected]
    assert [s.run_id for s in await sqlite_runs.list(state="finished")] == [approved, rejected]
    assert await sqlite_runs.list(state="paused") == []


async def test_a_tool_s_question_pauses_the_run_and_its_answer_reaches_the_tool(sqlite_runs, tmp_path):
    effects = tmp_path / "effects.txt"
    spec = AgentSpec(agent="asking", options={"effects": str(effects)})
    accepted, declined = await sqlite_runs.submit("a", spec), await sqlite_runs.submit("b", spec)
    for run_id in (accepted, declined):
        status = await until(sqlite_runs, run_id, "paused")
        assert status.pending_approval == ()
        [(call, question)] = status.pending_input
        assert (call.id, call.name, question.key, question.message) == (
            "c1",
            "ask_age",
            "person",
            "Who are you?",
        )
        assert question.schema["required"] == ["name"]
    assert not effects.exists()  # the tool has heard nothing yet
    with pytest.raises(KeyNotFoundError, match="waits for no call 'c9'"):
        await sqlite_runs.answer(accepted, "c9", {"name": "Ada"})
    with pytest.raises(KeyNotFoundError, match="asked no question 'nope'"):
        await sqlite_runs.answer(accepted, "c1", {"name": "Ada"}, key="nope")
    with pytest.raises(
        WrongValueError, match=re.escape(f"call 'c1' of run {accepted!r} waits for input: answer it")
    ):
        await sqlite_runs.approve(accepted, "c1")
    with pytest.raises(WrongValueError, match="a 'decline' answer carries no content"):
        await sqlite_runs.answer(accepted, "c1", {"name": "Ada"}, action="decline")
    await sqlite_runs.answer(accepted, "c1", {"name": "Ada", "age": 36})
    first = await sqlite_runs.result(accepted, wait=True, timeout=30)
    await sqlite_runs.answer(declined, "c1", action="decline", key="person")
    second = await sqlite_runs.result(declined, wait=True, timeout=30)
    assert str(first.stop_reason) == str(second.stop_reason) == "terminated"
    heard = [json.loads(line) for line in effects.read_text().splitlines()]
    assert heard == [
        {"token": "t1", "action": "accept", "content": {"name": "Ada", "age": 36}},
        {"token": "t1", "action": "decline", "content": None},
    ]  # each call was resumed once, with its answer
    assert "hello {'name': 'Ada', 'age': 36}" in first.output
    assert "no answer (decline)" in second.output
    records = [json.loads(line) for line in (await sqlite_runs.trace(accepted)).splitlines()]
    assert [r["kind"] for r in records].count("tool") == 3  # asked, answered, terminate
    with pytest.raises(WrongPhaseError, match="is finished, not paused"):
        await sqlite_runs.answer(accepted, "c1", {"name": "Ada"})


async def test_ask_human_pauses_a_durable_run_and_the_answer_is_the_observation(sqlite_runs):
    answered, declined = await sqlite_runs.submit("a", "human"), await sqlite_runs.submit("b", "human")
    for run_id in (answered, declined):
        status = await until(sqlite_runs, run_id, "paused")
        [(call, question)] = status.pending_input
        assert (call.id, call.name, question.message) == ("c1", "ask_human", "Which colour?")
        assert question.schema["required"] == ["answer"]
    await sqlite_runs.answer(answered, "c1", {"answer": " blue "})
    await sqlite_runs.answer(declined, "c1", action="decline")
    first = await sqlite_runs.result(answered, wait=True, timeout=30)
    second = await sqlite_runs.result(declined, wait=True, timeout=30)
    assert str(first.stop_reason) == str(second.stop_reason) == "terminated"
    assert first.output == "Observed output of cmd `ask_human` executed:\nblue"
    assert second.output.startswith("Error: No human is available to answer: 'Which colour?'")
    assert "answered with decline" in second.output


async def test_ask_human_outside_a_durable_run_still_says_no_human_is_there():
    from durable_agents import human_agent

    result = await human_agent(AgentSpec(agent="human")).run("ask")
    assert not result.paused and str(result.stop_reason) == "terminated"
    assert result.output.startswith("Error: No human is available to answer: 'Which colour?'")
    assert "started without a way to reach one" in result.output


def _children(marker: str) -> list[int]:
    """This process's children whose command line holds `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = cmdline.read()
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid() and marker.encode() in command:
            found.append(int(entry))
    return found


async def test_an_mcp_servers_question_pauses_a_durable_run_and_its_server_closes_with_the_run(sqlite_runs):
    run_id = await sqlite_runs.submit("greet me", AgentSpec(agent="elicit"))
    status = await until(sqlite_runs, run_id, "paused")
    [(call, question)] = status.pending_input
    assert (call.name, question.message) == ("mcp_el_greet", "What is your name?")
    assert _children("mcp_elicit_server.py")  # the run's server waits with it
    await sqlite_runs.answer(run_id, call.id, {"name": "Ada"})
    result = await sqlite_runs.result(run_id, wait=True, timeout=30)
    assert result.output == "Observed output of cmd `mcp_el_greet` executed:\nhello Ada"
    for _ in range(100):  # the run ended: its agent closed what it opened
        if not _children("mcp_elicit_server.py"):
            break
        await asyncio.sleep(0.05)
    assert _children("mcp_elicit_server.py") == []


async def test_a_cancelled_run_stops_taking_steps(sqlite_runs, tmp_path):
    effects = tmp_path / "effects.txt"
    spec = AgentSpec(agent="slow", options={"effects": str(effects), "delay": 0.1})
    run_id = await sqlite_runs.submit("count", spec)
    await until(sqlite_runs, run_id, "running")
    while not effects.exists():
        await asyncio.sleep(0.05)
    await sqlite_runs.cancel(run_id)
    status = await sqlite_runs.status(run_id)
    assert status.state == "cancelled" and str(status.result.stop_reason) == "cancelled"
    done = len(effects.read_text().split())
    await asyncio.sleep(0.6)
    assert len(effects.read_text().split()) <= done + 1  # the call in flight may finish, no later one runs
    assert (await sqlite_runs.result(run_id)).error == "CancelledError: the run was cancelled"


async def test_a_worker_whose_heartbeat_fails_starts_no_step_until_it_beats_again(tmp_path):
    """Self-fencing: half the takeover threshold (0.5 s here) without a successful beat, and the run's
    next step waits; the beats come back with nobody having claimed the worker, and the run goes on."""
    db, effects = f"sqlite:///{tmp_path / 'runs.db'}", tmp_path / "effects.txt"
    worker = Worker(db, agents=AGENTS, worker_id="solo", heartbeat_s=0.1, dead_after_s=1.0, polling_s=0.05)
    async with worker:
        runs = DurableRuns(db)
        spec = AgentSpec(agent="slow", options={"effects": str(effects), "delay": 0.1, "steps": 12})
        run_id = await runs.submit("count", spec)
        while len(effects.read_text().split()) < 2 if effects.exists() else True:
            await asyncio.sleep(0.02)
        heartbeats = worker._heartbeats
        beat = heartbeats.beat

        def failing(*args: object) -> bool:
            raise RuntimeError("the database is unreachable")

        heartbeats.beat = failing
        await asyncio.sleep(1.2)  # past the 0.5 s, and the call that was in flight then
        stopped = effects.read_text().split()
        await asyncio.sleep(1.0)
        assert effects.read_text().split() == stopped  # no step started while the beats failed
        assert len(stopped) < 12 and (await runs.status(run_id)).state == "running"
        heartbeats.beat = beat
        result = await runs.result(run_id, wait=True, timeout=30)
        runs.close()
    assert (str(result.stop_reason), result.steps) == ("max_steps", 12)
    assert effects.read_text().split() == [str(n) for n in range(1, 13)]  # each call once, none lost


async def test_a_fence_holds_steps_while_beats_lapse_and_ends_the_executions_of_a_claimed_worker():
    from agentfsm.durable.fence import Fence

    now = [0.0]
    fence = Fence(0.5, clock=lambda: now[0])
    now[0] = 0.1
    before = fence.ticket()  # an execution from before the claim below
    assert await fence.admit(before)
    now[0] = 0.7  # no successful beat for longer than 0.5 s
    held = asyncio.create_task(fence.admit(before, poll_s=0.01))
    await asyncio.sleep(0.05)
    assert not held.done()
    fence.beaten(claimed=False)  # back, nobody took the worker's runs: the step goes on
    assert await held is True
    now[0] = 1.5
    during = fence.ticket()  # started in the lapse: perhaps a run taken after the claim
    held = asyncio.create_task(fence.admit(before, poll_s=0.01))
    await asyncio.sleep(0.05)
    fence.beaten(claimed=True)  # back, but its row was claimed: the runs it held at 0.7 are another's
    assert await held is False and not fence.owns(before)
    assert await fence.admit(during) and await fence.admit(fence.ticket())  # later ones go on


async def test_a_run_of_an_agent_the_worker_lacks_ends_in_error_saying_so(sqlite_runs):
    run_id = await sqlite_runs.submit("x", "nobody")
    result = await sqlite_runs.result(run_id, wait=True, timeout=30)
    assert str(result.state) == "ERROR" and result.steps == 0
    assert "this worker has no agent 'nobody'" in result.error and "record" in result.error


async def test_unknown_runs_bad_specs_and_bad_databases_are_refused_by_name(sqlite_runs, tmp_path):
    with pytest.raises(KeyNotFoundError, match="no run 'nope'"):
        await sqlite_runs.status("nope")
    with pytest.raises(WrongValueError, match="takes no secrets \\(api_key\\)"):
        AgentSpec(agent="toolcall", options={"api_key": "sk-1"})
    with pytest.raises(WrongValueError, match="must be JSON values"):
        AgentSpec(agent="toolcall", options={"when": object()})
    with pytest.raises(ConfigError, match="is not a database URL"):
        DurableRuns("mysql://x")
    with pytest.raises(WrongValueError, match="`concurrency` must be at least 1"):
        Worker(f"sqlite:///{tmp_path / 'x.db'}", agents=AGENTS, concurrency=0)


async def test_submitting_an_id_again_gives_that_run_back(sqlite_runs, tmp_path):
    spec = AgentSpec(agent="record", options={"effects": str(tmp_path / "e.txt")})
    first = await sqlite_runs.submit(TASK, spec, run_id="job-1")
    again = await sqlite_runs.submit(TASK, spec, run_id="job-1")
    assert first == again == "job-1"
    await sqlite_runs.result("job-1", wait=True, timeout=30)
    assert (tmp_path / "e.txt").read_text().split() == ["1", "2", "3"]


async def test_a_stopped_worker_leaves_its_event_loop_a_working_thread_pool(tmp_path):
    """DBOS puts its own pool in as the loop's default executor and shuts it down when it stops."""
    async with Worker(f"sqlite:///{tmp_path / 'runs.db'}", agents=AGENTS, worker_id="solo"):
        pass
    assert await asyncio.to_thread(lambda: 41 + 1) == 42
