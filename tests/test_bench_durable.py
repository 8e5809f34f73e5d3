"""`tools/bench_durable.py`'s throughput section compares like with like: agentfsm's worker processes and
bare DBOS's, on the same queue settings, each run recording as many steps, every run ending. No timing
assertions (the machine is shared): the numbers are read by a person, beside each other."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from postgres_support import postgres_server  # noqa: F401 (fixture)

BENCH = Path(__file__).resolve().parent.parent / "tools" / "bench_durable.py"


def _bench(server: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(BENCH), "--db", f"{server}/x", "--only", "throughput", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600)


def test_the_throughput_section_runs_both_sides_at_one_and_four_workers(postgres_server):  # noqa: F811
    done = _bench(postgres_server, "--runs", "8", "--rounds", "1", "--json")
    assert done.returncode == 0, done.stderr
    rate = json.loads(done.stdout)["throughput"]
    assert (rate["runs"], rate["rounds"], rate["goal"]) == (8, 1, 0.9)
    for label in ("1x8", "4x8"):
        row = rate[label]
        assert row["agentfsm_failed"] == row["bare_failed"] == 0, row
        # The bare workflow records the steps an agentfsm one-tool run records: four (the trace goes
        # with the run's output).
        assert row["agentfsm_steps_per_run"] == row["bare_steps_per_run"] == rate["bare_steps"] == 4, row
        for kind in ("agentfsm", "bare"):
            assert row[f"{kind}_runs_per_s"] > 0 and row[f"{kind}_cpu_ms_per_run"] > 0, row
        assert row["ratio"] == round(row["agentfsm_runs_per_s"] / row["bare_runs_per_s"], 3)
    text = _bench(postgres_server, "--runs", "4", "--rounds", "1")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith("throughput: 4 one-tool runs, 1 round(s) each, bare DBOS runs 4 steps")
    assert [line.split()[0] for line in lines[2:]] == ["1x8", "4x8"], text.stdout
