"""Durable runs with `parallel_tool_calls`, on SQLite in one process: a reply's calls run concurrently
as in a plain run, with the plain run's result and trace; their steps keep their places (call order)
whatever order they finish in, so a recovered run reads each call's own observation back; approvals of
some calls of a batch and rejections of others. (Killed inside a batch, on PostgreSQL:
test_durable_crash.py.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

from durable_agents import AGENTS, BATCH_TASK, batch_agent
from test_durable_crash import comparable, trace_records

from agentfsm.durable import AgentSpec, DurableRuns, Worker

REVERSED = [0.6, 0.3, 0.0]
"""``mark``'s delays: the calls of the batch finish in the reverse order of their start."""


def times(effects: Path) -> dict[int, tuple[float, float]]:
    """Each call's start and end, as ``mark`` wrote them."""
    lines = (line.split() for line in effects.with_suffix(".times").read_text().splitlines())
    return {int(n): (float(began), float(ended)) for n, began, ended in lines}


def records_of(text: str, run_id: str) -> list[dict]:
    """The trace as `trace_records` gives it; a durable run's header describes the worker's model,
    not the wrapper that makes its calls steps."""
    return trace_records(text, run_id)


async def plain_run(tmp_path: Path, **options: object) -> tuple[dict, list[dict]]:
    """The batch agent's run, not durable: its result and trace, as the durable one is compared."""
    effects = tmp_path / "plain-effects.txt"
    agent = batch_agent(AgentSpec(agent="batch", options={**options, "effects": str(effects)}))
    trace = tmp_path / "plain-trace.jsonl"
    result = (await agent.run(BATCH_TASK, trace=str(trace))).model_dump(mode="json")
    return comparable(result, result["run_id"]), records_of(trace.read_text(), result["run_id"])


async def test_a_durable_batch_runs_its_calls_together_and_ends_as_the_plain_run(tmp_path):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    effects = tmp_path / "effects.txt"
    runs = DurableRuns(db)
    async with Worker(db, agents=AGENTS, worker_id="solo", polling_s=0.05):
        spec = AgentSpec(agent="batch", options={"effects": str(effects), "delays": REVERSED})
        run_id = await runs.submit(BATCH_TASK, spec)
        result = await runs.result(run_id, wait=True, timeout=60)
        trace = await runs.trace(run_id)
    runs.close()
    assert result is not None and str(result.stop_reason) == "terminated"
    assert effects.read_text().split() == ["3", "2", "1"]  # together: the last to start finished first
    spans = times(effects)
    assert max(began for began, _ in spans.values()) < min(ended for _, ended in spans.values())
    reference, reference_trace = await plain_run(tmp_path, delays=REVERSED)
    assert comparable(result.model_dump(mode="json"), run_id) == reference
    assert records_of(trace, run_id) == reference_trace


