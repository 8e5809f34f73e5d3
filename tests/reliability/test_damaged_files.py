"""Systematically damaged copies of real flow files and traces: each is one line, exit 2.

Real files come from real runs over HTTP (llmock on 127.0.0.1): a finished flow's checkpoint, a
flow's checkpoint killed while its plan waited for review, the finished flow's trace, and an agent's
trace. Each key of each (of the documents and their parts, a few levels down) is deleted, given a
value of the wrong type, and, where the key names one of a fixed set (a state, a stop reason, a
status, a kind), an unknown value. Every damaged copy goes through the command line in-process
(`agentfsm resume`, `agentfsm replay`) and must be refused with exit status 2 and exactly one line
on stderr naming the file and the field, with no traceback and nothing on stdout, unless it does
exactly what the intact file does (same exit status, same stdout: a key that takes its default
when it is missing, a timing nobody reads back). The figures are printed.
"""

from __future__ import annotations

import copy
import io
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import flow_state_of

from agentfsm.cli import commands
from agentfsm.flow.checkpoint import read_flow_checkpoint

KEY = "test-key-4f9a7c"
NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}

pytestmark = pytest.mark.usefixtures("clean_env")

DEPTH = 3
"""How far down the damage goes: a document's keys, their keys, and theirs."""

ENUMERATED = frozenset(
    {"state", "stop_reason", "status", "kind", "role", "trigger", "source", "dest", "op", "edit", "agent"}
)
"""Keys whose value is one of a fixed set: each also gets a value outside it."""

TRACE_DEPTH = 2
"""A trace's records are damaged to their keys and theirs (a message's own fields are the request's,
which replay compares whole with the request it rebuilds)."""

Damage = tuple[str, str, Any]
"""(what was done, the path of the key, the damaged document)."""


def _wrong(value: Any) -> Any:
    """A value of another JSON type than `value`'s."""
    if isinstance(value, bool):
        return "maybe"
    if isinstance(value, str):
        return 12345
    if isinstance(value, int | float):
        return "many"
    if isinstance(value, dict):
        return ["not", "a", "table"]
    if isinstance(value, list):
        return {"not": "a list"}
    return {"not": "null"}


def damages(
    document: Any, *, depth: int = DEPTH, root: str = ""
) -> Iterator[tuple[str, str, Callable[[Any], Any]]]:
    """Each damage of `document`'s keys down to `depth`: (kind, path, a function that applies it to a
    copy). Lists are entered by their first item."""
    if depth == 0:
        return
    items: list[tuple[str | int, Any]]
    if isinstance(document, dict):
        items = list(document.items())
    elif isinstance(document, list) and document:
        items = [(0, document[0])]
    else:
        return
    for key, value in items:
        path = f"{root}.{key}" if root else str(key)

        def at(change: Callable[[Any, str | int], None], key: str | int = key) -> Callable[[Any], Any]:
            return lambda parent: change(parent, key)

        if isinstance(key, str):
            yield "deleted", path, at(lambda parent, k: parent.pop(k))
            if isinstance(value, str) and key in ENUMERATED:
                yield "unknown value", path, at(lambda parent, k: parent.__setitem__(k, "NO_SUCH_VALUE"))
        wrong = _wrong(value)
        kind = "a value for null" if value is None else "wrong type"  # may be a legal value: an edit
        yield kind, path, at(lambda parent, k, wrong=wrong: parent.__setitem__(k, wrong))
        for kind, inner, change in damages(value, depth=depth - 1, root=path):
            yield kind, inner, _within(key, change)


