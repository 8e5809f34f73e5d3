"""`agentfsm.Runs`: an app's runs in one process, with `DurableRuns`' verbs, resumed after a restart."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import runs_support
from runs_support import call_for, until

from agentfsm import AgentState, Runs, StopReason, Terminate, ToolCallAgent
from agentfsm.errors import ConfigError, KeyNotFoundError, WrongPhaseError, WrongValueError
from agentfsm.messages import Role, ToolCall
from agentfsm.runs import AgentSpec
from agentfsm.testing import FunctionLLM, ModelRequest, reply

pytestmark = pytest.mark.usefixtures("clean_env")


class World(runs_support.World):
    """What the runs' tools did (shared by every agent the factories build), and their gates."""

    def factories(self) -> dict[str, Any]:
        tools = self.tools()

        def script(request: ModelRequest) -> Any:
            """The task is the tool to call, and its argument: ``note hello``, ``delete a``, ``wait``."""
            if any(m.role is Role.TOOL for m in request.messages):
                return reply(tool_calls=[ToolCall.create("end", "terminate", {"status": "success"})])
            return reply(tool_calls=[call_for(str(request.messages[0].content), "c1")])

        def build(spec: AgentSpec) -> ToolCallAgent:
            return ToolCallAgent(llm=FunctionLLM(script), tools=[*tools, Terminate()], name="worker")

        return {"worker": build}


async def test_a_run_is_submitted_followed_and_ended_with_its_trace_and_files(tmp_path: Path) -> None:
    world = World()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        run_id = await runs.submit("note hello", "worker")
        result = await runs.result(run_id, wait=True, timeout=10)
        assert result is not None and (result.state, result.stop_reason) == (
            AgentState.FINISHED,
            StopReason.TERMINATED,
        )
        status = await runs.status(run_id)
        assert (status.state, status.task, status.result) == ("finished", "note hello", result)
        trace = await runs.trace(run_id)
        assert trace is not None and '"kind": "header"' in trace.splitlines()[0]
        assert [s.run_id for s in await runs.list(state="finished")] == [run_id]
        assert (
            await runs.submit("note hello", "worker", run_id=run_id) == run_id
        )  # the same run, not a second
    assert world.done == ["hello"]
    saved = json.loads((tmp_path / run_id / "run.json").read_text())
    assert saved["result"]["state"] == "FINISHED" and saved["spec"] == {"agent": "worker", "options": {}}


async def test_the_last_decision_resumes_the_run_and_a_stale_or_duplicate_one_is_refused(
    tmp_path: Path,
) -> None:
    world = World()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        run_id = await runs.submit("delete a", "worker")
        status = await until(runs, run_id, "paused")
        assert status.pause == 1 and [c.name for c in status.pending_approval] == ["delete"]
        call = status.pending_approval[0].id
        with pytest.raises(
            KeyNotFoundError, match=f"no pending call with id 'nope' in the pause of run '{run_id}'"
        ):
            await runs.approve(run_id, "nope")
        with pytest.raises(WrongPhaseError, match=f"was for pause 7 of run '{run_id}', which is over"):
            await runs.approve(run_id, call, pause=7)
        await runs.approve(run_id, call, pause=1)  # the last one undecided: the run goes on by itself
        result = await runs.result(run_id, wait=True, timeout=10)
        assert result is not None and result.ok and world.done == ["deleted a"]
        with pytest.raises(WrongPhaseError, match=f"run '{run_id}' is finished, not paused"):
            await runs.approve(run_id, call)  # the same decision again, after the run: refused


async def test_cancel_ends_queued_running_and_paused_runs_for_good(tmp_path: Path) -> None:
    world = World()
    async with Runs(tmp_path, agents=world.factories(), max_active=1) as runs:
        running = await runs.submit("wait", "worker")
        queued = await runs.submit("note never", "worker")
        await until(runs, running, "running", lambda: world.waiting == 1)
        assert (await runs.status(queued)).state == "queued"  # one place, taken
        await runs.cancel(queued)
        await runs.cancel(running)
        paused = await runs.submit("delete a", "worker")
        await until(runs, paused, "paused")
        await runs.cancel(paused)
        for run_id in (queued, running, paused):
            status = await runs.status(run_id)
            assert status.state == "cancelled" and status.result is not None
            assert status.result.stop_reason == StopReason.CANCELLED
    assert world.done == []
    async with Runs(tmp_path, agents=world.factories()) as again:  # cancelled stays cancelled
        assert {s.state for s in await again.list()} == {"cancelled"}
        assert world.done == []


