"""Traces (JSON Lines, written as the run goes) and offline replay (same edges, same RunResult)."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfsm import Terminate, ToolCall, ToolCallAgent, ToolCollection, cli
from agentfsm.agent.replay import ReplayError, replay
from agentfsm.cli import config
from agentfsm.errors import TokenLimitExceeded
from agentfsm.memory import Memory
from agentfsm.messages import Message
from agentfsm.recording.trace import (
    TRACE_SCHEMA,
    MemoryTrace,
    TraceError,
    TraceWriter,
    _Numbering,
    read_trace,
)
from agentfsm.run.events import LLMCall, Transition
from agentfsm.testing import ScriptedLLM, reply

TERMINATE = reply(tool_calls=[("terminate", {"status": "success"})])
KEY = "sk-secret-5e1d"

SCENARIOS = {
    "terminated": ([reply("adding", [("add", {"a": 2, "b": 3})]), TERMINATE], {}),
    "final_answer": ([reply("The answer is 42.")], {}),
    "max_steps": ([reply(tool_calls=[("add", {"a": i, "b": 1})]) for i in range(2)], {"max_steps": 2}),
    "stuck": (
        [reply("again", [("add", {"a": 1, "b": 1})])] * 6,
        {"duplicate_threshold": 1, "stuck_limit": 2},
    ),
    "tool_error": ([reply(tool_calls=[("explode", {"reason": "boom"}), ("nope", "{bad")]), TERMINATE], {}),
    "token_limit": (
        [reply(tool_calls=[("add", {"a": 1, "b": 1})]), TokenLimitExceeded("too long: 9000")],
        {},
    ),
    "tool_calls_required": ([reply("no"), reply("still no")], {"tool_choice": "required"}),
    "llm_failure": ([reply(tool_calls=[("add", {"a": 1, "b": 1})])], {}),  # the script runs out: `fail`
    "parallel_and_skipped": (
        [
            reply(
                tool_calls=[
                    ("slow_echo", {"text": "a"}),
                    ("terminate", {"status": "success"}),
                    ("add", {"a": 1}),
                ]
            )
        ],
        {"parallel_tool_calls": True},
    ),
}
EXPECTED = {"tool_error": "terminated", "llm_failure": "error", "tool_calls_required": "error",
            "parallel_and_skipped": "terminated"}  # fmt: skip


def edges(transitions: list[Transition]) -> list[tuple[object, ...]]:
    return [(t.source, t.dest, t.trigger, t.step, t.guards, t.stop_reason, t.error) for t in transitions]


def fields(result) -> dict[str, object]:
    data = result.model_dump(mode="json")
    data.pop("run_id")
    return data


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def traced_run(toolbox, path: Path, name: str, *, budget: int | None = None):
    script, options = SCENARIOS[name]
    agent = ToolCallAgent(llm=ScriptedLLM(script, token_budget=budget), tools=toolbox, **options)
    seen: list[Transition] = []
    agent.on_transition(seen.append)
    result = await agent.run("do it", trace=path)
    return agent, seen, result


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_replay_reproduces_transitions_and_result(toolbox, tmp_path, name):
    path = tmp_path / "run.jsonl"
    _, original, result = await traced_run(toolbox, path, name)
    replayed = await replay(path)
    assert replayed.ended_early is None
    assert edges(replayed.transitions) == edges(original)
    assert replayed.result is not None and fields(replayed.result) == fields(result)
    assert result.stop_reason == EXPECTED.get(name, name)


@pytest.mark.parametrize("name", ["terminated", "tool_error", "token_limit"])
async def test_a_trace_in_memory_is_the_file_a_trace_to_disk_would_be(toolbox, tmp_path, name):
    on_disk = tmp_path / "run.jsonl"
    await traced_run(toolbox, on_disk, name)
    memory = MemoryTrace()
    _, original, result = await traced_run(toolbox, memory, name)
    assert str(memory) == "<trace in memory>" and not list(tmp_path.glob("*.tmp"))

    def kinds(text: str) -> list[tuple[str, object]]:
        return [(r["kind"], r.get("dest") or r.get("name")) for r in map(json.loads, text.splitlines())]

    assert kinds(memory.text) == kinds(on_disk.read_text())
    written = tmp_path / "memory.jsonl"
    written.write_text(memory.text)
    replayed = await replay(written)
    assert edges(replayed.transitions) == edges(original)
    assert replayed.result is not None and fields(replayed.result) == fields(result)


async def test_budget_spent_before_a_call_replays(toolbox, tmp_path):
    path = tmp_path / "run.jsonl"
    _, original, result = await traced_run(toolbox, path, "max_steps", budget=15)
    assert result.stop_reason == "token_limit"
    replayed = await replay(path)
    assert edges(replayed.transitions) == edges(original)
    assert fields(replayed.result) == fields(result)


async def test_trace_records(toolbox, tmp_path):
    path = tmp_path / "run.jsonl"
    agent, original, result = await traced_run(toolbox, path, "tool_error")
    lines = records(path)
    assert all("kind" in r for r in lines)
    header, last = lines[0], lines[-1]
    assert (header["kind"], header["schema"], header["run_id"]) == ("header", TRACE_SCHEMA, result.run_id)
    assert header["agent_class"] == "agentfsm.agent.toolcall.ToolCallAgent"
    assert header["request"] == "do it" and header["config"]["max_steps"] == 30
    assert [t["function"]["name"] for t in header["config"]["tools"]] == [
        t["function"]["name"] for t in agent.tools.to_params()
    ]
    assert last == {"kind": "result", "result": result.model_dump(mode="json")}
    kinds = [r["kind"] for r in lines]
    assert kinds.count("transition") == len(original)
    assert kinds.count("llm") == result.usage.llm_calls == 2
    tools = [r for r in lines if r["kind"] == "tool"]
    assert [(t["name"], t["is_error"]) for t in tools] == [
        ("explode", True),
        ("nope", True),
        ("terminate", False),
    ]
    assert tools[0]["observation"] == "Error: ⚠️ Tool 'explode' encountered a problem: boom"
    assert tools[1]["arguments"] == "{bad"
    llm = next(r for r in lines if r["kind"] == "llm")
    request, prompt, system = llm["new_messages"]  # each message is written once, numbered 0, 1, ...
    assert request == {**request, "role": "user", "content": "do it"} and system["role"] == "system"
    assert llm["request"]["messages"] == [[0, 2]] and llm["request"]["system_msgs"] == [[2, 1]]
    assert llm["request"]["tool_choice"] == "auto" and llm["usage"]["input_tokens"] == 10
    second = [r for r in lines if r["kind"] == "llm"][1]  # the same request and tools: named, not written
    assert request not in second["new_messages"] and second["request"]["tools"] is None
    assert second["request"]["messages"][0] == [0, 1]
    _, whole = read_trace(path)
    first_llm, second_llm = (r for r in whole if r["kind"] == "llm")
    assert first_llm["request"]["messages"] == [request, prompt]
    # after tool results the step prompt ends the system prompt: a new system message, written once
    assert second_llm["request"]["system_msgs"][0]["content"].endswith(f"\n\n{prompt['content']}")
    assert second_llm["request"]["messages"][-1]["role"] == "tool"
    first = next(r for r in lines if r["kind"] == "transition" and r["trigger"] == "think_done")
    assert first["guards"][0] == {"name": "token_limit", "held": False} and first["duration_s"] >= 0


async def test_second_run_on_the_same_agent_replays_with_its_history(toolbox, tmp_path):
    agent = ToolCallAgent(llm=ScriptedLLM([reply("one"), reply("two")]), tools=toolbox)
    await agent.run("first")
    seen: list[Transition] = []
    agent.on_transition(seen.append)
    result = await agent.run("second", trace=tmp_path / "run.jsonl")
    lines = records(tmp_path / "run.jsonl")
    assert next(r["trigger"] for r in lines if r["kind"] == "transition") == "start"  # not the reset
    assert [m["content"] for m in lines[0]["history"]] == ["first", "one"]
    replayed = await replay(tmp_path / "run.jsonl")
    assert edges(replayed.transitions) == edges(seen[1:])
    assert fields(replayed.result) == fields(result)


async def test_edits_are_traced_and_reapplied(toolbox, tmp_path):
    script = [reply("adding", [("add", {"a": 1, "b": 2})]), TERMINATE]
    agent = ToolCallAgent(llm=ScriptedLLM(script), tools=toolbox)
    path = tmp_path / "run.jsonl"
    seen = []
    with TraceWriter(path, agent):  # how to trace a run driven by iter()
        async for t in agent.iter("add"):
            seen.append(t)
            if t.dest == "ACTING" and t.step == 1:
                agent.replace_pending_calls([ToolCall.create("call_1", "add", {"a": 40, "b": 2})])
            if t.dest == "OBSERVING" and t.step == 1:
                agent.edit_observation("call_1", "forty-two")
    edits = [r for r in records(path) if r["kind"] == "edit"]
    assert [(e["edit"], e["step"]) for e in edits] == [("pending_calls", 1), ("observation", 1)]
    assert edits[0]["after"][0]["arguments"] == '{"a": 40, "b": 2}'
    assert (edits[1]["call_id"], edits[1]["after"]) == ("call_1", "forty-two")
    replayed = await replay(path)  # the requests are checked: the model saw the edited versions
    assert edges(replayed.transitions) == edges(seen)
    assert fields(replayed.result) == fields(agent.last_result)

    lines = path.read_text().splitlines()
    without = [line for line in lines if '"kind": "edit"' not in line]
    path.write_text("\n".join(without) + "\n")
    with pytest.raises(
        ReplayError, match=r"call 'call_1' is add\(.*\) on replay, add\(.*40.*\) in the trace"
    ):
        await replay(path)


async def test_a_trace_cut_short_replays_up_to_where_it_ends(toolbox, tmp_path):
    path = tmp_path / "run.jsonl"
    _, original, result = await traced_run(toolbox, path, "terminated")
    lines = path.read_text().splitlines(keepends=True)
    cut = tmp_path / "cut.jsonl"
    for n in range(1, len(lines)):
        for text in ("".join(lines[:n]), "".join(lines[:n]) + lines[n][: len(lines[n]) // 2]):
            cut.write_text(text)
            replayed = await replay(cut)
            got = edges(replayed.transitions)
            assert got == edges(original)[: len(got)]
            assert len(got) >= sum(1 for line in lines[:n] if '"kind": "transition"' in line)
            if replayed.result is not None:  # every input was in the prefix: the run is recomputed
                assert fields(replayed.result) == fields(result) and replayed.ended_early is None
                assert got == edges(original)
            else:
                assert replayed.ended_early.startswith("the trace ends early")
                assert n < len(lines) - 1


async def test_each_request_reads_back_as_sent_and_each_message_is_written_once(toolbox, tmp_path):
    """Memory trims from the front and keeps the request, a prompt ends each request, an edit
    rewrites the last message: the trace names what it already holds and writes the rest."""
    script = [reply(f"adding {i}", [("add", {"a": i, "b": 1})]) for i in range(6)] + [TERMINATE]
    agent = ToolCallAgent(llm=ScriptedLLM(script), tools=toolbox, memory=Memory(5))
    sent: list[LLMCall] = []
    agent.on_event(lambda event: sent.append(event) if isinstance(event, LLMCall) else None)
    path = tmp_path / "run.jsonl"
    with TraceWriter(path, agent):
        async for t in agent.iter("add them"):
            if t.dest == "ACTING" and t.step == 3:
                agent.replace_pending_calls([ToolCall.create("edited", "add", {"a": 40, "b": 2})])
    _, whole = read_trace(path)
    requests = [r["request"] for r in whole if r["kind"] == "llm"]
    assert [r["messages"] for r in requests] == [
        [m.model_dump(mode="json") for m in c.messages] for c in sent
    ]
    assert [r["system_msgs"] for r in requests] == [
        [m.model_dump(mode="json") for m in c.system_msgs] for c in sent
    ]
    assert all(r["tools"] == list(c.tools) for r, c in zip(requests, sent, strict=True))
    raw = [r for r in records(path) if r["kind"] == "llm"]
    written = [m for r in raw for m in r["new_messages"]]
    assert len(written) == len({json.dumps(m, sort_keys=True) for m in written})  # never twice
    assert all(len(r["request"]["messages"]) <= 3 for r in raw)  # the request, the rest, the prompt
    replayed = await replay(path)
    assert fields(replayed.result) == fields(agent.last_result)


messages_pool = [Message.user_message("u"), Message.assistant_message("a"), Message.user_message("u")]


@settings(max_examples=300, deadline=None)
@given(requests=st.lists(st.lists(st.integers(0, 7), max_size=12), max_size=8))
def test_any_sequence_of_requests_is_numbered_and_read_back_exactly(requests):
    """Runs of numbers express any request, with equal messages, repeats, reorderings, fresh objects."""
    pool = [*messages_pool, *(Message.assistant_message(str(i)) for i in range(3))]
    numbering, table = _Numbering(0), []
    for picks in requests:
        sent = [pool[k] if k < len(pool) else Message.user_message(f"fresh {k}") for k in picks]
        runs = numbering.runs(sent)
        table.extend(numbering.take_new())
        rebuilt = [table[n] for first, count in runs for n in range(first, first + count)]
        assert rebuilt == [m.model_dump(mode="json") for m in sent]
        assert all(count >= 1 for _, count in runs)
        assert all(a + n != b for (a, n), (b, _) in itertools.pairwise(runs))  # runs merged


def test_a_trace_of_the_first_schema_is_refused_with_the_fix(tmp_path, capsys):
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps({"kind": "header", "schema": 1, "request": "t"}) + "\n")
    expected = (
        f"{path}: trace schema 1 is not supported; this agentfsm reads schema 3; "
        "re-record the run with this agentfsm"
    )
    with pytest.raises(TraceError) as refused:
        read_trace(path)
    assert str(refused.value) == expected and TRACE_SCHEMA == 3
    with pytest.raises(ReplayError, match="re-record the run"):
        asyncio.run(replay(path))
    assert cli.main(["replay", str(path)]) == 2
    assert cli.main(["diagram", "--trace", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("trace schema 1 is not supported") == 2 and err.count("\n") == 2


def test_other_schema_or_not_a_trace_is_a_clear_error(toolbox, tmp_path, capsys):
    path = tmp_path / "run.jsonl"
    asyncio.run(traced_run(toolbox, path, "final_answer"))
    lines = records(path)
    lines[0]["schema"] = 99
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    with pytest.raises(
        ReplayError,
        match="trace schema 99 is not supported; this agentfsm reads schema 3; re-record the run",
    ):
        asyncio.run(replay(path))
    assert cli.main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert "trace schema 99 is not supported" in err and err.count("\n") == 1
    path.write_text('{"kind": "transition"}\n')
    with pytest.raises(ReplayError, match="not an agentfsm trace"):
        asyncio.run(replay(path))
    assert cli.main(["replay", str(tmp_path / "missing.jsonl")]) == 2


def test_trace_config_has_no_secrets():
    from agentfsm.model.llm import LLM

    agent = ToolCallAgent(llm=LLM("openai/m", api_key=KEY, api_base="http://127.0.0.1:1/v1"))
    text = json.dumps(agent.trace_config())
    assert KEY not in text and "openai/m" in text and "127.0.0.1" in text


# -- the command line ------------------------------------------------------------------------


def test_cli_run_trace_then_replay(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    script = ScriptedLLM([reply(tool_calls=[("terminate", {"status": "success"})])])
    monkeypatch.setattr(config, "build_llm", lambda settings: script)
    args = ["run", "t", "--model", "openai/unused", "--api-key", KEY, "--json", "--trace", "t.jsonl"]
    assert cli.main(args) == 0
    ran = json.loads(capsys.readouterr().out)
    assert KEY not in (tmp_path / "t.jsonl").read_text()

    assert cli.main(["replay", "t.jsonl", "--json"]) == 0
    replayed = json.loads(capsys.readouterr().out)
    assert {**replayed, "run_id": ""} == {**ran, "run_id": ""}

    assert cli.main(["replay", "t.jsonl"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("IDLE -> THINKING  start  step 1\n")
    assert "OBSERVING -> FINISHED  observe_done  step 1  [terminated]" in out
    assert "FINISHED  stop_reason=terminated  steps=1" in err


def test_cli_replay_exit_codes(toolbox, tmp_path, capsys):
    path = tmp_path / "run.jsonl"
    asyncio.run(traced_run(toolbox, path, "max_steps"))
    assert cli.main(["replay", str(path), "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["stop_reason"] == "max_steps"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:4]))
    assert cli.main(["replay", str(path)]) == 1
    captured = capsys.readouterr()
    assert "the trace ends early" in captured.err and captured.out.startswith("IDLE -> THINKING")


def test_replaying_never_runs_a_tool(tmp_path):
    ran = []

    class Spy(Terminate):
        async def execute(self, **kwargs):
            ran.append(kwargs)
            return await super().execute(**kwargs)

    agent = ToolCallAgent(llm=ScriptedLLM([TERMINATE]), tools=ToolCollection(Spy()))
    asyncio.run(agent.run("t", trace=tmp_path / "t.jsonl"))
    assert len(ran) == 1
    assert asyncio.run(replay(tmp_path / "t.jsonl")).result.stop_reason == "terminated"
    assert len(ran) == 1


def replay_step(path: Path, commands: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentfsm", "replay", str(path), "--step", "--break", "OBSERVING"],
        input=commands,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_replay_step_puts_the_replayed_run_under_the_debugger(toolbox, tmp_path):
    path = tmp_path / "run.jsonl"
    asyncio.run(traced_run(toolbox, path, "terminated"))
    proc = replay_step(path, "continue\nmemory\ncontinue\ncontinue\n")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("paused before the first transition of: do it\n")
    assert "ACTING -> OBSERVING  act_done  step 1\n    result add: 5" in out
    assert "  1 assistant adding -> add(" in out  # `memory` at the breakpoint
    assert "run ended: FINISHED (terminated)" in out and "stop_reason=terminated  steps=2" in proc.stderr

    cut = tmp_path / "cut.jsonl"  # a trace cut short: the replay stops where it ends
    lines = path.read_text().splitlines(keepends=True)
    cut.write_text("".join(lines[:5]))
    proc = replay_step(cut, "continue\n" * 4)
    assert proc.returncode == 1
    assert "the trace ends early" in proc.stderr

    diverged = tmp_path / "diverged.jsonl"  # a trace whose edges the replay does not reproduce
    header, records = path.read_text().split("\n", 1)  # the header's table names the state too
    diverged.write_text(header + "\n" + records.replace('"dest": "OBSERVING"', '"dest": "FINISHED"', 1))
    proc = replay_step(diverged, "continue\n" * 4)
    assert proc.returncode == 2
    assert "differs: replayed" in proc.stderr
