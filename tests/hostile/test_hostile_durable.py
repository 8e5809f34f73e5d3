"""Decisions on durable runs bound to their pause: a spare approval (or answer) of one pause never
decides a later pause that asks about a call of the same id, on SQLite and on PostgreSQL. Models
reuse ids such as ``call_1`` from reply to reply, so a call id alone cannot bind a decision."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from durable_agents import repeat_agent
from postgres_support import either_db, pg_url, postgres_server  # noqa: F401 (fixtures)

from agentfsm import AskHuman, Terminate, ToolCallAgent
from agentfsm.durable import AgentSpec, DurableRuns, RunStatus, Worker
from agentfsm.durable.engine import EngineClient
from agentfsm.durable.run import DECISION_TOPIC
from agentfsm.errors import WrongPhaseError
from agentfsm.messages import Role, ToolCall
from agentfsm.testing import FunctionLLM, ModelRequest, reply

ROOT = Path(__file__).resolve().parents[2]


def two_questions_agent(spec: AgentSpec) -> ToolCallAgent:
    """Two replies that each ask the human as ``call_1``, then `terminate` with what it heard."""

    def script(request: ModelRequest) -> object:
        heard = [m.content or "" for m in request.messages if m.role is Role.TOOL]
        if len(heard) < 2:
            question = "Which colour?" if not heard else "Which size?"
            return reply("asking", [ToolCall.create("call_1", "ask_human", {"inquire": question})])
        return reply(" | ".join(heard), [ToolCall.create("call_2", "terminate", {"status": "success"})])

    return ToolCallAgent(llm=FunctionLLM(script), tools=[AskHuman(), Terminate()], name="asks", max_steps=6)


AGENTS = {"twice": repeat_agent, "asks": two_questions_agent}


@pytest.fixture
def db(either_db: str) -> str:  # noqa: F811 (the fixture)
    """SQLite, then PostgreSQL."""
    return either_db


@pytest.fixture
async def runs(db: str) -> AsyncIterator[DurableRuns]:
    async with Worker(db, agents=AGENTS, worker_id="hostile", polling_s=0.05):
        client = DurableRuns(db)
        try:
            yield client
        finally:
            client.close()


async def settled(
    runs: DurableRuns, run_id: str, done: Callable[[RunStatus], bool], timeout: float = 20.0
) -> RunStatus:
    """The run's status once `done` says so, or once it ended (whatever it ended as)."""
    for _ in range(int(timeout / 0.05)):
        status = await runs.status(run_id)
        if done(status) or status.ended:
            return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} is {status.state}")


def refused_or_sent(sent: list[object], run_id: str) -> None:
    """Of two decisions sent together, one is sent; the other too (the database keeps one of them)
    or, when the run went on before its sender looked, refused as no longer paused."""
    assert None in sent, sent
    for refused in (outcome for outcome in sent if outcome is not None):
        assert isinstance(refused, WrongPhaseError), refused
        assert str(refused).startswith(f"run {run_id!r} is running, not paused"), refused


def asks_for(n: int) -> Callable[[RunStatus], bool]:
    return lambda s: (
        s.state == "paused" and [json.loads(c.arguments) for c in s.pending_approval] == [{"n": n}]
    )