async def test_a_restart_resumes_running_runs_and_keeps_paused_ones_at_their_pause(tmp_path: Path) -> None:
    world = World()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        running = await runs.submit("wait", "worker")
        paused = await runs.submit("delete a", "worker")
        done = await runs.submit("note first", "worker")
        await until(runs, paused, "paused")
        await until(runs, running, "running", lambda: world.waiting == 1)
        assert (await runs.result(done, wait=True, timeout=10)) is not None
    # closed: the running run was stopped as a shutdown stops it, the paused one let go of
    world.gate.set()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        assert (await runs.result(running, wait=True, timeout=10)).ok  # type: ignore[union-attr]
        status = await until(runs, paused, "paused")
        assert status.pause == 1 and [c.name for c in status.pending_approval] == ["delete"]
        await runs.reject(paused, status.pending_approval[0].id, "not today", pause=1)
        result = await runs.result(paused, wait=True, timeout=10)
        assert result is not None and result.ok
        assert (await runs.status(done)).state == "finished"
    assert world.done == ["first"]  # the rejected call never ran, the finished run never ran again


async def test_a_second_manager_on_the_same_directory_takes_no_run_the_first_holds(tmp_path: Path) -> None:
    world = World()
    async with Runs(tmp_path, agents=world.factories()) as first:
        paused = await first.submit("delete a", "worker")
        await until(first, paused, "paused")
        async with Runs(tmp_path, agents=world.factories()) as second:
            assert await second.list() == []
            with pytest.raises(KeyNotFoundError, match=f"no run '{paused}' here"):
                await second.status(paused)


async def test_keep_prunes_the_folders_of_ended_runs(tmp_path: Path) -> None:
    world = World()
    async with Runs(tmp_path, agents=world.factories(), keep=2) as runs:
        ids = []
        for n in range(4):
            ids.append(await runs.submit(f"note {n}", "worker"))
            await runs.result(ids[-1], wait=True, timeout=10)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(ids[-2:])
    async with Runs(tmp_path, agents=world.factories(), keep=timedelta(0)) as runs:
        assert await runs.list() == [] and list(tmp_path.iterdir()) == []


async def test_bad_arguments_are_refused_with_a_line_naming_the_fix(tmp_path: Path) -> None:
    world = World()
    with pytest.raises(WrongValueError, match="max_active must be a positive whole number, got 0"):
        Runs(tmp_path, agents=world.factories(), max_active=0)
    with pytest.raises(ConfigError, match="at least one agent factory"):
        Runs(tmp_path, agents={})
    runs = Runs(tmp_path, agents=world.factories())
    with pytest.raises(WrongPhaseError, match="Runs is not open"):
        await runs.submit("note x", "worker")
    async with runs:
        with pytest.raises(ConfigError, match="no agent factory 'manus' here; Runs has worker"):
            await runs.submit("note x", "manus")
        for bad in ("../x", "..", "", "a/b", "a\\b", "a\0b", ".hidden", "x" * 129):
            with pytest.raises(WrongValueError, match="cannot name a folder"):
                await runs.submit("note x", "worker", run_id=bad)
        assert await runs.submit("note x", "worker", run_id="order-42.v2") == "order-42.v2"