async def test_calls_that_finished_in_reverse_replay_to_their_own_observations(tmp_path):
    """The batch's calls finish in the reverse order of their start; the worker stops while the next
    model call is in flight, and a new one recovers the run: each tool step read back is its own call's
    (a step's place taken when its call finished would give p1 the observation of p3), no call runs
    again, and the run ends as the plain one."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    effects, hang = tmp_path / "effects.txt", tmp_path / "hung"
    runs = DurableRuns(db)
    options = {"effects": str(effects), "delays": REVERSED, "hang": str(hang)}
    async with Worker(db, agents=AGENTS, worker_id="solo", polling_s=0.05):
        run_id = await runs.submit(BATCH_TASK, AgentSpec(agent="batch", options=options))
        for _ in range(400):
            if hang.exists():
                break
            await asyncio.sleep(0.05)
        assert hang.exists()
    assert (await runs.status(run_id)).state == "running"  # left as it was, to be recovered
    assert effects.read_text().split() == ["3", "2", "1"]
    async with Worker(db, agents=AGENTS, worker_id="solo", polling_s=0.05):
        result = await runs.result(run_id, wait=True, timeout=60)
        trace = await runs.trace(run_id)
    runs.close()
    assert effects.read_text().split() == ["3", "2", "1"]  # read back, not run again
    records = records_of(trace, run_id)
    observed = {r["call_id"]: r["observation"] for r in records if r["kind"] == "tool"}
    assert {call: observed[call] for call in ("p1", "p2", "p3")} == {
        f"p{n}": f"Observed output of cmd `mark` executed:\nmarked {n}" for n in (1, 2, 3)
    }
    reference, reference_trace = await plain_run(tmp_path, delays=REVERSED)
    assert comparable(result.model_dump(mode="json"), run_id) == reference
    assert records == reference_trace


async def test_a_batch_with_some_calls_approved_and_others_rejected(tmp_path):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    effects = tmp_path / "effects.txt"
    runs = DurableRuns(db)
    options = {"effects": str(effects), "approval": True, "together": 2}
    async with Worker(db, agents=AGENTS, worker_id="solo", polling_s=0.05):
        run_id = await runs.submit(BATCH_TASK, AgentSpec(agent="batch", options=options))
        for _ in range(400):
            status = await runs.status(run_id)
            if status.state == "paused":
                break
            await asyncio.sleep(0.05)
        assert [call.id for call in status.pending_approval] == ["p1", "p2", "p3"]
        assert not effects.exists()  # nothing runs before its decision
        await runs.approve(run_id, "p3")
        await runs.reject(run_id, "p2", "not 2")
        await runs.approve(run_id, "p1")
        result = await runs.result(run_id, wait=True, timeout=60)
        trace = await runs.trace(run_id)
    runs.close()
    assert result is not None and str(result.stop_reason) == "terminated"
    assert sorted(effects.read_text().split()) == ["1", "3"]  # the approved two ran, together
    spans = times(effects)
    assert max(began for began, _ in spans.values()) < min(ended for _, ended in spans.values())
    records = records_of(trace, run_id)
    observed = {r["call_id"]: r["observation"] for r in records if r["kind"] == "tool"}
    assert observed["p2"] == "Error: the user rejected the call to `mark`; it was not run. Reason: not 2"
    assert [observed["p1"], observed["p3"]] == [
        f"Observed output of cmd `mark` executed:\nmarked {n}" for n in (1, 3)
    ]
    # The plain run, paused and decided the same way, records the same.
    agent = batch_agent(AgentSpec(agent="batch", options={**options, "effects": str(tmp_path / "plain.txt")}))
    path = tmp_path / "plain-trace.jsonl"
    paused = await agent.run(BATCH_TASK, trace=str(path))
    assert paused.paused
    agent.approve("p3")
    agent.reject("p2", "not 2")
    agent.approve("p1")
    plain = (await agent.resume(trace=str(path))).model_dump(mode="json")
    assert comparable(result.model_dump(mode="json"), run_id) == comparable(plain, plain["run_id"])
    assert records == records_of(path.read_text(), plain["run_id"])


async def until_paused(runs: DurableRuns, run_id: str):
    for _ in range(400):
        status = await runs.status(run_id)
        if status.state == "paused":
            return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} is {status.state}, not paused")


async def test_a_call_of_a_batch_that_asks_for_input_runs_again_alone_once_answered(tmp_path):
    """p2 asks a question while p1 and p3 run beside it: the run pauses after the batch (AWAITING_INPUT),
    and once answered only p2 runs again, after a start record of its own; as in the plain run."""
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    effects = tmp_path / "effects.txt"
    runs = DurableRuns(db)
    options = {"effects": str(effects), "second": "ask_age", "together": 2}
    async with Worker(db, agents=AGENTS, worker_id="solo", polling_s=0.05):
        run_id = await runs.submit(BATCH_TASK, AgentSpec(agent="batch", options=options))
        status = await until_paused(runs, run_id)
        assert [(call.id, question.key) for call, question in status.pending_input] == [("p2", "person")]
        assert sorted(effects.read_text().split()) == ["1", "3"]
        await runs.answer(run_id, "p2", {"name": "Ada"})
        result = await runs.result(run_id, wait=True, timeout=60)
        trace = await runs.trace(run_id)
    runs.close()
    assert result is not None and str(result.stop_reason) == "terminated"
    assert sorted(effects.read_text().split()) == ["1", "3"]  # neither ran again
    assert len(effects.with_suffix(".asked").read_text().splitlines()) == 1  # p2 resumed once
    agent = batch_agent(AgentSpec(agent="batch", options={**options, "effects": str(tmp_path / "plain.txt")}))
    path = tmp_path / "plain-trace.jsonl"
    assert (await agent.run(BATCH_TASK, trace=str(path))).paused
    agent.answer("p2", {"name": "Ada"})
    plain = (await agent.resume(trace=str(path))).model_dump(mode="json")
    assert comparable(result.model_dump(mode="json"), run_id) == comparable(plain, plain["run_id"])
    assert records_of(trace, run_id) == records_of(path.read_text(), plain["run_id"])


async def test_a_batch_whose_second_call_terminates_runs_the_first_beside_it_and_not_the_third(tmp_path):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    effects = tmp_path / "effects.txt"
    runs = DurableRuns(db)
    options = {"effects": str(effects), "second": "terminate", "together": 1}
    async with Worker(db, agents=AGENTS, worker_id="solo", polling_s=0.05):
        run_id = await runs.submit(BATCH_TASK, AgentSpec(agent="batch", options=options))
        result = await runs.result(run_id, wait=True, timeout=60)
        trace = await runs.trace(run_id)
    runs.close()
    assert result is not None and (str(result.stop_reason), result.steps) == ("terminated", 1)
    assert effects.read_text().split() == ["1"]
    records = records_of(trace, run_id)
    observed = {r["call_id"]: r["observation"] for r in records if r["kind"] == "tool"}
    assert observed["p3"] == "Not executed: `terminate` was called earlier in this reply."
    reference, reference_trace = await plain_run(tmp_path, **options)
    assert comparable(result.model_dump(mode="json"), run_id) == reference
    assert records == reference_trace
