"""Many runs at once over real HTTP, a fifth of them faulted: nothing is lost, nothing runs twice.

Each run has a fault plan (`fault_server.Plan`) that predicts its whole outcome: the state it
ends in, why, how many requests the server sees, and whether its tool ran. The runs go through
the real adapter (litellm, the OpenAI SDK, sockets) to a server on 127.0.0.1 that follows each
plan request by request. Checked for every run: a `RunResult` came back (none lost), it is the
one the plan predicts, the server's journal holds exactly the planned attempts (no hidden
retries), the side-effecting tool ran at most once, and memory has no orphan tool message or
unanswered call. Checked for the whole: no task is left behind, and the sockets still open are
the client's keep-alive pool (at most one a concurrent run), not one an attempt. The figures
are printed.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from conftest import assert_pairs_complete
from fault_server import SERVER_TASK, Fault, FaultServer, Plan, Reply

from agentfsm import LLM, AgentState, StopReason, Terminate, ToolCallAgent, tool

pytestmark = pytest.mark.http

RUNS = 200
MAX_ATTEMPTS = 3
TIMEOUT = 3.0
"""Generous: under load a request waits its turn on the event loop, which is no fault of the plan's."""
ADD = Reply(tool=("add", {"a": 2, "b": 3}))
TERMINATE = Reply(tool=("terminate", {"status": "success"}))


@dataclass(frozen=True)
class Expected:
    state: AgentState
    stop_reason: StopReason
    attempts: int
    tool_runs: int
    error: str | None = None


KINDS: dict[str, tuple[list[Fault | Reply], Expected]] = {
    "clean": ([ADD, TERMINATE], Expected(AgentState.FINISHED, StopReason.TERMINATED, 2, 1)),
    "answer": ([Reply(content="five")], Expected(AgentState.FINISHED, StopReason.FINAL_ANSWER, 1, 0)),
    "transient": (
        [Fault(503), Fault(429, retry_after=0.05), ADD, Fault(500), TERMINATE],
        Expected(AgentState.FINISHED, StopReason.TERMINATED, 5, 1),
    ),
    "timeout": (
        [Fault(200, delay=TIMEOUT + 0.5), ADD, TERMINATE],
        Expected(AgentState.FINISHED, StopReason.TERMINATED, 3, 1),
    ),
    "exhausted": (
        [ADD, Fault(502)],
        Expected(AgentState.ERROR, StopReason.ERROR, 1 + MAX_ATTEMPTS, 1, "LLMError"),
    ),
    "fatal": ([Fault(400)], Expected(AgentState.ERROR, StopReason.ERROR, 1, 0, "LLMError")),
}


def kind_of(index: int) -> str:
    """About a fifth of the runs faulted, spread over the fault kinds; the rest clean."""
    faulted = {0: "transient", 5: "exhausted", 10: "timeout", 15: "fatal"}
    if index % 20 in faulted:
        return faulted[index % 20]
    return "answer" if index % 7 == 0 else "clean"


async def test_concurrent_runs_with_injected_faults_lose_nothing_and_run_nothing_twice() -> None:
    plans = {f"run-{i}": Plan(list(KINDS[kind_of(i)][0])) for i in range(RUNS)}
    tool_runs: Counter[str] = Counter()

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers (and count the side effect)."""
        return a + b

    async with FaultServer(plans) as server:
        llm = LLM(
            "openai/fault-model",
            api_base=server.base_url,
            api_key="test",
            timeout=TIMEOUT,
            max_attempts=MAX_ATTEMPTS,
            backoff_base=0.01,
            backoff_max=0.2,
        )

        async def one(index: int) -> tuple[ToolCallAgent, Any]:
            agent = ToolCallAgent(llm=llm, tools=[add, Terminate()], name=f"run-{index}", max_steps=5)

            def count(event: Any) -> None:
                if type(event).__name__ == "ToolCallStarted" and event.call.name == "add":
                    tool_runs[agent.name] += 1

            agent.on_event(count)
            return agent, await agent.run(f"run-{index} add 2 and 3")

        before = set(asyncio.all_tasks())
        started = time.perf_counter()
        outcomes = await asyncio.gather(*(one(i) for i in range(RUNS)), return_exceptions=True)
        wall = time.perf_counter() - started
        for _ in range(5):
            await asyncio.sleep(0)
        leaked = [
            t
            for t in asyncio.all_tasks() - before
            if t is not asyncio.current_task() and not t.done() and t.get_name() != SERVER_TASK
        ]
        # litellm starts one logging worker per event loop on its first call: its own, not a run's.
        workers = [t for t in leaked if "LoggingWorker" in repr(t.get_coro())]
        leaked = [t for t in leaked if t not in workers]

    escaped = [o for o in outcomes if isinstance(o, BaseException)]
    assert escaped == [], f"{len(escaped)} runs raised instead of returning a RunResult: {escaped[:3]!r}"
    wrong: list[str] = []
    for index, outcome in enumerate(outcomes):
        assert not isinstance(outcome, BaseException)
        agent, result = outcome
        run, expected = f"run-{index}", KINDS[kind_of(index)][1]
        got = Expected(
            result.state,
            result.stop_reason,
            server.journal[run],
            tool_runs[run],
            result.error.split(":")[0] if result.error else None,
        )
        if got != expected:
            wrong.append(f"{run} ({kind_of(index)}): {got} != {expected}: {result.error}")
        assert_pairs_complete(agent.memory.messages)
    faulted = sum(kind_of(i) not in ("clean", "answer") for i in range(RUNS))
    print(
        f"\n{RUNS} concurrent runs over HTTP, {faulted} faulted ({faulted / RUNS:.0%}): "
        f"{len(escaped)} lost, {len(wrong)} not as planned, {sum(server.journal.values())} requests "
        f"(planned {sum(KINDS[kind_of(i)][1].attempts for i in range(RUNS))}), "
        f"{sum(tool_runs.values())} tool runs, {len(leaked)} tasks left (and {len(workers)} litellm logging "
        f"worker), {server.connections} connections opened, {server.open_connections} still open (the "
        f"client's keep-alive pool), "
        f"{wall:.2f} s"
    )
    assert wrong == [], "\n".join(wrong)
    assert leaked == []
    assert server.open_connections <= RUNS  # pooled, at most one a concurrent run: no socket per attempt
