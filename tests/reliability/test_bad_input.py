"""A table of bad input at the command line: each is one line on stderr, exit 2, nothing else.

Configuration files, flags, traces and checkpoints, broken the ways people and crashes break
them. For each row the command must refuse with exit status 2 and a single line naming what is
wrong (never a traceback), and write nothing to stdout. The figures are printed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentfsm.cli import commands

Case = tuple[str, Callable[[Path], list[str]]]


def _file(name: str, content: str | bytes) -> Callable[[Path], Path]:
    def make(base: Path) -> Path:
        path = base / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return path

    return make


def _config(text: str) -> Callable[[Path], list[str]]:
    return lambda base: ["run", "task", "--config", str(_file("agentfsm.toml", text)(base))]


def _replay(content: str | bytes) -> Callable[[Path], list[str]]:
    return lambda base: ["replay", str(_file("run.jsonl", content)(base))]


def _diagram(content: str | bytes) -> Callable[[Path], list[str]]:
    return lambda base: ["diagram", "--trace", str(_file("run.jsonl", content)(base))]


def _resume(content: str | bytes) -> Callable[[Path], list[str]]:
    return lambda base: ["resume", str(_file("run.checkpoint.jsonl", content)(base))]


HEADER = {"kind": "header", "schema": 3, "run_id": "r", "agent": "a", "agent_class": "x.Y", "config": {}}

CASES: list[Case] = [
    ("config: not TOML", _config("[llm\nmodel = ")),
    ("config: a number where text goes", _config("[llm]\nmodel = 5\n")),
    ("config: max_steps not a number", _config('[llm]\nmodel = "openai/m"\n[agent]\nmax_steps = "many"\n')),
    ("config: max_steps zero", _config('[llm]\nmodel = "openai/m"\n[agent]\nmax_steps = 0\n')),
    ("config: an unknown key", _config('[llm]\nmodel = "openai/m"\n[agent]\nmax_stepz = 3\n')),
    ("config: temperature as a word", _config('[llm]\nmodel = "openai/m"\ntemperature = "hot"\n')),
    ("config: a section that is a value", _config("llm = 3\n")),
    (
        "config: binary garbage",
        lambda base: ["run", "t", "--config", str(_file("c.toml", b"\xff\xfe\x00")(base))],
    ),
    ("config: a missing file", lambda base: ["run", "t", "--config", str(base / "nope.toml")]),
    ("config: a directory", lambda base: ["run", "t", "--config", str(base)]),
    ("flag: --max-steps 0", lambda base: ["run", "t", "--model", "openai/m", "--max-steps", "0"]),
    ("flag: --max-steps x", lambda base: ["run", "t", "--model", "openai/m", "--max-steps", "x"]),
    ("flag: --tool-choice maybe", lambda base: ["run", "t", "--model", "openai/m", "--tool-choice", "maybe"]),
    ("flag: no model anywhere", lambda base: ["run", "t"]),
    ("trace: empty", _replay("")),
    ("trace: not JSON", _replay("this is not json\n")),
    ("trace: JSON, not records", _replay("[1, 2, 3]\n")),
    ("trace: no header first", _replay(json.dumps({"kind": "transition"}) + "\n")),
    ("trace: schema 1", _replay(json.dumps({**HEADER, "schema": 1}) + "\n")),
    ("trace: binary garbage", _replay(b"\x00\xff\xfe garbage\n")),
    ("trace: a missing file", lambda base: ["replay", str(base / "missing.jsonl")]),
    ("trace: a directory", lambda base: ["replay", str(base)]),
    ("trace: config not a table", _replay(json.dumps({**HEADER, "config": [1, 2]}) + "\n")),
    ("diagram: config not a table", _diagram(json.dumps({**HEADER, "config": "x"}) + "\n")),
    ("diagram: not JSON", _diagram("nope\n")),
    ("diagram: a missing trace", lambda base: ["diagram", "--trace", str(base / "missing.jsonl")]),
    ("checkpoint: empty", _resume("")),
    ("checkpoint: not JSON", _resume("{{{\n")),
    ("checkpoint: schema 1", _resume(json.dumps({"schema": 1, "agent_class": "x"}) + "\n")),
    ("checkpoint: binary garbage", _resume(b"\x00\xff\n")),
    ("checkpoint: a missing file", lambda base: ["resume", str(base / "missing.jsonl")]),
    ("checkpoint: a directory", lambda base: ["resume", str(base)]),
]

_FAILED: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def _figures() -> Iterator[None]:
    """Print the table's figure once its rows have run."""
    yield
    print(f"\n{len(CASES)} kinds of bad input at the command line: {len(_FAILED)} not refused in one line")


@pytest.mark.parametrize(("name", "argv"), CASES, ids=[name for name, _ in CASES])
def test_bad_input_is_one_line_and_exit_2(
    name: str,
    argv: Callable[[Path], list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    clean_env: Path,
) -> None:
    args = argv(tmp_path)
    code = commands.main(args)
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    ok = code == 2 and len(lines) == 1 and "Traceback" not in err and out == ""
    if not ok:
        _FAILED.append(name)
    assert code == 2, f"{name}: exit {code}; stderr: {err!r}"
    assert len(lines) == 1 and "Traceback" not in err, f"{name}: {err!r}"
    assert out == "", f"{name}: stdout {out!r}"
