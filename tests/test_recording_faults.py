"""Recording never breaks a run: a write that fails, or a listener that raises, ends it in ERROR.

Each trigger seen in the field is reproduced here: a lone surrogate in the
model's output, the checkpoint's folder removed mid-run, a full disk
(`/dev/full`), a listener that raises, and bad paths given before the run.
After each, the run's result names the file and the cause, memory holds no
unanswered call, and the agent takes its next run.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import assert_pairs_complete

from agentfsm.agent import ToolCallAgent
from agentfsm.agent.replay import replay
from agentfsm.agent.turn import AgentRunState
from agentfsm.cli import commands as cli_main
from agentfsm.errors import CheckpointError, RecordingError
from agentfsm.messages import ToolCall
from agentfsm.recording.checkpoint import read_checkpoint, restore
from agentfsm.recording.trace import read_trace
from agentfsm.run.events import AgentEvent, ToolCallStarted, Transition
from agentfsm.testing import ScriptedLLM, reply
from agentfsm.toolbox import Terminate
from agentfsm.toolbox.tool import tool

SURROGATE = "bad \ud800 text, and é"


def agent(ran: list[int] | None = None, content: str = "adding") -> ToolCallAgent:
    ran = [] if ran is None else ran

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers (and remember that it ran)."""
        ran.append(a)
        return a + b

    llm = ScriptedLLM(
        [
            reply(content, [ToolCall.create("c1", "add", {"a": 1, "b": 2})]),
            reply(content, [ToolCall.create("c2", "add", {"a": 2, "b": 2})]),
            reply("done", [ToolCall.create("t1", "terminate", {"status": "success"})]),
        ]
    )
    return ToolCallAgent(llm=llm, tools=[add, Terminate()])


async def assert_runs_again(failed: ToolCallAgent) -> None:
    """The agent that failed is not left busy: its next run starts and ends cleanly."""
    failed.llm = ScriptedLLM([reply("fine")])  # type: ignore[attr-defined]
    again = await failed.run("again")
    assert (again.state, again.stop_reason) == ("FINISHED", "final_answer")
    assert_pairs_complete(failed.memory.messages)


async def test_a_listener_that_raises_ends_the_run_in_error_with_memory_whole() -> None:
    ran: list[int] = []
    a = agent(ran)

    def broken(event: AgentEvent) -> None:
        if isinstance(event, ToolCallStarted):
            raise ValueError("the exporter is down")

    a.on_event(broken)
    result = await a.run("go")
    assert (result.state, result.stop_reason) == ("ERROR", "error")
    assert result.error == "ValueError: the exporter is down"
    assert ran == []  # the start of the call was not recorded: the tool did not run
    assert_pairs_complete(a.memory.messages)
    await assert_runs_again(a)


async def test_an_on_transition_listener_that_raises_ends_the_run_in_error() -> None:
    a = agent()
    a.on_transition(lambda t: (_ for _ in ()).throw(KeyError("oops")) if t.dest == "OBSERVING" else None)
    result = await a.run("go")
    assert (result.state, result.stop_reason) == ("ERROR", "error")
    assert result.error == "KeyError: 'oops'"
    assert_pairs_complete(a.memory.messages)
    await assert_runs_again(a)


async def test_a_failure_on_the_edge_into_a_final_state_keeps_it_and_names_the_failure() -> None:
    a = agent()

    def broken(event: AgentEvent) -> None:
        if isinstance(event, Transition) and event.dest == "FINISHED":
            raise OSError("disk gone")

    a.on_event(broken)
    result = await a.run("go")
    assert (result.state, result.stop_reason) == ("FINISHED", "terminated")  # it did finish
    assert result.error == "OSError: disk gone"
    await assert_runs_again(a)


async def test_a_lone_surrogate_is_recorded_and_replays_exactly(tmp_path: Path) -> None:
    trace, journal = tmp_path / "run.jsonl", tmp_path / "run.checkpoint.jsonl"
    a = agent(content=SURROGATE)
    result = await a.run("go \udfff", trace=trace, checkpoint=journal)
    assert (result.state, result.stop_reason) == ("FINISHED", "terminated"), result.error
    trace.read_bytes().decode("utf-8")  # the files stay UTF-8 (the surrogate is escaped)
    journal.read_bytes().decode("utf-8")
    assert "é" in trace.read_text(encoding="utf-8")  # the rest stays as written
    header, records = read_trace(trace)
    assert header["request"] == "go \udfff"
    assert next(r["reply"]["content"] for r in records if r["kind"] == "llm") == SURROGATE
    replayed = await replay(trace)
    assert replayed.result is not None and replayed.result.model_dump() == {
        **result.model_dump(),
        "run_id": replayed.result.run_id,
    }
    assert read_checkpoint(journal)["memory"] == a.memory.snapshot().model_dump(mode="json")