async def test_the_list_is_read_in_pages_in_submission_order_or_the_newest_first(tmp_path: Path) -> None:
    world = World()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        ids = [await runs.submit(f"note n{i}", "worker", run_id=f"run-{i}") for i in range(5)]
        for run_id in ids:
            await runs.result(run_id, wait=True, timeout=10)
        assert [s.run_id for s in await runs.list()] == ids
        assert [s.run_id for s in await runs.list(limit=2)] == ids[:2]
        assert [s.run_id for s in await runs.list(limit=2, offset=4)] == ids[4:]
        assert [s.run_id for s in await runs.list(limit=3, newest_first=True)] == ids[::-1][:3]
        assert await runs.list(offset=9) == []
        assert [s.run_id for s in await runs.list(state="finished", limit=1, offset=1)] == ids[1:2]
        for bad, match in (({"limit": 0}, "limit must be a positive"), ({"offset": -1}, "offset must be")):
            with pytest.raises(WrongValueError, match=match):
                await runs.list(**bad)


async def test_one_run_id_submitted_twice_at_once_is_one_run(tmp_path: Path) -> None:
    """A submission makes its run's folder off the event loop; a second submission of the same id
    meanwhile (a retried request) waits for it and gets the same run, not a second one or an error."""
    world = World()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        ids = await asyncio.gather(*(runs.submit("note x", "worker", run_id="once") for _ in range(5)))
        assert ids == ["once"] * 5
        assert [status.run_id for status in await runs.list()] == ["once"]
        result = await runs.result("once", wait=True, timeout=10)
        assert result is not None and result.ok
    assert world.done == ["x"]


# -- events -----------------------------------------------------------------------------------


async def test_a_run_s_events_are_numbered_kept_and_read_from_any_point_to_the_run_s_end(
    tmp_path: Path,
) -> None:
    world = World()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        run_id = await runs.submit("delete a", "worker")
        status = await until(runs, run_id, "paused")
        early = [event async for event in _upto(runs.events(run_id), "run_paused")]
        assert [e.seq for e in early] == list(range(1, len(early) + 1))
        assert early[0].kind == "transition" and early[0].data["source"] == "IDLE"
        assert {"llm_call_started", "llm_call", "run_paused"} <= {e.kind for e in early}

        late = asyncio.create_task(_all(runs.events(run_id, after=len(early))))  # joins at the pause
        whole = asyncio.create_task(_all(runs.events(run_id)))
        await asyncio.sleep(0.05)
        assert not late.done()  # a paused run has not ended: its readers wait
        await runs.approve(run_id, status.pending_approval[0].id)
        after_pause, everything = await asyncio.wait_for(late, 10), await asyncio.wait_for(whole, 10)
    assert [e.seq for e in everything] == list(range(1, len(everything) + 1))
    assert after_pause == everything[len(early) :] and after_pause[0].kind == "edit"
    assert everything[-1].kind == "transition" and everything[-1].data["dest"] == "FINISHED"
    for event in everything:
        assert json.loads(json.dumps(event.to_json())) == event.to_json()
    async with Runs(tmp_path, agents=world.factories()) as again:  # the history survives a restart
        assert await _all(again.events(run_id, after=3)) == everything[3:]


async def test_a_reader_that_falls_behind_is_dropped_and_the_run_goes_on(tmp_path: Path) -> None:
    world = World()
    async with Runs(tmp_path, agents=world.factories(), event_buffer=3) as runs:
        run_id = await runs.submit("delete a", "worker")
        status = await until(runs, run_id, "paused")
        kept = len([e async for e in _upto(runs.events(run_id), "run_paused")])
        slow = runs.events(run_id, after=kept)
        first = asyncio.create_task(anext(slow))  # registered, then reads nothing more
        await asyncio.sleep(0)
        leaving = runs.events(run_id, after=kept)
        await runs.approve(run_id, status.pending_approval[0].id)
        assert (await asyncio.wait_for(anext(leaving), 10)).seq == kept + 1
        await leaving.aclose()  # a reader that leaves: the run goes on
        result = await runs.result(run_id, wait=True, timeout=10)
        assert result is not None and result.ok
        read = [await first] + [e async for e in slow]
    # what it took before it stopped reading, then a full buffer (3), then the word it was dropped
    assert [e.seq for e in read[:-1]] == [kept + 1, kept + 2, kept + 3, kept + 4]
    assert read[-1].kind == "reader_dropped" and read[-1].data["rejoin_after"] == kept + 4


async def _all(events: Any) -> list[Any]:
    return [event async for event in events]


