"""One checkpoint resumed by several processes at the same moment (a job delivered three times).

A run is killed before its tools ran (`tests/checkpoint_child.py`, SIGKILL after its second
checkpoint write), then three processes resume it at once, over and over. The checkpoint's lease
lets one of them own the run: the others are refused (exit 2, one line naming the owner) or,
coming after it, find the run finished. Checked for every trial: each side effect happened
exactly once. The figures are printed.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TRIALS = 6
AT_ONCE = 3
CHILD = Path(__file__).resolve().parent.parent / "checkpoint_child.py"


def _child(action: str, workdir: Path, kill: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHILD), action, str(workdir), kill], capture_output=True, text=True, timeout=60
    )


def _trial(base: Path, number: int) -> tuple[list[int], list[str]]:
    workdir = base / f"trial-{number}"
    workdir.mkdir()
    assert _child("run", workdir, "write:2").returncode == -signal.SIGKILL
    with ThreadPoolExecutor(max_workers=AT_ONCE) as together:
        procs = list(together.map(lambda _: _child("resume", workdir, "mark"), range(AT_ONCE)))
    effects = (workdir / "effects.txt").read_text().split() if (workdir / "effects.txt").exists() else []
    return [p.returncode for p in procs], effects


def test_a_checkpoint_resumed_by_several_processes_at_once_runs_each_call_once(tmp_path: Path) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        trials = list(pool.map(lambda n: _trial(tmp_path, n), range(TRIALS)))
    codes = Counter(code for found, _ in trials for code in found)
    twice = [n for n, (_, done) in enumerate(trials) if sorted(done) != ["1", "2", "3"]]
    print(
        f"\n{TRIALS} checkpoints, each resumed by {AT_ONCE} processes at once: exit statuses {dict(codes)} "
        f"(2: refused, the lease held by another), {len(twice)} with a call run twice or not at all"
    )
    assert twice == [], [trials[n] for n in twice]
    assert set(codes) <= {0, 2}
