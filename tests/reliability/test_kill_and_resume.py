"""Runs killed again and again at random moments, each time resumed in a new process.

A run with checkpointing (`tests/checkpoint_child.py`: a side-effecting tool that appends to a
file, three calls over two steps, then terminate) is SIGKILLed after a random checkpoint write,
resumed in a new process, which is killed in turn at a random later write, and so on, until a
resume is let finish. Checked for every trial: the final result is the one an unkilled run
gives, and no call's side effect happened twice (a call killed while it ran is not run again:
the model is told it may or may not have taken effect). The figures are printed.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

TRIALS = 12
CHILD = Path(__file__).resolve().parent.parent / "checkpoint_child.py"


def _spawn(action: str, workdir: Path, kill_after: int | None) -> tuple[bool, dict[str, Any] | None]:
    """Run the child; SIGKILL it once it reported its `kill_after`-th checkpoint write (None: never).
    Returns whether it was killed, and its result when it finished."""
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), action, str(workdir), "mark"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    seen, result = 0, None
    for line in proc.stdout:
        if line.strip() == "checkpoint":
            seen += 1
            if seen == kill_after:
                proc.send_signal(signal.SIGKILL)
                break
        elif line.startswith("{"):
            result = json.loads(line)
    proc.stdout.close()
    code = proc.wait(timeout=60)
    return code == -signal.SIGKILL, result


def _trial(base: Path, number: int) -> tuple[int, dict[str, Any] | None, list[str]]:
    rng = random.Random(number)
    workdir = base / f"trial-{number}"
    workdir.mkdir()
    kills = 0
    killed, result = _spawn("run", workdir, rng.randint(1, 9))
    kills += killed
    while killed and kills < 4:
        killed, result = _spawn("resume", workdir, rng.randint(1, 4))
        kills += killed
    if killed:
        killed, result = _spawn("resume", workdir, None)
    effects = (workdir / "effects.txt").read_text().split() if (workdir / "effects.txt").exists() else []
    return kills, result, effects


def _without_run_id(result: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if result is None else {k: v for k, v in result.items() if k != "run_id"}


def test_runs_killed_at_random_moments_and_resumed_run_no_call_twice(tmp_path: Path) -> None:
    _, reference, effects = _trial_unkilled(tmp_path)
    assert reference is not None and effects == ["1", "2", "3"]
    with ThreadPoolExecutor(max_workers=4) as pool:
        trials = list(pool.map(lambda n: _trial(tmp_path, n), range(TRIALS)))
    kills = sum(k for k, _, _ in trials)
    twice = [n for n, (_, _, done) in enumerate(trials) if len(done) != len(set(done))]
    different = [
        n for n, (_, result, _) in enumerate(trials) if _without_run_id(result) != _without_run_id(reference)
    ]
    skipped = sum(3 - len(set(done)) for _, _, done in trials)
    print(
        f"\n{TRIALS} runs, {kills} SIGKILLs at random checkpoint writes, each resumed in a new process: "
        f"{len(twice)} ran a call twice, {len(different)} ended otherwise than unkilled, "
        f"{skipped} calls killed while running (not run again)"
    )
    assert twice == []
    assert different == [], [trials[n] for n in different]
    assert kills >= TRIALS


def _trial_unkilled(base: Path) -> tuple[int, dict[str, Any] | None, list[str]]:
    workdir = base / "reference"
    workdir.mkdir()
    _, result = _spawn("run", workdir, None)
    return 0, result, (workdir / "effects.txt").read_text().split()