async def _upto(events: Any, kind: str) -> Any:
    """The events up to the first of `kind` (included)."""
    async for event in events:
        yield event
        if event.kind == kind:
            return


async def test_a_decided_run_waiting_for_a_place_is_cancelled_before_it_goes_on(tmp_path: Path) -> None:
    world = World()
    async with Runs(tmp_path, agents=world.factories(), max_active=1) as runs:
        paused = await runs.submit("delete a", "worker")
        status = await until(runs, paused, "paused")
        running = await runs.submit("wait", "worker")
        await until(runs, running, "running", lambda: world.waiting == 1)
        await runs.approve(paused, status.pending_approval[0].id)  # decided: it waits for the place
        assert (await runs.status(paused)).state == "queued"
        await runs.cancel(paused)
        assert (await runs.status(paused)).state == "cancelled"
        world.gate.set()
        assert (await runs.result(running, wait=True, timeout=10)).ok  # type: ignore[union-attr]
    assert world.done == []  # the approved call never ran: the run was cancelled first


async def test_a_damaged_run_folder_is_left_alone_with_a_warning_and_the_others_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    world = World()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        kept = await runs.submit("note kept", "worker")
        await runs.result(kept, wait=True, timeout=10)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.json").write_text('{"run_id": "broken", "task": ')
    with caplog.at_level("WARNING", logger="agentfsm"):
        async with Runs(tmp_path, agents=world.factories()) as runs:
            assert [s.run_id for s in await runs.list()] == [kept]
    assert any(
        "its run.json is damaged" in r.getMessage() and "left alone" in r.getMessage() for r in caplog.records
    )


async def test_closing_the_manager_ends_its_readers_of_unfinished_runs_who_rejoin_after(
    tmp_path: Path,
) -> None:
    world = World()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        run_id = await runs.submit("delete a", "worker")
        await until(runs, run_id, "paused")
        reader = asyncio.create_task(_all(runs.events(run_id)))
        await asyncio.sleep(0.05)
    seen = await asyncio.wait_for(reader, 5)  # ended by the close, not left waiting
    assert seen[-1].kind == "run_paused"
    async with Runs(tmp_path, agents=world.factories()) as again:
        status = await until(again, run_id, "paused")
        await again.approve(run_id, status.pending_approval[0].id)
        rest = await asyncio.wait_for(_all(again.events(run_id, after=seen[-1].seq)), 10)
    assert rest[0].seq == seen[-1].seq + 1 and rest[-1].data["dest"] == "FINISHED"


async def test_an_event_holding_a_lone_surrogate_is_kept_and_read_back(tmp_path: Path) -> None:
    """A model's text may hold half a character (a provider that cut one in two): the event is
    written escaped, not lost, and reads back after a restart as it was given."""
    from agentfsm.runs.events import Feed

    feed = Feed("r1", tmp_path / "events.jsonl", new=True)
    feed.add("text_delta", {"text": "half \ud800 a character"})
    feed.end()
    again = Feed("r1", tmp_path / "events.jsonl")
    assert [(e.seq, e.kind, e.data) for e in again.history] == [
        (1, "text_delta", {"text": "half \ud800 a character"})
    ]


async def test_a_spec_its_factory_refuses_ends_that_run_in_error_saying_why_and_the_others_go_on(
    tmp_path: Path,
) -> None:
    world = World()
    factories = world.factories()
    build = factories["worker"]

    def picky(spec: AgentSpec) -> ToolCallAgent:
        if spec.options.get("max_steps") == 0:
            raise ConfigError("max_steps must be at least 1, got 0; give a positive max_steps")
        return build(spec)  # type: ignore[no-any-return]

    async with Runs(tmp_path, agents={"worker": picky}) as runs:
        refused = await runs.submit("note x", AgentSpec(agent="worker", options={"max_steps": 0}))
        fine = await runs.submit("note y", "worker")
        result = await runs.result(refused, wait=True, timeout=10)
        assert result is not None and (await runs.status(refused)).state == "error"
        assert result.error == "ConfigError: max_steps must be at least 1, got 0; give a positive max_steps"
        assert (await runs.result(fine, wait=True, timeout=10)).ok  # type: ignore[union-attr]
    assert world.done == ["y"]


