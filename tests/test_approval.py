"""Approvals: AWAITING_APPROVAL between THINKING and ACTING; pause, decide (approve, edit, reject), resume."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import assert_pairs_complete

from agentfsm import AgentState, StopReason, Terminate, ToolCallAgent, tool
from agentfsm.agent.approval import AWAITING_APPROVAL, Decision, with_approval
from agentfsm.agent.replay import replay
from agentfsm.agent.table import AGENT_TABLE
from agentfsm.errors import AgentBusyError, CheckpointError, CheckpointLeasedError, WrongPhaseError
from agentfsm.fsm.diagram import to_mermaid
from agentfsm.recording.checkpoint import read_checkpoint
from agentfsm.run.events import Edit
from agentfsm.testing import ScriptedLLM, reply

TERMINATE = reply(tool_calls=[("terminate", {"status": "success"})])
DELETE_TWO = reply("cleaning", [("delete", {"path": "a"}), ("delete", {"path": "b"})])


class Deleter:
    """A tool with a side effect that needs approval, and a record of what it really did."""

    def __init__(self) -> None:
        self.deleted: list[str] = []

        @tool(needs_approval=True)
        def delete(path: str) -> str:
            """Delete a file."""
            self.deleted.append(path)
            return f"deleted {path}"

        self.tool = delete


@tool
def look(path: str) -> str:
    """Read-only: needs no approval."""
    return f"{path} exists"


def build(*script, deleter: Deleter | None = None, **options) -> tuple[ToolCallAgent, Deleter]:
    deleter = deleter or Deleter()
    agent = ToolCallAgent(llm=ScriptedLLM(list(script)), tools=[deleter.tool, look, Terminate()], **options)
    return agent, deleter


def edges(agent_transitions) -> list[tuple[str, str]]:
    return [(t.source, t.dest) for t in agent_transitions]


def test_the_state_exists_only_when_a_tool_needs_approval():
    plain = ToolCallAgent(llm=ScriptedLLM([]), tools=[look, Terminate()])
    assert plain.table is AGENT_TABLE and "AWAITING_APPROVAL" not in plain.table.by_name
    agent, _ = build()
    assert agent.table is with_approval(AGENT_TABLE)  # built once, shared by every such agent
    assert agent.table.by_name["AWAITING_APPROVAL"] == AWAITING_APPROVAL
    assert agent.table.groups["RUNNING"] == ("THINKING", "ACTING", "OBSERVING", "AWAITING_APPROVAL")
    think_done = [
        (e.dest, e.guard.name if e.guard else None) for e in agent.table.edges if e.trigger == "think_done"
    ]
    # before [has_tool_calls], so a call that needs approval cannot reach ACTING directly
    assert think_done[:3] == [
        ("FINISHED", "token_limit"),
        ("AWAITING_APPROVAL", "needs_approval"),
        ("ACTING", "has_tool_calls"),
    ]
    by_name = ToolCallAgent(llm=ScriptedLLM([]), tools=[look, Terminate()], require_approval=["look"])
    assert "AWAITING_APPROVAL" in by_name.table.by_name and by_name.approval_names == ["look"]
    mermaid = to_mermaid(agent.table)
    assert "THINKING --> AWAITING_APPROVAL: think_done [needs_approval]" in mermaid
    assert "AWAITING_APPROVAL --> ACTING: decided" in mermaid


async def test_a_run_pauses_with_the_calls_listed_and_nothing_run():
    agent, deleter = build(reply(tool_calls=[("look", {"path": "a"}), ("delete", {"path": "a"})]), TERMINATE)
    ended = []

    async def on_end(result):
        ended.append(result)

    agent.on_run_end = on_end  # type: ignore[method-assign]
    seen = [t async for t in agent.iter("clean")]
    assert edges(seen) == [("IDLE", "THINKING"), ("THINKING", "AWAITING_APPROVAL")]
    assert seen[-1].guards[1].name == "needs_approval" and seen[-1].guards[1].held
    result = agent.last_result
    assert result is not None and result.paused
    assert (result.state, result.stop_reason, result.steps) == (
        AgentState.RUNNING,
        StopReason.AWAITING_APPROVAL,
        1,
    )
    assert [c.name for c in result.pending_approval] == ["delete"]  # `look` needs none
    assert agent.state is AgentState.RUNNING and agent.fsm_state == "AWAITING_APPROVAL"
    assert agent.pending_approval == list(result.pending_approval)
    assert deleter.deleted == [] and ended == []  # not run; not the run's end (resources kept)
    agent.approve()
    result = await agent.resume()
    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TERMINATED)
    assert deleter.deleted == ["a"] and len(ended) == 1
    tool_results = [m.content for m in agent.memory.messages if m.role == "tool"]
    assert tool_results[:2] == ["Observed output of cmd `look` executed:\na exists",
                                "Observed output of cmd `delete` executed:\ndeleted a"]  # fmt: skip


async def test_approve_edit_and_reject_each_call():
    agent, deleter = build(DELETE_TWO, TERMINATE)
    result = await agent.run("clean")
    first, second = (c.id for c in result.pending_approval)
    [edit] = agent.approve(first, arguments={"path": "a.bak"})
    assert (edit.kind, edit.call_id, edit.after) == ("approval", first, Decision.approve('{"path": "a.bak"}'))
    agent.reject(second, reason="b is still in use")
    assert agent.pending_approval == []
    result = await agent.resume()
    assert result.stop_reason is StopReason.TERMINATED and result.steps == 2
    assert deleter.deleted == ["a.bak"]  # the edit ran; the rejected call did not
    sent = agent.llm.requests[1].messages  # what the model saw next
    assistant = next(m for m in sent if m.role == "assistant")
    assert [c.arguments for c in assistant.tool_calls] == ['{"path": "a.bak"}', '{"path": "b"}']
    tool_results = [m.content for m in sent if m.role == "tool"]
    assert tool_results == [
        "Observed output of cmd `delete` executed:\ndeleted a.bak",
        "Error: the user rejected the call to `delete`; it was not run. Reason: b is still in use",
    ]
    assert_pairs_complete(agent.memory.messages)


async def test_an_approver_decides_without_pausing():
    asked = []

    async def approver(calls):
        asked.append([c.arguments for c in calls])
        return [Decision.approve(), Decision.reject()]

    agent, deleter = build(DELETE_TWO, TERMINATE, approver=approver)
    events = []
    agent.on_event(events.append)
    result = await agent.run("clean")
    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TERMINATED)
    assert asked == [['{"path": "a"}', '{"path": "b"}']] and deleter.deleted == ["a"]
    kinds = [(type(e).__name__, getattr(e, "dest", getattr(e, "kind", None))) for e in events]
    at = kinds.index(("Transition", "AWAITING_APPROVAL"))
    assert kinds[at + 1 : at + 4] == [("Edit", "approval"), ("Edit", "approval"), ("Transition", "ACTING")]
    assert "Error: the user rejected the call to `delete`; it was not run." in [
        m.content for m in agent.memory.messages
    ]


async def test_a_broken_approver_ends_the_run_in_error_and_runs_nothing():
    async def approver(calls):
        return [Decision.approve()]  # one answer for two calls

    agent, deleter = build(DELETE_TWO, approver=approver)
    result = await agent.run("clean")
    assert (result.state, result.stop_reason) == (AgentState.ERROR, StopReason.ERROR)
    assert "the approver must return one Decision per call (2)" in result.error
    assert deleter.deleted == []
    assert_pairs_complete(agent.memory.messages)


async def test_decisions_are_checked():
    agent, _ = build(DELETE_TWO, TERMINATE)
    with pytest.raises(WrongPhaseError, match="approvals are decided only in AWAITING_APPROVAL"):
        agent.approve("call_1")
    result = await agent.run("clean")
    first = result.pending_approval[0].id
    with pytest.raises(KeyError, match="no pending call with id 'nope'"):
        agent.reject("nope")
    with pytest.raises(ValueError, match="not JSON"):
        agent.approve(first, arguments="{oops")
    with pytest.raises(ValueError, match="must be a JSON object"):
        agent.approve(first, arguments="[1]")
    agent.approve(first)
    with pytest.raises(ValueError, match=r"already decided in the pause of run '\w+' at step 1"):
        agent.reject(first)
    # the other call still waits: a resume now would only pause again, so it is refused, naming it
    with pytest.raises(
        WrongPhaseError, match=r"waits in AWAITING_APPROVAL for decisions on delete \(call_2\)"
    ):
        await agent.resume()
    assert [c.id for c in agent.pending_approval] == ["call_2"]
    agent.reject("call_2")
    assert (await agent.resume()).ok
    with pytest.raises(WrongPhaseError, match="approvals are decided only in AWAITING_APPROVAL"):
        agent.approve()  # every waiting call, after the run: refused, not an empty list


async def test_a_paused_agent_refuses_a_new_run_and_reset_until_resumed_or_cancelled():
    agent, deleter = build(DELETE_TWO, TERMINATE)
    ended = []

    async def on_end(result):
        ended.append(result)

    agent.on_run_end = on_end  # type: ignore[method-assign]
    await agent.run("clean")
    with pytest.raises(AgentBusyError, match="has a paused run"):
        await agent.run("another")
    with pytest.raises(AgentBusyError, match="has a paused run"):
        agent.reset()
    result = await agent.cancel()
    assert (result.state, result.stop_reason) == (AgentState.ERROR, StopReason.CANCELLED)
    assert result.error == "CancelledError: the paused run was cancelled" and ended == [result]
    assert deleter.deleted == [] and agent.state is AgentState.ERROR
    assert_pairs_complete(agent.memory.messages)  # the waiting calls got their closing results
    with pytest.raises(AgentBusyError, match="no paused run"):
        await agent.resume()
    agent.reset()
    assert agent.state is AgentState.IDLE


async def test_a_paused_run_resumed_into_the_same_memory_trace_replays(tmp_path):
    from agentfsm.recording.trace import MemoryTrace

    memory = MemoryTrace()
    agent, _ = build(DELETE_TWO, TERMINATE)
    seen = []
    agent.on_transition(seen.append)
    await agent.run("clean", trace=memory)
    at_pause = memory.text
    agent.approve("call_1", arguments={"path": "z"})
    agent.reject("call_2", "no")
    await agent.resume(trace=memory)
    assert memory.text.startswith(at_pause) and memory.text.count('"kind": "header"') == 1
    path = tmp_path / "run.jsonl"
    path.write_text(memory.text)
    replayed = await replay(path)
    assert edges(replayed.transitions) == edges(seen)
    assert replayed.result is not None and replayed.result.stop_reason == "terminated"


async def test_a_paused_and_resumed_run_is_one_trace_that_replays(tmp_path):
    path = tmp_path / "run.jsonl"
    agent, deleter = build(DELETE_TWO, TERMINATE)
    seen = []
    agent.on_transition(seen.append)
    paused = await agent.run("clean", trace=path)
    at_pause = path.read_text()
    agent.approve("call_1", arguments={"path": "z"})
    agent.reject("call_2", "no")
    result = await agent.resume(trace=path)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["kind"] for r in records].count("header") == 1
    approvals = [r for r in records if r["kind"] == "edit"]
    assert [(r["edit"], r["call_id"], r["after"]["approved"]) for r in approvals] == [
        ("approval", "call_1", True), ("approval", "call_2", False)
    ]  # fmt: skip
    replayed = await replay(path)
    assert edges(replayed.transitions) == edges(seen)
    assert replayed.result is not None
    assert replace(replayed.result, run_id="") == replace(result, run_id="")
    assert deleter.deleted == ["z"]  # replay ran nothing
    # the trace as it was at the pause replays to the same pause
    cut = tmp_path / "paused.jsonl"
    cut.write_text(at_pause)
    replayed = await replay(cut)
    assert replayed.result is not None and replayed.result.paused
    assert replace(replayed.result, run_id="") == replace(paused, run_id="")


async def test_a_paused_run_survives_a_restart_through_its_checkpoint(tmp_path):
    path = tmp_path / "run.json"
    deleter = Deleter()
    first, _ = build(DELETE_TWO, deleter=deleter)
    await first.run("clean", checkpoint=path)
    assert read_checkpoint(path)["run_state"]["state"] == "AWAITING_APPROVAL"
    with pytest.raises(CheckpointLeasedError, match="paused here"):  # the paused run still owns it
        await build(TERMINATE, deleter=deleter)[0].resume(path)
    del first  # its process ends: the paused run's lease goes with it
    gc.collect()
    # another process: the same agent, built again; it resumes into the same pause
    second, _ = build(TERMINATE, deleter=deleter)
    result = await second.resume(path)
    assert result.paused and [c.id for c in result.pending_approval] == ["call_1", "call_2"]
    second.approve("call_2")
    second.reject("call_1")
    await second.flush_listeners()  # the journal's writer is off the event loop: let it catch up
    decisions = read_checkpoint(path)["run_state"]["turn"]["decisions"]  # decisions are checkpointed
    assert decisions == {"call_2": {"approved": True, "arguments": None, "reason": None},
                         "call_1": {"approved": False, "arguments": None, "reason": None}}  # fmt: skip
    result = await second.resume()  # in place, still writing the checkpoint
    assert result.stop_reason is StopReason.TERMINATED and deleter.deleted == ["b"]
    assert read_checkpoint(path)["run_state"]["state"] == "FINISHED"
    other = ToolCallAgent(llm=ScriptedLLM([]), tools=[look, Terminate()])
    with pytest.raises(CheckpointError, match="require_approval"):
        await other.resume(path)


async def test_a_tool_that_needs_approval_never_runs_undecided():
    """Defence in depth: a call edited in ACTING to one that needs approval is refused, not run."""
    from agentfsm import ToolCall

    agent, deleter = build(reply(tool_calls=[("look", {"path": "a"})]), TERMINATE)
    async for t in agent.iter("look"):
        if t.dest == "ACTING" and t.step == 1:
            agent.replace_pending_calls([ToolCall.create("call_1", "delete", {"path": "a"})])
    assert deleter.deleted == []
    assert any(
        (m.content or "").endswith("Reason: it needs approval and none was given")
        for m in agent.memory.messages
    )


async def test_edits_while_paused_are_edit_events():
    agent, _ = build(DELETE_TWO, TERMINATE)
    events = []
    agent.on_event(events.append)
    await agent.run("clean")
    agent.reject()
    assert [(e.kind, e.call_id) for e in events if isinstance(e, Edit)] == [
        ("approval", "call_1"),
        ("approval", "call_2"),
    ]
    assert len(agent.paused_edits) == 2
    await agent.resume()
    assert agent.paused_edits == ()


# -- the command line: asks on the terminal (piped here, one answer a line) -------------------


def agentfsm_with_input(stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentfsm", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,  # no terminal: the questions are asked on the pipes
        env={
            k: v
            for k, v in os.environ.items()
            if not k.startswith("AGENTFSM_") or k == "AGENTFSM_REQUIRE_DOCKER"
        },
    )


def manus_config(tmp_path: Path, llmock) -> list[str]:
    (tmp_path / "run.toml").write_text(
        f'[llm.manus]\nmodel = "openai/manus-model"\napi_key = "k"\n'
        f'api_base = "{llmock.base_url("openai")}"\n'
        '[agent]\nmax_steps = 5\n[sandbox]\nmode = "local"\nlocal_dir = "ws"\n'
    )
    return ["run", "compute", "--agent", "manus", "--config", str(tmp_path / "run.toml"), "--json"]


@pytest.mark.http
def test_cli_asks_before_each_call_and_applies_reject_and_edit(clean_env, llmock):
    llmock.call_tool("python_execute", {"code": "open('gone.txt', 'w').write('x')"})
    llmock.call_tool("python_execute", {"code": "print(1)"})
    llmock.call_tool("terminate", {"status": "success"})
    answers = "n\nnot that file\nmaybe\ne\n{oops\ne\n" + json.dumps({"code": "print(6 * 7)"}) + "\n"
    proc = agentfsm_with_input(
        answers, *manus_config(clean_env, llmock), "--require-approval", "python_execute"
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["state"], result["stop_reason"], result["steps"]) == ("FINISHED", "terminated", 3)
    assert proc.stderr.count("Approval needed: python_execute(") == 2
    assert "answer y, n or e (got 'maybe')" in proc.stderr and "not JSON" in proc.stderr
    assert not (clean_env / "ws" / "gone.txt").exists()  # rejected: never ran
    observed = [m["content"] for r in llmock.requests for m in r.body["messages"] if m["role"] == "tool"]
    assert (
        "Error: the user rejected the call to `python_execute`; it was not run. Reason: not that file"
        in observed
    )
    assert any(str(o).endswith("executed:\n42\n") or str(o).endswith("executed:\n42") for o in observed)


@pytest.mark.http
def test_cli_with_closed_input_rejects_and_runs_nothing(clean_env, llmock):
    llmock.call_tool("python_execute", {"code": "open('gone.txt', 'w').write('x')"})
    llmock.call_tool("terminate", {"status": "success"})
    args = manus_config(clean_env, llmock)
    proc = agentfsm_with_input("", *args, "--require-approval", "python_execute,bash")
    assert proc.returncode == 0, proc.stderr
    assert "input closed: the remaining calls are rejected" in proc.stderr
    assert not (clean_env / "ws" / "gone.txt").exists()
    observed = [m["content"] for m in llmock.requests[1].body["messages"] if m["role"] == "tool"]
    assert observed == [
        "Error: the user rejected the call to `python_execute`; it was not run. "
        "Reason: no answer: nobody was there to approve it"
    ]


def test_cli_refuses_an_unknown_tool_name(clean_env, capsys):
    from agentfsm.cli import commands as cli_main

    code = cli_main.main(
        ["run", "x", "--model", "openai/m", "--api-base", "http://127.0.0.1:9", "--require-approval", "bsh"]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "require_approval names tools the toolcall agent does not have: bsh; its tools: terminate" in err


def test_replaying_a_trace_that_ends_at_a_pause_exits_4(clean_env, capsys):
    import asyncio

    from agentfsm.cli import commands as cli_main

    agent, _ = build(DELETE_TWO)
    asyncio.run(agent.run("clean", trace="paused.jsonl"))
    assert cli_main.main(["replay", "paused.jsonl", "--json"]) == 4
    result = json.loads(capsys.readouterr().out)
    assert (result["state"], result["stop_reason"]) == ("RUNNING", "awaiting_approval")
    assert [c["name"] for c in result["pending_approval"]] == ["delete", "delete"]


async def test_the_terminal_approver_asks_each_call_and_keeps_the_live_view_quiet(monkeypatch, capsys):
    import contextlib
    import io

    from agentfsm import ToolCall
    from agentfsm.cli.terminal import TerminalApprover

    monkeypatch.setattr(sys, "stdin", io.StringIO('x\ne\n[1]\ne\n{"a": 1}\nn\n\ny\n'))
    quiet = []

    @contextlib.contextmanager
    def suspended():
        quiet.append("stop")
        yield
        quiet.append("start")

    approver = TerminalApprover()
    approver.quiet = suspended
    calls = [ToolCall.create(f"c{i}", "delete", {"path": str(i)}) for i in range(3)]
    decisions = await approver(calls)
    assert decisions == [Decision.approve('{"a": 1}'), Decision.reject(None), Decision.approve()]
    assert quiet == ["stop", "start"]  # once around all the questions
    err = capsys.readouterr().err
    assert err.count("Approval needed: delete(") == 3
    assert "answer y, n or e (got 'x')" in err and "must be a JSON object" in err
