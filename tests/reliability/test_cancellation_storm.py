"""Hundreds of runs cancelled at random moments: each ends defined, nothing is left open.

A cancellation can land anywhere: while the model thinks, while a tool runs (several calls of
one reply, in order or in parallel), between two edges. Checked for every run: the task is
cancelled (the `CancelledError` reaches its awaiter) or the run finished first; a cancelled run
ends in ERROR with `cancelled`; its memory answers every call it holds (no orphan, no open
call); the agent can run again at once. For the whole: no task is left behind. The figures
are printed.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter

from conftest import assert_pairs_complete

from agentfsm import AgentState, StopReason, Terminate, ToolCallAgent, tool
from agentfsm.testing import FunctionLLM, ModelRequest, reply

RUNS = 400


@tool
async def work(seconds: float) -> str:
    """Pretend to work for `seconds`."""
    await asyncio.sleep(seconds)
    return "done"


async def think(request: ModelRequest) -> object:
    """Three tool calls, then terminate; the model takes a moment each time."""
    await asyncio.sleep(random.uniform(0, 0.004))
    results = sum(m.role.value == "tool" for m in request.messages)
    if results >= 3:
        return reply(tool_calls=[("terminate", {"status": "success"})])
    return reply(tool_calls=[("work", {"seconds": random.uniform(0, 0.004)}) for _ in range(3)])


async def test_a_storm_of_cancellations_leaves_every_run_defined_and_nothing_open() -> None:
    rng = random.Random(13)
    before = set(asyncio.all_tasks())
    agents = [
        ToolCallAgent(llm=FunctionLLM(think), tools=[work, Terminate()], parallel_tool_calls=i % 2 == 1)
        for i in range(RUNS)
    ]
    started = time.perf_counter()
    tasks: list[asyncio.Task[object]] = []
    for agent in agents:
        task = asyncio.create_task(agent.run("work"))
        tasks.append(task)
        # At a random event of the run (a run has about 40), cancel a random moment later: inside
        # the model's think, a tool's sleep, between two edges, or never (the run ended first).
        at, events = rng.randint(1, 30), [0]

        def count(
            event: object, task: asyncio.Task[object] = task, at: int = at, events: list[int] = events
        ) -> None:
            events[0] += 1
            if events[0] == at:
                asyncio.get_running_loop().call_later(rng.uniform(0, 0.002), task.cancel)

        agent.on_event(count)
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    wall = time.perf_counter() - started

    seen: Counter[str] = Counter()
    for agent, outcome in zip(agents, outcomes, strict=True):
        if isinstance(outcome, asyncio.CancelledError):
            seen["cancelled"] += 1
            result = agent.last_result
            assert result is not None, "a cancelled run left no result"
            assert (result.state, result.stop_reason) == (AgentState.ERROR, StopReason.CANCELLED)
            assert agent.state is AgentState.ERROR and agent.phase is None
        else:
            assert not isinstance(outcome, BaseException), outcome
            seen[str(outcome.stop_reason)] += 1
            assert outcome.stop_reason is StopReason.TERMINATED
        assert agent.memory.open_calls == {}, agent.memory.open_calls
        assert_pairs_complete(agent.memory.messages)
    again = await agents[0].run("work")  # the agent is free again at once
    assert again.stop_reason is StopReason.TERMINATED
    for _ in range(5):
        await asyncio.sleep(0)
    leaked = [t for t in asyncio.all_tasks() - before if t is not asyncio.current_task() and not t.done()]
    print(f"\n{RUNS} runs cancelled at random moments: {dict(seen)}, {len(leaked)} tasks left, {wall:.2f} s")
    assert seen["cancelled"] > RUNS // 4 and seen["terminated"] > 0  # the storm hit runs at all stages
    assert leaked == []