# -- the trace of a run taken up again -------------------------------------------------------------


async def _replays_whole(runs: Runs, run_id: str) -> None:
    """The run's trace replays as one run, to the result the run ended with."""
    from agentfsm.agent.replay import replay

    result = await runs.result(run_id)
    assert result is not None
    text = await runs.trace(run_id)
    assert text is not None and text.count('"kind": "header"') == 1
    path = Path(runs.directory, run_id, "trace.jsonl")
    replayed = await replay(path)
    assert replayed.ended_early is None and replayed.result is not None
    again = replayed.result
    assert (again.state, again.stop_reason, again.steps, again.output) == (
        result.state,
        result.stop_reason,
        result.steps,
        result.output,
    )


async def test_a_run_stopped_mid_call_goes_on_after_a_restart_with_its_trace_whole(tmp_path: Path) -> None:
    """Stopped as a shutdown stops it (in its tool call), then taken up by the next `Runs`: its
    checkpoint goes on, and its trace from the same point, so the trace replays as one run."""
    world = World()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        run_id = await runs.submit("wait", "worker")
        await until(runs, run_id, "running", also=lambda: world.waiting == 1)
    world.gate.set()
    async with Runs(tmp_path, agents=world.factories()) as again:
        result = await again.result(run_id, wait=True, timeout=10)
        assert result is not None and result.ok and world.waiting == 1  # not run again: reported interrupted
        await _replays_whole(again, run_id)


async def test_a_run_paused_at_a_restart_is_decided_after_it_and_its_trace_replays_whole(
    tmp_path: Path,
) -> None:
    world = World()
    async with Runs(tmp_path, agents=world.factories()) as runs:
        run_id = await runs.submit("delete a", "worker")
        await until(runs, run_id, "paused")
    async with Runs(tmp_path, agents=world.factories()) as again:
        status = await until(again, run_id, "paused")
        await again.approve(run_id, status.pending_approval[0].id)
        result = await again.result(run_id, wait=True, timeout=10)
        assert result is not None and result.ok and world.done == ["deleted a"]
        await _replays_whole(again, run_id)


async def test_a_trace_is_cut_back_to_its_checkpoint_or_refused_saying_why(tmp_path: Path) -> None:
    from agentfsm.errors import TraceError
    from agentfsm.recording.trace import cut_for_resume

    trace = tmp_path / "t.jsonl"
    records = [
        {"kind": "header", "schema": 3, "run_id": "r1"},
        {"kind": "transition", "dest": "THINKING"},
        {"kind": "llm"},
        {"kind": "transition", "dest": "AWAITING_APPROVAL"},
        {"kind": "result"},
        {"kind": "edit", "edit": "approval"},
        {"kind": "transition", "dest": "ACTING"},
        {"kind": "llm"},
    ]
    text = "".join(json.dumps(r) + "\n" for r in records)
    trace.write_text(text + '{"kind": "tr')  # and a line a kill cut short
    cut_for_resume(trace, "r1", 2, 1)  # the prefix, then the edit past the paused result
    kept = [json.loads(line)["kind"] for line in trace.read_text().splitlines()]
    assert kept == ["header", "transition", "llm", "transition", "edit"]
    trace.write_text(text)
    cut_for_resume(trace, "r1", 3, 1)
    assert trace.read_text() == "".join(json.dumps(r) + "\n" for r in records[:7])
    for run_id, edges, edits, why in (
        ("r2", 1, 0, "not the trace of run 'r2' \\(its header names 'r1'\\)"),
        ("r1", 4, 0, "holds 3 edges of run 'r1', its checkpoint 4"),
        ("r1", 2, 2, "holds 1 of the 2 edits of run 'r1'"),
        ("r1", 0, 0, "does not say how far its run went"),
    ):
        with pytest.raises(TraceError, match=why):
            cut_for_resume(trace, run_id, edges, edits)
    assert trace.read_text() == "".join(json.dumps(r) + "\n" for r in records[:7])  # refused: untouched
