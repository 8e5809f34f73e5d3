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
