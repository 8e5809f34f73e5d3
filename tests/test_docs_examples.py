"""Every example of the documentation site is a script that runs as-is and prints what its page shows.

Each `docs/examples/NAME.py` runs in a process of its own, in an empty folder, and its
output must be `docs/examples/NAME.out` exactly: the page includes both, so what a reader sees is
what the script prints. A script without its `.out`, or one no page includes, fails here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "examples"
SCRIPTS = sorted(EXAMPLES.glob("*.py"))


def test_there_are_examples_and_each_has_its_expected_output() -> None:
    assert SCRIPTS, "no docs/examples/*.py found"
    missing = [p.name for p in SCRIPTS if not p.with_suffix(".out").is_file()]
    assert not missing, f"{missing} have no expected output: write it next to each as NAME.out"
    orphans = [p.name for p in EXAMPLES.glob("*.out") if not p.with_suffix(".py").is_file()]
    assert not orphans, f"{orphans} are the expected output of no example"


def test_every_example_is_on_a_page() -> None:
    pages = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs").rglob("*.md"))
    unused = [p.name for p in SCRIPTS if f'--8<-- "docs/examples/{p.name}"' not in pages]
    assert not unused, f'no page includes {unused}: include each with --8<-- "docs/examples/NAME.py"'


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_the_example_runs_and_prints_what_its_page_shows(script: Path, tmp_path: Path) -> None:
    # A clean environment: no provider's key, no configuration file, the checkout importable.
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "SYSTEMROOT", "TMPDIR")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env |= {"PYTHONPATH": str(ROOT), "HOME": str(tmp_path), "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,  # what an example writes stays out of the checkout
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == script.with_suffix(".out").read_text(encoding="utf-8")