async def test_the_checkpoint_folder_removed_mid_run_ends_it_in_error(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    journal = folder / "run.checkpoint.jsonl"
    ran: list[int] = []
    a = agent(ran)

    steps = []
    async for transition in a.iter("go", checkpoint=journal):
        steps.append((transition.dest, transition.step))
        if (transition.dest, transition.step) == ("ACTING", 2):
            shutil.rmtree(folder)
    assert steps[-1] == ("ERROR", 2)
    result = a.last_result
    assert result is not None and (result.state, result.stop_reason) == ("ERROR", "error")
    assert result.error is not None
    # The folder took the lease file with it: the lease is found lost before the write is tried.
    assert result.error.startswith(f"CheckpointLeasedError: the lease of the checkpoint '{journal}' was lost")
    assert "was removed or replaced while this run held it" in result.error
    assert ran == [1]  # the second call's start could not be recorded: it never ran
    assert_pairs_complete(a.memory.messages)
    await assert_runs_again(a)


@pytest.mark.parametrize("kind", ["trace", "checkpoint"])
async def test_a_full_disk_ends_the_run_in_error(kind: str) -> None:
    ran: list[int] = []
    a = agent(ran)
    result = await a.run("go", **{kind: "/dev/full"})  # type: ignore[arg-type]
    assert (result.state, result.stop_reason) == ("ERROR", "error")
    assert result.error is not None
    assert result.error.startswith(f"RecordingError: cannot write the {kind} /dev/full: ")
    assert "No space left on device" in result.error
    assert ran == []
    assert_pairs_complete(a.memory.messages)
    await assert_runs_again(a)


async def test_bad_paths_are_refused_before_the_run_starts(tmp_path: Path) -> None:
    a = agent()
    for kind in ("trace", "checkpoint"):
        bad = ((tmp_path, "is a directory"), (tmp_path / "missing" / "x.json", "no such folder"))
        for path, cause in bad:
            with pytest.raises(RecordingError) as refused:
                await a.run("go", **{kind: path})  # type: ignore[arg-type]
            message = str(refused.value)
            assert message.startswith(f"cannot write the {kind} {path}: ") and cause in message, message
            assert "\n" not in message
    assert a.fsm_state == "IDLE" and len(a.memory) == 0


@pytest.mark.parametrize("flag", ["--trace", "--checkpoint"])
def test_cli_bad_recording_paths_are_usage_errors(
    flag: str, tmp_path: Path, capfd: pytest.CaptureFixture[str], clean_env: Path
) -> None:
    for path in (str(tmp_path), str(tmp_path / "nonexistent" / "x.json")):
        status = cli_main.main(["run", "go", "--model", "openai/none", flag, path])
        out, err = capfd.readouterr()
        assert status == 2, err
        assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert path in err


def test_cli_a_full_disk_is_an_error_exit_without_a_traceback(
    capfd: pytest.CaptureFixture[str], clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentfsm.cli import config

    monkeypatch.setattr(config, "build_llm", lambda settings: ScriptedLLM([reply("done")]))
    status = cli_main.main(["run", "go", "--model", "openai/none", "--json", "--trace", "/dev/full"])
    out, err = capfd.readouterr()
    assert status == 1 and "Traceback" not in err, err
    result: dict[str, Any] = json.loads(out)
    assert result["state"] == "ERROR" and "/dev/full" in result["error"]


# -- the event loop never waits on an fsync ---------------------------------------------------


async def test_checkpoint_appends_and_fsyncs_run_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every append and fsync of concurrent checkpointed runs happens in a thread other than the
    event loop's: a file system committing an fsync (a millisecond, or hundreds under load) never
    stalls the loop the runs share. (How long the loop waits is measured by `tools/bench.py`,
    "checkpointed" beside "plain"; before the writer threads, each record was written and
    fsynced on the loop: stalls of 150-400 ms.)"""
    import asyncio
    import threading

    from agentfsm.recording import checkpoint

    loop_thread = threading.get_ident()
    seen: dict[str, list[int]] = {"append": [], "fsync": []}
    lines = [0]
    append, fsync = checkpoint.append_record, checkpoint.fsync_journal

    def appending(path: Any, text: str, *, new: bool = False) -> None:
        seen["append"].append(threading.get_ident())
        lines[0] += text.count("\n")
        append(path, text, new=new)

    def syncing(path: Any, directory: bool) -> None:
        seen["fsync"].append(threading.get_ident())
        fsync(path, directory)

    monkeypatch.setattr(checkpoint, "append_record", appending)
    monkeypatch.setattr(checkpoint, "fsync_journal", syncing)

    @tool
    async def step(n: int) -> int:
        """A call that lets the loop go to the other runs, as real I/O would."""
        await asyncio.sleep(0)
        return n

    def build(i: int) -> ToolCallAgent:
        script = [reply(f"step {n}", [ToolCall.create(f"c{i}_{n}", "step", {"n": n})]) for n in range(3)]
        return ToolCallAgent(llm=ScriptedLLM(script), tools=[step, Terminate()], max_steps=3)

    agents = [build(i) for i in range(5)]
    paths = [tmp_path / f"{i}.jsonl" for i in range(5)]
    results = await asyncio.gather(*(a.run("go", checkpoint=p) for a, p in zip(agents, paths, strict=True)))
    assert all(r.stop_reason == "max_steps" for r in results), results[0]
    records = sum(len(p.read_text().splitlines()) for p in paths)
    assert lines[0] == records > 5 * 3  # every record was appended through the hook
    assert seen["fsync"], "no fsync ran"
    assert loop_thread not in seen["append"] + seen["fsync"]


# -- damaged or mismatched checkpoints are one-line usage errors -------------------------------


def _damaged(good: list[str]) -> dict[str, list[str] | str]:
    header, record = json.loads(good[0]), json.loads(good[1])
    other_class = {**header, "agent_class": "somewhere.Other"}
    options = {**header, "config": {**header["config"], "max_messages": 7}}  # memory's, not an option
    state = {**record, "run_state": {**record["run_state"], "state": "NOWHERE"}}
    shape = {**record, "run_state": {**record["run_state"], "step": "three"}}

    def memory(**changed: Any) -> str:
        """The first record, its snapshot of memory changed."""
        snapshot = record["memory"][0]["memory"]
        return json.dumps({**record, "memory": [{"op": "snapshot", "memory": {**snapshot, **changed}}]})

    messages = record["memory"][0]["memory"]["messages"]
    orphan = {"role": "tool", "content": "4", "tool_call_id": "zz"}
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": 7, "name": "add", "arguments": "{}"}]}
    after = {**record, "memory": [{"op": "drop", "at": 3, "count": 2}]}
    return {
        "empty": "",
        "truncated": good[0][:25],
        "not JSON": "{not json\n",
        "not objects": "[1, 2]\n[3]\n",
        "wrong schema": json.dumps({**header, "schema": 99}) + "\n",
        "header missing": "\n".join(good[1:]) + "\n",
        "no records": good[0] + "\n",
        "config not a table": [json.dumps({**header, "config": [1]}), *good[1:]],
        "run state of the wrong shape": [good[0], json.dumps(shape)],
        "run state not an object": [good[0], json.dumps({**record, "run_state": 3})],
        "memory change of the wrong shape": [good[0], json.dumps({**record, "memory": [{"op": "snapshot"}]})],
        "memory not a list": [good[0], json.dumps({**record, "memory": 5})],
        "unknown state": [good[0], json.dumps(state)],
        "options differ": [json.dumps(options), good[1]],  # the run's first record: still THINKING
        "another agent class": [json.dumps(other_class), good[1]],
        # what a journal's memory must hold for `Memory` to take it back (each was a traceback)
        "tool message answering no pending call": [good[0], memory(messages=[*messages, orphan])],
        "unknown role": [good[0], memory(messages=[{**messages[0], "role": "wizard"}])],
        "max_messages of 1": [good[0], memory(max_messages=1)],
        "max_messages not a number": [good[0], memory(max_messages="many")],
        "message not an object": [good[0], memory(messages=["go"])],
        "tool call of the wrong shape": [good[0], memory(messages=[*messages, call])],
        "request past the messages": [good[0], memory(pinned_index=5)],
        "request not a user message": [good[0], memory(messages=[{**messages[0], "role": "assistant"}])],
        "drop past the end": [good[0], good[1], json.dumps(after)],
        "unknown memory change": [good[0], json.dumps({**record, "memory": [5]})],
        "negative step": [good[0], json.dumps({**record, "run_state": {**record["run_state"], "step": -1}})],
        "llm config not a table": [
            json.dumps({**header, "config": {**header["config"], "llm": "m"}}),
            good[1],
        ],
        "model not a name": [
            json.dumps({**header, "config": {**header["config"], "llm": {"model": 5}}}),
            good[1],
        ],
        "agent class not a name": [json.dumps({**header, "agent_class": 5}), good[1]],
        "nested too deeply": [good[0], "[" * 100_000 + "]" * 100_000],
        "not a checkpoint": '{"a": 1}\n',  # was "checkpoint schema None is not supported"
    }


_CAUSES = {
    "tool message answering no pending call": "its memory does not read back (tool message for call "
    "id 'zz' answers no pending call (pending: []))",
    "unknown role": "its memory does not read back (messages.0.role: Input should be 'system', "
    "'user', 'assistant' or 'tool', got 'wizard')",
    "max_messages of 1": "its memory does not read back (`max_messages` must be at least 2",
    "max_messages not a number": "(max_messages: Input should be a valid integer",
    "message not an object": "(messages.0: Input should be a dictionary or an instance of Message, got 'go')",
    "tool call of the wrong shape": "(messages.1.tool_calls.0.id: Input should be a valid string, got 7)",
    "request past the messages": "(its request is message 5, but it holds 1 messages)",
    "request not a user message": "(a run's request must be a user message, got role 'assistant')",
    "drop past the end": "line 3 drops 2 messages from 3, but memory holds 1 by then",
    "unknown memory change": "line 2 holds an unknown memory change 5",
    "negative step": "its run is at step -1; a run's steps count from 1",
    "llm config not a table": "its config's llm is 'm', not a table",
    "model not a name": "its config's llm.model is 5, not a model name",
    "agent class not a name": "its agent_class is 5, not a class name",
    "nested too deeply": "line 2 is nested too deeply to read",
    "run state of the wrong shape": "its run state does not read back (step: Input should be a valid integer",
}
"""What the message says is wrong, after "the checkpoint PATH is damaged: " (and before its fix)."""


def _write_damaged(tmp_path: Path, lines: list[str]) -> dict[str, Path]:
    paths = {}
    for label, damaged in _damaged(lines).items():
        path = paths[label] = tmp_path / f"{label.replace(' ', '-')}.jsonl"
        path.write_text(damaged if isinstance(damaged, str) else "\n".join(damaged) + "\n")
    return paths


def test_cli_resume_of_a_damaged_checkpoint_is_one_line_and_exit_2(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentfsm.cli import config

    monkeypatch.setattr(config, "build_llm", lambda settings: ScriptedLLM([reply("a"), reply("b")]))
    good = tmp_path / "good.jsonl"
    assert cli_main.main(["run", "go", "--model", "openai/none", "--checkpoint", str(good)]) == 0
    capfd.readouterr()
    for label, path in _write_damaged(tmp_path, good.read_text().splitlines()).items():
        status = cli_main.main(["resume", str(path)])
        _, err = capfd.readouterr()
        assert status == 2, (label, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, (label, err)
        assert str(path) in err, (label, err)
        if label in _CAUSES:
            assert f"the checkpoint {path} is damaged: " in err and _CAUSES[label] in err, (label, err)
            assert err.rstrip().endswith("; resume from an intact copy, or start the run again"), err
        if label == "not a checkpoint":
            assert f"{path} is not an agentfsm checkpoint: its first line is no checkpoint's header" in err


async def test_resume_of_a_damaged_checkpoint_raises_checkpoint_error(tmp_path: Path) -> None:
    """The Python API refuses each damaged journal with agentfsm's `CheckpointError` (the message
    the command prints), never pydantic's, memory's or the machine's own exception, and nothing
    runs: the model is not asked, the agent takes its next run."""
    good = tmp_path / "good.jsonl"
    assert (await ToolCallAgent(llm=ScriptedLLM([reply("a")])).run("go", checkpoint=good)).ok
    for label, path in _write_damaged(tmp_path, good.read_text().splitlines()).items():
        resumer = ToolCallAgent(llm=ScriptedLLM([]))  # a call to the model would raise
        with pytest.raises(CheckpointError) as refused:
            await resumer.resume(path)
        assert type(refused.value) is CheckpointError, label
        assert str(path) in str(refused.value) or label in (
            "options differ",
            "another agent class",
            "unknown state",
        )
        if label in _CAUSES:
            assert _CAUSES[label] in str(refused.value), (label, refused.value)
        assert resumer.fsm_state == "IDLE", label
        await assert_runs_again(resumer)


def test_restore_of_damaged_data_raises_checkpoint_error(tmp_path: Path) -> None:
    """`restore` checks data given in code as `read_checkpoint` checks a file's."""
    good = tmp_path / "good.jsonl"
    ToolCallAgent(llm=ScriptedLLM([reply("a")])).run_sync("go", checkpoint=good)
    data = read_checkpoint(good)
    data["run_state"]["state"] = "THINKING"
    for part, value, cause in [
        ("memory", {**data["memory"], "max_messages": 1}, "its memory does not read back (`max_messages`"),
        ("run_state", {**data["run_state"], "usage": 3}, "its run state does not read back (usage:"),
    ]:
        with pytest.raises(CheckpointError, match=re.escape(f"the checkpoint is damaged: {cause}")):
            restore(ToolCallAgent(llm=ScriptedLLM([])), {**data, part: value}, AgentRunState)


def test_cli_resume_without_the_config_of_the_run_rebuilds_its_options(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentfsm.cli import config

    monkeypatch.setattr(
        config, "build_llm", lambda settings: ScriptedLLM([reply("a", [ToolCall.create("x", "nope", {})])])
    )
    (tmp_path / "run.toml").write_text("[agent]\nmax_observe = 50\nmax_steps = 1\n")
    journal = tmp_path / "run.jsonl"
    run = [
        "run",
        "go",
        "--model",
        "openai/none",
        "--config",
        str(tmp_path / "run.toml"),
        "--checkpoint",
        str(journal),
    ]
    cli_main.main(run)
    capfd.readouterr()
    lines = journal.read_text().splitlines()
    journal.write_text("\n".join(lines[:3]) + "\n")  # killed mid-run
    assert cli_main.main(["resume", str(journal)]) in (0, 3)  # the recorded options are rebuilt
    capfd.readouterr()


def test_cli_diagram_of_a_trace_whose_config_is_not_a_table(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentfsm.cli import config

    monkeypatch.setattr(config, "build_llm", lambda settings: ScriptedLLM([reply("a")]))
    trace = tmp_path / "run.jsonl"
    assert cli_main.main(["run", "go", "--model", "openai/none", "--trace", str(trace)]) == 0
    lines = trace.read_text().splitlines()
    trace.write_text("\n".join([json.dumps({**json.loads(lines[0]), "config": "x"}), *lines[1:]]) + "\n")
    capfd.readouterr()
    status = cli_main.main(["diagram", "--trace", str(trace)])
    _, err = capfd.readouterr()
    assert status == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


async def test_the_writers_threads_end_with_the_last_writer_that_used_them(tmp_path: Path) -> None:
    """The threads checkpoints are written in belong to the open writers: each checkpointed run
    gives them back when it ends, and the last writer to give them back ends them (no pool
    outlives the recordings that used it)."""
    import asyncio
    import threading

    from agentfsm.recording import writer

    users = writer._THREADS._users  # other tests' paused runs may hold them still
    first = ToolCallAgent(llm=ScriptedLLM([reply("one")]))
    second = ToolCallAgent(llm=ScriptedLLM([reply("two")]))
    await first.run("go", checkpoint=tmp_path / "one.json")
    await second.run("go", checkpoint=tmp_path / "two.json")
    assert writer._THREADS._users == users
    assert read_checkpoint(tmp_path / "two.json")["run_state"]["state"] == "FINISHED"

    threads = writer._Threads()  # one of their own, to see them end
    written: list[str] = []
    a = writer.RecordWriter(tmp_path / "a", lambda path, batch: written.append(batch[-1][0]))
    b = writer.RecordWriter(tmp_path / "b", lambda path, batch: written.append(batch[-1][0]))
    for w in (a, b):
        w._threads = threads.take()
        w.add(f"to {w.path}", new=True)
        await w
    named = {t.name for t in threading.enumerate()}
    assert any(name.startswith("agentfsm-recording") for name in named)
    pool = threads._pool
    assert pool is not None
    a._threads, b._threads = None, None
    threads.give_back()
    assert threads._pool is pool  # b still holds them
    threads.give_back()
    assert threads._pool is None
    for _ in range(100):  # each thread leaves once it has seen the shutdown
        if not any(t.is_alive() for t in pool._threads):
            break
        await asyncio.sleep(0.01)
    assert not any(t.is_alive() for t in pool._threads)
    assert sorted(written) == [f"to {tmp_path / 'a'}", f"to {tmp_path / 'b'}"]