def _within(key: str | int, change: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda parent: change(parent[key])


def _damaged(document: Any) -> list[Damage]:
    cases = []
    for kind, path, change in damages(document):
        copied = copy.deepcopy(document)
        change(copied)
        cases.append((kind, path, copied))
    return cases


def _field(path: str) -> str:
    """The key a line about `path` must name: its last part that is a name."""
    return next(part for part in reversed(path.split(".")) if not part.isdigit())


def _outcome(out: str) -> Any:
    """What `out` (a `--json` result) says, but the run ids (a replay's run is a new run)."""

    def without_ids(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: without_ids(v) for k, v in value.items() if k != "run_id"}
        if isinstance(value, list):
            return [without_ids(v) for v in value]
        return value

    try:
        return without_ids(json.loads(out))
    except ValueError:
        return out


def _run(argv: list[str], capfd: pytest.CaptureFixture[str], stdin: str = "") -> tuple[int, str, str]:
    sys.stdin = io.StringIO(stdin)
    try:
        code = commands.main(argv)
    except Exception as exc:  # what the command let out: a traceback for the person at the terminal
        code, raised = -1, f"Traceback: {type(exc).__name__}: {exc}"
    else:
        raised = ""
    finally:
        sys.stdin = sys.__stdin__
    out, err = capfd.readouterr()
    return code, out, err + raised


def _check_all(
    name: str,
    cases: list[Damage],
    write: Callable[[Any], Path],
    argv: Callable[[Path], list[str]],
    control: tuple[int, str],
    capfd: pytest.CaptureFixture[str],
    stdin: str = "",
) -> None:
    """Run each damaged copy; fail listing every one that was not refused in one line."""
    failed: list[str] = []
    same = 0
    for kind, path, document in cases:
        file = write(document)
        code, out, err = _run(argv(file), capfd, stdin)
        lines = [line for line in err.splitlines() if line.strip()]
        if code == control[0] and _outcome(out) == _outcome(control[1]):  # a default, a timing
            same += 1
            continue
        refused = code == 2 and len(lines) == 1 and out == "" and "Traceback" not in err
        named = refused and str(file) in lines[0]
        if kind != "a value for null":  # an edited value is refused by what then differs, not by its field
            named = named and _field(path) in lines[0]
        if not named:
            failed.append(f"{kind} {path}: exit {code}, stderr {err[-200:]!r}")
    print(
        f"\n{name}: {len(cases)} damaged copies, {same} read as the intact file, "
        f"{len(failed)} neither that nor refused in one line naming the field"
    )
    assert not failed, "\n".join(failed)


def _flow_args(llmock: Any, *extra: str) -> list[str]:
    return ["run", "--flow", "planning", "write and check", "--model", "openai/test-model",
            "--api-base", llmock.base_url("openai"), "--api-key", KEY, *extra]  # fmt: skip


def _model_flags(llmock: Any) -> list[str]:
    return ["--model", "openai/test-model", "--api-base", llmock.base_url("openai"), "--api-key", KEY]


@pytest.fixture
def no_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in NO_DOCKER.items():
        monkeypatch.setenv(name, value)


def _finished_flow(llmock: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> tuple[Path, Path]:
    """A flow run to its end, with its checkpoint and its trace."""
    llmock.call_tool(
        "planning", {"command": "create", "title": "T", "steps": ["[toolcall] one", "[toolcall] two"]}
    )
    llmock.reply("one done")
    llmock.call_tool("terminate", {"status": "success"})
    llmock.reply("Both done.")
    checkpoint, trace = tmp_path / "flow.json", tmp_path / "flow.jsonl"
    code, _, err = _run(
        _flow_args(llmock, "--json", "--checkpoint", str(checkpoint), "--trace", str(trace)), capfd
    )
    assert code == 0, err
    return checkpoint, trace


def test_damaged_checkpoints_of_a_finished_flow_are_one_line(
    llmock: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str], no_docker: None
) -> None:
    checkpoint, _ = _finished_flow(llmock, tmp_path, capfd)
    document = read_flow_checkpoint(checkpoint)  # the flow as one document, which still resumes
    damaged = tmp_path / "damaged.json"

    def write(value: Any) -> Path:
        damaged.write_text(json.dumps(value))
        return damaged

    argv = lambda file: ["resume", str(file), *_model_flags(llmock), "--json"]  # noqa: E731
    code, out, err = _run(argv(write(document)), capfd)
    assert code == 0, err  # the undamaged copy resumes: the flow already finished, its result
    _check_all("finished flow's checkpoint", _damaged(document), write, argv, (code, out), capfd)


def test_damaged_checkpoints_of_a_flow_paused_at_plan_review_are_one_line(
    llmock: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str], no_docker: None
) -> None:
    checkpoint = tmp_path / "flow.json"
    llmock.call_tool("planning", {"command": "create", "title": "T", "steps": ["[toolcall] one"]})
    command = [
        sys.executable,
        "-m",
        "agentfsm",
        *_flow_args(llmock, "--review", "--checkpoint", str(checkpoint)),
    ]
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:  # the question on the terminal waits; the process is killed while it does
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if flow_state_of(checkpoint) == "AWAITING_PLAN_REVIEW":
                break
            time.sleep(0.05)
        process.kill()
    finally:
        process.wait(timeout=30)
        assert process.stdin is not None
        process.stdin.close()
    document = read_flow_checkpoint(checkpoint)
    assert document["run_state"]["state"] == "AWAITING_PLAN_REVIEW"
    damaged = tmp_path / "damaged.json"

    def write(value: Any) -> Path:
        damaged.write_text(json.dumps(value))
        return damaged

    argv = lambda file: ["resume", str(file), *_model_flags(llmock), "--json"]  # noqa: E731
    code, out, err = _run(argv(write(document)), capfd, stdin="c\n")  # asked again; cancelled
    assert code in (0, 3) and json.loads(out)["stop_reason"] == "plan_cancelled", err
    _check_all("checkpoint paused at plan review", _damaged(document), write, argv, (code, out), capfd, "c\n")


def _trace_damages(records: list[dict[str, Any]]) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """The damages of the first record of each kind (and of the last, the result): the trace with
    that one record damaged."""
    firsts: dict[str, int] = {}
    for index, record in enumerate(records):
        firsts.setdefault(f"{record['kind']}:{record.get('agent')}", index)
    cases = []
    for index in sorted(set(firsts.values())):
        for kind, path, change in damages(records[index], depth=TRACE_DEPTH):
            copied = copy.deepcopy(records)
            change(copied[index])
            cases.append((kind, f"{records[index]['kind']}.{path}", copied))
    return cases


def _check_trace(name: str, trace: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    records = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
    damaged = tmp_path / "damaged.jsonl"

    def write(value: Any) -> Path:
        damaged.write_text("".join(json.dumps(r) + "\n" for r in value))
        return damaged

    argv = lambda file: ["replay", str(file), "--json", "-q"]  # noqa: E731
    code, out, err = _run(argv(write(records)), capfd)
    assert code == 0, err
    _check_all(name, _trace_damages(records), write, argv, (code, out), capfd)


def test_damaged_traces_of_a_flow_are_one_line(
    llmock: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str], no_docker: None
) -> None:
    _, trace = _finished_flow(llmock, tmp_path, capfd)
    _check_trace("flow's trace", trace, tmp_path, capfd)


def test_damaged_traces_of_an_agent_are_one_line(
    llmock: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str], no_docker: None
) -> None:
    llmock.call_tool("terminate", {"status": "success"})
    trace = tmp_path / "run.jsonl"
    argv = ["run", "finish", "--agent", "toolcall", *_model_flags(llmock), "--json", "--trace", str(trace)]
    code, _, err = _run(argv, capfd)
    assert code == 0, err
    _check_trace("agent's trace", trace, tmp_path, capfd)
