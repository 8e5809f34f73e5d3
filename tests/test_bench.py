"""The benchmark compares like with like: every runner does the same task, and the report reads them.

`tools/bench.py` has no timing assertions (CI runs it only to keep it working);
these tests check what its numbers stand for: each framework's runner asks for
the same tool calls, runs them, and ends with the same answer.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import bench
import bench_peers


def _answer(output: Any) -> str:
    """The final answer, from a runner's output (LangGraph's is its final state)."""
    if isinstance(output, dict):
        return str(output["messages"][-1].content)
    return str(output)


@pytest.mark.parametrize("framework", sorted(bench_peers.FRAMEWORKS))
@pytest.mark.parametrize("n_calls", [1, 9])
async def test_every_runner_runs_the_calls_then_answers(
    framework: str, n_calls: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[int, int]] = []

    def add(a: int, b: int) -> int:
        """Add two integers."""
        calls.append((a, b))
        return a + b

    seen: list[int] = []  # how many messages agentfsm's model was shown, turn by turn
    make_model = bench_peers.agentfsm_model

    def counting_model(n_calls: int, final: str = "answer") -> Any:
        llm = make_model(n_calls, final)
        decide = llm.fn
        llm.fn = lambda request: seen.append(len(request.messages)) or decide(request)
        return llm

    monkeypatch.setattr(bench_peers, "add", add)
    monkeypatch.setattr(bench_peers, "agentfsm_model", counting_model)
    runner = bench_peers.FRAMEWORKS[framework](n_calls)
    if runner is None:
        pytest.fail(f"{framework} is not installed; `tools/dev-env` installs the bench extra")
    shown = []
    for _ in range(2):
        calls.clear()
        seen.clear()
        assert _answer(await runner("add some numbers")) == "done"
        if framework != "agentfsm engine alone":  # its phases run no tool, by design
            assert calls == [(i, 1) for i in range(n_calls)]
        shown.append(list(seen))
    # A reused agent starts again from an empty conversation: the model sees the same turns.
    assert shown[0] == shown[1]
    if framework in ("agentfsm", "agentfsm, one agent", "guarantees, no engine"):
        assert shown[0] == [1 + 2 * turn for turn in range(n_calls + 1)]


def test_the_report_reads_every_runner_and_any_subset_of_sections() -> None:
    runs = {name: 10.0 * (i + 1) for i, name in enumerate(bench_peers.FRAMEWORKS)}
    data = {"overhead": {"missing": [], "tool_call_run": runs, "ten_step_run": runs}}
    table = bench.report(data)
    assert table.startswith("Overhead per run")
    for name in bench_peers.FRAMEWORKS:
        assert f"\n{name} " in table
    floors = runs["agentfsm engine alone"] + runs["guarantees, no engine"]
    assert f"the two floors together: {floors:.1f} µs" in table
    assert "One step as history grows" not in table
    data["history"] = {"step_us": {"10 messages": 1.0, "10000 messages": 1.1}, "ratio_10000_to_10": 1.1}
    assert "ratio 10,000 : 10 = 1.10" in bench.report(data)
    assert "Recording" not in bench.report(data)
    growth = {"steps": 10, "messages": 21, "history_bytes": 3_000, "trace_bytes": 21_000,
              "trace_bytes_per_message": 1000.0, "trace_to_history": 7.0,
              "checkpoint_bytes": 63_000, "checkpoint_bytes_per_message": 3000.0}  # fmt: skip
    data["recording"] = {
        "step_us": {"10 messages": 1500.0, "10000 messages": 1800.0},
        "ratio_10000_to_10": 1.2,
        "growth": [growth],
    }
    table = bench.report(data)
    assert table.index("One step as history grows") < table.index("Recording: one step") < len(table)
    assert "ratio 10,000 : 10 = 1.20" in table
    assert (
        "     10        21       3,000      21,000       1000           7.00        63,000       3000"
        in table
    )
    data["recording"]["concurrent"] = {
        "runs": 50,
        "steps": 5,
        "plain": {"wall_s": 0.015, "worst_stall_ms": 1.5},
        "checkpointed": {"wall_s": 0.4, "worst_stall_ms": 20.0},
    }
    table = bench.report(data)
    assert "50 concurrent runs of 5 steps" in table and "  checkpointed       0.400 s      20.0 ms" in table


async def test_the_recording_section_times_whole_recorded_steps_and_sizes_growing_runs(
    tmp_path: Path,
) -> None:
    """A recorded step is think, act and observe, with every checkpoint and trace record they write;
    a growth run keeps its whole history in memory, so trace and history grow together."""
    from agentfsm import Terminate, ToolCallAgent, ToolCollection, tool
    from agentfsm.recording.checkpoint import read_checkpoint

    tools = ToolCollection(tool(bench_peers.add), Terminate())
    agent = ToolCallAgent(
        llm=bench.endless_model(), tools=tools, memory=bench.filled_memory(10), max_steps=99
    )
    run = bench.RecordedRun(agent, tmp_path)
    for _ in range(3):  # the start edge, then two whole steps
        await run.step()
    assert (agent.fsm_state, agent.current_step) == ("THINKING", 3)
    journal = (tmp_path / "run.checkpoint").read_text().splitlines()
    assert len(journal) == 1 + 1 + 2 * 5  # the header, the start, five writes a step
    await run.close()
    assert read_checkpoint(tmp_path / "run.checkpoint")["run_state"]["state"] == "ERROR"  # closed: cancelled
    assert (tmp_path / "run.jsonl").read_text().count('"kind": "llm"') == 2

    small, large = [await bench._trace_growth(tools, steps, tmp_path) for steps in (3, 12)]
    assert (small["steps"], small["messages"], large["messages"]) == (3, 7, 25)
    assert small["trace_bytes"] < large["trace_bytes"] and small["history_bytes"] < large["history_bytes"]
    assert large["trace_bytes_per_message"] < 1.5 * small["trace_bytes_per_message"]  # linear, not worse

    figures = await bench.concurrent_checkpointed(tools, 3, 2, tmp_path)
    assert figures["wall_s"] > 0 and figures["worst_stall_ms"] > 0
    assert len(list(tmp_path.glob("concurrent-*.checkpoint"))) == 3