async def test_a_spare_approval_of_one_pause_does_not_approve_the_next_pause_s_call_of_the_same_id(
    runs: DurableRuns, db: str, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    run_id = await runs.submit("record twice", AgentSpec(agent="twice", options={"effects": str(effects)}))
    first = await settled(runs, run_id, asks_for(1))
    assert (first.state, [c.id for c in first.pending_approval]) == ("paused", ["call_1"])
    # Two approvals of the first pause, sent together: both see it waiting for call_1.
    sent = await asyncio.gather(
        runs.approve(run_id, "call_1"), runs.approve(run_id, "call_1"), return_exceptions=True
    )
    refused_or_sent(sent, run_id)
    # And a third that slipped past the client's checks (an older client, a script): in the topic.
    engine = EngineClient(db)
    try:
        spare = {"kind": "approve", "call_id": "call_1", "arguments": None, "pause": 1}
        await asyncio.to_thread(engine.send, run_id, spare, DECISION_TOPIC)
        unbound = {"kind": "approve", "call_id": "call_1", "arguments": None}
        await asyncio.to_thread(engine.send, run_id, unbound, DECISION_TOPIC)
    finally:
        engine.close()
    second = await settled(runs, run_id, asks_for(2))
    await asyncio.sleep(1.0)  # time enough for a spare decision to be taken
    second = await runs.status(run_id)
    assert effects.read_text().split() == ["1"]  # the second call waits: nobody approved it
    assert (second.state, [c.id for c in second.pending_approval]) == ("paused", ["call_1"])
    assert (first.pause, second.pause) == (1, 2)
    # A decision bound to the first pause is refused now, in one line naming that pause.
    with pytest.raises(WrongPhaseError) as refused:
        await runs.approve(run_id, "call_1", pause=1)
    assert str(refused.value) == (
        f"the decision of call 'call_1' was for pause 1 of run {run_id!r}, which is over (the run waits "
        f"at pause 2): see `agentfsm status {run_id}` and decide what it waits for now"
    )
    with pytest.raises(WrongPhaseError, match=re.escape("was for pause 1 of run")):
        await runs.reject(run_id, "call_1", "no", pause=1)
    assert effects.read_text().split() == ["1"]
    # The normal case: the decision of the pause the run is at now.
    await runs.approve(run_id, "call_1", pause=2)
    result = await runs.result(run_id, wait=True, timeout=30)
    assert result is not None and str(result.stop_reason) == "terminated"
    assert effects.read_text().split() == ["1", "2"]
    with pytest.raises(WrongPhaseError, match=re.escape("was for pause 2 of run")):
        await runs.approve(run_id, "call_1", pause=2)


async def test_a_spare_answer_of_one_question_does_not_answer_the_next_question_of_the_same_call_id(
    runs: DurableRuns, db: str
) -> None:
    run_id = await runs.submit("ask twice", "asks")
    first = await settled(runs, run_id, lambda s: s.state == "paused")
    [(call, question)] = first.pending_input
    assert (call.id, question.message) == ("call_1", "Which colour?")
    sent = await asyncio.gather(
        runs.answer(run_id, "call_1", {"answer": "blue"}),
        runs.answer(run_id, "call_1", {"answer": "red"}),
        return_exceptions=True,
    )
    refused_or_sent(sent, run_id)
    engine = EngineClient(db)
    try:  # the answer of the first question, replayed on its own
        replayed = {
            "kind": "answer",
            "call_id": "call_1",
            "answer": {"action": "accept", "content": {"answer": "huge"}},
        }
        await asyncio.to_thread(engine.send, run_id, {**replayed, "key": None, "pause": 1}, DECISION_TOPIC)
    finally:
        engine.close()
    asks_size = [("call_1", "Which size?")]
    second = await settled(
        runs, run_id, lambda s: [(c.id, q.message) for c, q in s.pending_input] == asks_size
    )
    await asyncio.sleep(1.0)
    second = await runs.status(run_id)
    assert second.result is None, second.result.output  # the second question was not answered
    assert (second.state, [(c.id, q.message) for c, q in second.pending_input]) == ("paused", asks_size)
    assert (first.pause, second.pause) == (1, 2)
    with pytest.raises(WrongPhaseError, match=re.escape(f"was for pause 1 of run {run_id!r}, which is over")):
        await runs.answer(run_id, "call_1", {"answer": "small"}, pause=1)
    await runs.answer(run_id, "call_1", {"answer": "small"})
    result = await runs.result(run_id, wait=True, timeout=30)
    assert result is not None and result.output is not None
    heard = [line.rpartition("\n")[2] for line in result.output.split(" | ")]
    assert heard[0] in ("blue", "red") and heard[1] == "small"


def test_the_command_line_refuses_a_decision_of_a_pause_that_is_over_in_one_line(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    effects = tmp_path / "effects.txt"

    async def scenario() -> None:
        async with Worker(db, agents=AGENTS, worker_id="cli", polling_s=0.05):
            runs = DurableRuns(db)
            try:
                spec = AgentSpec(agent="twice", options={"effects": str(effects)})
                run_id = await runs.submit("record twice", spec)
                await settled(runs, run_id, asks_for(1))
                approve = [sys.executable, "-m", "agentfsm", "approve", run_id, "call_1", "--db", db]
                env = {**os.environ, "PYTHONPATH": str(ROOT)}
                done = await asyncio.to_thread(
                    subprocess.run, approve, capture_output=True, text=True, env=env
                )
                assert done.returncode == 0, done.stderr
                await settled(runs, run_id, asks_for(2))
                status = await asyncio.to_thread(
                    subprocess.run,
                    [sys.executable, "-m", "agentfsm", "status", run_id, "--db", db],
                    capture_output=True,
                    text=True,
                    env=env,
                )
                assert status.stdout.splitlines()[0] == f"{run_id}: paused (pause 2) on cli"
                stale = await asyncio.to_thread(
                    subprocess.run, [*approve, "--pause", "1"], capture_output=True, text=True, env=env
                )
                assert stale.returncode == 2 and stale.stdout == ""
                assert stale.stderr.splitlines() == [
                    f"agentfsm: error: the decision of call 'call_1' was for pause 1 of run {run_id!r}, "
                    f"which is over (the run waits at pause 2): see `agentfsm status {run_id}` and decide "
                    "what it waits for now"
                ]
                assert effects.read_text().split() == ["1"]
                await runs.cancel(run_id)
            finally:
                runs.close()

    asyncio.run(scenario())
