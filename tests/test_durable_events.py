"""`DurableRuns.events`: a durable run's events read from any process, as `Runs.events` gives them in one.

On SQLite and PostgreSQL, with worker processes (durable_worker.py) and the readers in this one: the
recorded events first, then the live ones, to the run's end; readers joined at any time, before, during
a pause and after the end, see the same events; a paused (and a parked) run's readers wait and go on
after the approval; a cancelled run's readers end; the events are those `Runs` gives for the same agent
and task; a worker SIGKILLed mid-run and taken over by another leaves its readers every event once,
numbered without a gap. On a journal kept in
memory: a replay hands over the very segments the first execution did, and adds no entry to the journal
(the step layout is the same); an execution whose journal failed writes nothing more. On the table: a
segment written once, whichever execution writes it again, and two writers at once never share a seq.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import sqlalchemy as sa
from durable_agents import AGENTS, BATCH_TASK, TASK
from postgres_support import either_db, pg_url, postgres_server  # noqa: F401 (fixtures)
from test_durable_crash import start_worker, stop_worker
from test_durable_layout import ListJournal

from agentfsm import Runs
from agentfsm.durable import AgentSpec, DurableRuns
from agentfsm.durable.events import EventTable
from agentfsm.durable.heartbeat import sqlalchemy_url
from agentfsm.durable.run import TRACE_KEY, durable_run
from agentfsm.errors import KeyNotFoundError, WrongValueError
from agentfsm.runs.events import RunEvent

QUEUE = "events"


@pytest.fixture
def worker(either_db: str):  # noqa: F811 (the fixture)
    """A worker process on the database (its URL is what the test gets)."""
    child = start_worker(either_db, "ev", "--queue", QUEUE, "--concurrency", "4")
    try:
        yield either_db
    finally:
        stop_worker(child)


async def _all(events: AsyncIterator[RunEvent], timeout: float = 60) -> list[RunEvent]:
    async def read() -> list[RunEvent]:
        return [event async for event in events]

    return await asyncio.wait_for(read(), timeout)


async def _upto(events: Any, kind: str, timeout: float = 60) -> list[RunEvent]:
    """The events up to the first of `kind` (included) of a reader (an async generator), which then
    leaves."""

    async def read() -> list[RunEvent]:
        found = []
        async with contextlib.aclosing(events) as reading:
            async for event in reading:
                found.append(event)
                if event.kind == kind:
                    break
        return found

    return await asyncio.wait_for(read(), timeout)


async def _until(runs: DurableRuns | Runs, run_id: str, state: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while (status := await runs.status(run_id)).state != state:
        assert time.monotonic() < deadline, f"run {run_id} is {status.state}, not {state}"
        await asyncio.sleep(0.05)
    return status


def _key(event: RunEvent) -> Any:
    """What identifies an event of a run beyond its kind (not its timings, nor the run's id)."""
    data = event.data
    if event.kind == "transition":
        return (data["source"], data["dest"], data["trigger"], data["step"])
    if event.kind == "tool_call_started":
        return data["call"]["id"]
    if event.kind == "tool_call_completed":
        return data["observation"]["call"]["id"]
    if event.kind == "llm_call":
        return [call["id"] for call in (data["reply"] or {}).get("tool_calls") or ()]
    if event.kind == "edit":
        return data["kind"]
    return data.get("step")


def logical(events: list[RunEvent]) -> list[tuple[int, str, Any]]:
    return [(event.seq, event.kind, _key(event)) for event in events]


def numbered(events: list[RunEvent]) -> bool:
    return [event.seq for event in events] == list(range(1, len(events) + 1))


# -- readers --------------------------------------------------------------------------------------


async def test_a_paused_run_s_readers_get_the_recorded_events_then_the_live_ones_to_its_end(worker, tmp_path):
    runs = DurableRuns(worker)
    try:
        spec = AgentSpec(agent="approval", options={"effects": str(tmp_path / "effects.txt")})
        run_id = await runs.submit("record 7", spec, queue=QUEUE)
        first = asyncio.create_task(_all(runs.events(run_id)))  # joined before the run began, perhaps
        await _until(runs, run_id, "paused")
        early = await _upto(runs.events(run_id), "run_paused")  # the recorded ones, to the pause
        assert numbered(early) and early[0].kind == "transition" and early[0].data["source"] == "IDLE"
        assert {"llm_call_started", "llm_call", "run_paused"} <= {e.kind for e in early}
        joined = asyncio.create_task(_all(runs.events(run_id, after=len(early))))  # joined at the pause
        await asyncio.sleep(1.0)
        assert not first.done() and not joined.done()  # a paused run has not ended: its readers wait
        await runs.approve(run_id, "c1")
        whole, after_pause = await first, await joined
        late = await _all(runs.events(run_id))  # after the end: the whole history, and the end
        from_three = await _all(runs.events(run_id, after=3))
        status = await runs.status(run_id)
    finally:
        runs.close()
    assert status.state == "finished"
    assert numbered(whole) and whole[: len(early)] == early
    assert after_pause == whole[len(early) :] and after_pause[0].kind == "edit"
    assert late == whole and from_three == whole[3:]
    assert whole[-1].kind == "transition" and whole[-1].data["dest"] == "FINISHED"
    assert {e.run_id for e in whole} == {run_id}
    for event in whole:
        assert json.loads(json.dumps(event.to_json())) == event.to_json()
    assert (tmp_path / "effects.txt").read_text().split() == ["7"]


async def test_a_parked_run_s_readers_wait_and_go_on_once_its_replay_passed_what_they_read(
    either_db,  # noqa: F811 (the fixture)
    tmp_path,
):
    """A run that parks leaves its worker (DBOS lists it cancelled): its readers wait all the same.
    The approval puts it back on the queue, and its replay emits again what they read: none of it
    reaches them twice."""
    child = start_worker(either_db, "parker", "--queue", QUEUE, "--park-after", "0.3")
    runs = DurableRuns(either_db)
    try:
        spec = AgentSpec(agent="approval", options={"effects": str(tmp_path / "effects.txt")})
        run_id = await runs.submit("record 7", spec, queue=QUEUE)
        reader = asyncio.create_task(_all(runs.events(run_id, poll_s=0.02)))
        deadline = time.monotonic() + 30
        while not ((status := await runs.status(run_id)).state == "paused" and status.parked):
            assert time.monotonic() < deadline, status
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        assert not reader.done()  # parked is paused: not ended
        await runs.approve(run_id, "c1")
        whole = await reader
        late = await _all(runs.events(run_id))
    finally:
        runs.close()
        stop_worker(child)
    assert numbered(whole) and late == whole
    kinds = [e.kind for e in whole]
    assert kinds.count("run_paused") == 1 and kinds.count("edit") == 1 and kinds.count("llm_call") == 2
    assert whole[-1].data["dest"] == "FINISHED"


async def test_a_cancelled_run_s_readers_end_with_the_cancellation(worker, tmp_path):
    runs = DurableRuns(worker)
    try:
        spec = AgentSpec(
            agent="slow", options={"effects": str(tmp_path / "e.txt"), "delay": 0.2, "steps": 50}
        )
        run_id = await runs.submit("count", spec, queue=QUEUE)
        reader = asyncio.create_task(_all(runs.events(run_id, poll_s=0.02), timeout=30))
        await _until(runs, run_id, "running")
        await asyncio.sleep(1.0)
        await runs.cancel(run_id)
        read = await reader
        status = await runs.status(run_id)
    finally:
        runs.close()
    assert status.state == "cancelled"
    assert numbered(read) and "tool_call_completed" in [e.kind for e in read]


async def test_a_durable_run_gives_the_events_runs_gives_for_the_same_agent_and_task(worker, tmp_path):
    durable = DurableRuns(worker)
    try:
        recorded = await durable.submit(
            TASK, AgentSpec(agent="record", options={"effects": str(tmp_path / "d1.txt")}), queue=QUEUE
        )
        durable_recorded = await _all(durable.events(recorded))
        approved = await durable.submit(
            "record 7",
            AgentSpec(agent="approval", options={"effects": str(tmp_path / "d2.txt")}),
            queue=QUEUE,
        )
        await _until(durable, approved, "paused")
        await durable.approve(approved, "c1")
        durable_approved = await _all(durable.events(approved))
    finally:
        durable.close()
    async with Runs(tmp_path / "runs", agents=AGENTS) as runs:
        recorded = await runs.submit(
            TASK, AgentSpec(agent="record", options={"effects": str(tmp_path / "r1.txt")})
        )
        runs_recorded = await _all(runs.events(recorded))
        approved = await runs.submit(
            "record 7", AgentSpec(agent="approval", options={"effects": str(tmp_path / "r2.txt")})
        )
        await _until(runs, approved, "paused")
        await runs.approve(approved, "c1")
        runs_approved = await _all(runs.events(approved))
    assert len(durable_recorded) == 24 and numbered(durable_recorded)
    assert logical(durable_recorded) == logical(runs_recorded)
    assert logical(durable_approved) == logical(runs_approved)
    assert "run_paused" in [e.kind for e in durable_approved]
    for durable_event, runs_event in zip(durable_recorded, runs_recorded, strict=True):
        if durable_event.kind == "tool_call_completed":  # the same encoding: the same data
            assert durable_event.data["observation"]["content"] == runs_event.data["observation"]["content"]
        assert durable_event.data.keys() == runs_event.data.keys()


async def test_a_bad_after_and_an_unknown_run_are_refused_as_runs_and_status_refuse_them(worker):
    runs = DurableRuns(worker)
    try:
        for after in (-1, True, "3", 1.5):
            with pytest.raises(
                WrongValueError, match=f"after must be an event's seq \\(>= 0\\), got {after!r}"
            ):
                runs.events("any", after=after)  # type: ignore[arg-type]
        with pytest.raises(KeyNotFoundError) as from_status:
            await runs.status("nope")
        with pytest.raises(KeyNotFoundError) as from_events:
            await _all(runs.events("nope"))
        assert str(from_events.value) == str(from_status.value)
    finally:
        runs.close()


async def test_a_run_recorded_before_events_were_kept_reads_none_and_ends(worker, tmp_path):
    """A database from a release without the events table: the run reads as before, with no events."""
    runs = DurableRuns(worker)
    try:
        spec = AgentSpec(agent="record", options={"effects": str(tmp_path / "effects.txt")})
        run_id = await runs.submit(TASK, spec, queue=QUEUE)
        result = await runs.result(run_id, wait=True, timeout=30)
        engine = sa.create_engine(sqlalchemy_url(worker))
        with engine.begin() as db:
            db.execute(sa.text("DROP TABLE agentfsm_events"))
        engine.dispose()
        runs.close()
        runs = DurableRuns(worker)
        assert await _all(runs.events(run_id)) == []
        assert (await runs.status(run_id)).result == result and await runs.trace(run_id)
    finally:
        runs.close()


# -- a worker killed mid-run ------------------------------------------------------------------------

INTERRUPTED = {"none": set(), "step:4": set(), "before:3": {"c3"}, "after:2": {"c2"}}
"""Each kill plan of the slow agent (durable_worker.py, durable_agents.py), and the calls its replay
reports interrupted: none after the fourth step (call 2's; the model's call comes next), call 3 killed
before its effect, call 2 after it."""


async def test_a_worker_killed_mid_run_and_taken_over_leaves_its_readers_every_event_once(
    either_db,  # noqa: F811 (the fixture)
    tmp_path,
):
    """Each run of the slow agent dies on its worker once (SIGKILL): between two steps, or inside a
    call before or after its effect (`INTERRUPTED`). Another worker takes it over (a heartbeat bound
    of 1 s) and replays it; a reader that read along all the while, and one after the end, get the
    events of the uninterrupted run: the same kinds in the same order, numbered 1, 2, 3 ... once each."""
    options = {"steps": 5, "delay": 0.15}
    flags = ("--queue", QUEUE, "--concurrency", "1", "--heartbeat", "0.2", "--dead-after", "1")
    workers = {name: start_worker(either_db, name, *flags) for name in ("k1", "k2")}
    fresh = iter(f"k{n}" for n in range(3, 20))
    runs = DurableRuns(either_db)
    seen: dict[str, tuple[list[RunEvent], list[RunEvent], int, str | None]] = {}
    try:
        for plan in INTERRUPTED:
            effects = tmp_path / f"effects-{plan.replace(':', '-')}.txt"
            spec = AgentSpec(agent="slow", options={**options, "effects": str(effects), "kill": plan})
            run_id = await runs.submit("count", spec, queue=QUEUE)
            live: list[RunEvent] = []

            async def read_along(run_id: str = run_id, live: list[RunEvent] = live) -> None:
                async for event in runs.events(run_id, poll_s=0.02):
                    live.append(event)

            reading = asyncio.create_task(read_along())
            killed, read_before_kill = None, 0
            deadline = time.monotonic() + 60
            while not (await runs.status(run_id)).ended:
                assert time.monotonic() < deadline, (plan, (await runs.status(run_id)).state)
                for name, child in list(workers.items()):
                    if child.poll() is not None:  # killed as planned: another worker takes its runs over
                        assert child.returncode == -9, child.stderr.read() if child.stderr else ""
                        killed, read_before_kill = name, len(live)
                        del workers[name]
                        new = next(fresh)
                        workers[new] = await asyncio.to_thread(start_worker, either_db, new, *flags)
                await asyncio.sleep(0.02)
            await asyncio.wait_for(reading, 30)
            late = await _all(runs.events(run_id))
            status = await runs.status(run_id)
            assert status.result is not None and (str(status.result.stop_reason), status.result.steps) == (
                "max_steps",
                5,
            ), plan
            if plan != "none":
                assert killed is not None and status.worker != killed, (plan, killed, status.worker)
                assert read_before_kill > 0, plan  # the dead worker had written events a reader had read
            seen[plan] = (live, late, read_before_kill, killed)
    finally:
        for child in workers.values():
            stop_worker(child)
        runs.close()
    reference = logical(seen["none"][1])
    assert numbered(seen["none"][1]) and len(reference) > 20
    for plan, (live, late, _, _) in seen.items():
        assert live == late, plan  # the reader along the way read what the late one did, once each
        assert numbered(late), (plan, [e.seq for e in late])
        assert logical(late) == reference, plan  # nothing doubled, nothing lost, in the same order
        interrupted = {
            e.data["observation"]["call"]["id"]
            for e in late
            if e.kind == "tool_call_completed" and "interrupted" in e.data["observation"]["content"]
        }
        assert interrupted == INTERRUPTED[plan], plan


# -- on a journal in memory: segments and places ------------------------------------------------------


class ListSink:
    """Keeps the segments a run hands over: (number, kinds, urgent), in order."""

    def __init__(self) -> None:
        self.segments: list[tuple[int, list[str], bool]] = []

    def write(
        self, run_id: str, number: int, events: list[tuple[str, dict[str, Any]]], *, urgent: bool = False
    ) -> Any:
        self.segments.append((number, [kind for kind, _ in events], urgent))
        if not urgent:
            return None
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def written(self) -> dict[int, list[str]]:
        return {number: kinds for number, kinds, _ in self.segments if kinds}


APPROVE = [{"kind": "approve", "call_id": "c1", "pause": 1}]
CASES: list[tuple[str, str, list[dict[str, Any]]]] = [
    ("record", TASK, []),
    ("approval", "record 7", APPROVE),
    ("batch", BATCH_TASK, []),
]


@pytest.mark.parametrize(("agent", "task", "decisions"), CASES, ids=[case[0] for case in CASES])
async def test_a_replay_hands_over_the_segments_of_the_first_execution_and_no_journal_entry(
    agent, task, decisions, tmp_path
):
    def spec(name: str) -> dict[str, Any]:
        return {"agent": agent, "options": {"effects": str(tmp_path / f"{name}.txt")}}

    bare = ListJournal(decisions=list(decisions))
    await durable_run(bare, AGENTS, task, spec("bare"))
    first, sink = ListJournal(decisions=list(decisions)), ListSink()
    result = await durable_run(first, AGENTS, task, spec("first"), events=sink)
    assert result["stop_reason"] == "terminated"
    assert [(kind, name) for kind, name, _ in first.entries] == [(k, n) for k, n, _ in bare.entries]
    kinds = [kind for _, kinds, _ in sink.segments for kind in kinds]
    assert kinds[0] == "transition" and kinds.count("tool_call_started") == kinds.count("tool_call_completed")
    numbers = [number for number, _, _ in sink.segments]
    assert numbers == sorted(set(numbers)) and sink.segments[-1][2]  # in order, the last one awaited
    assert [urgent for _, kinds, urgent in sink.segments if "run_paused" in kinds] in ([], [True])

    again, replayed = ListJournal(recorded=first.places), ListSink()
    replay = await durable_run(again, AGENTS, task, spec("again"), events=replayed)
    assert {**replay, TRACE_KEY: None} == {**result, TRACE_KEY: None}  # (a trace has its timings)
    # The same segments under the same numbers; a batch's calls complete in another order, in one segment.
    sort = sorted if agent == "batch" else list
    assert {n: sort(kinds) for n, kinds in replayed.written().items()} == {
        n: sort(kinds) for n, kinds in sink.written().items()
    }
    assert not (tmp_path / "again.txt").exists()  # every call read back


@pytest.mark.parametrize(
    ("agent", "task"), [("record", TASK), ("batch", BATCH_TASK)], ids=["record", "batch"]
)
async def test_a_replay_from_any_crash_hands_over_the_segments_of_the_first_execution(agent, task, tmp_path):
    """Killed after each of its journal's entries, a run's replay hands over the segments the first
    execution did, under the same numbers: those it had handed over before the crash (which the
    table keeps) and those it would have handed over after (a call the crash landed in is reported
    interrupted: another observation, the same events; a batch's calls complete in another order)."""
    spec = {"agent": agent, "options": {"effects": str(tmp_path / "effects.txt")}}
    first, sink = ListJournal(), ListSink()
    await durable_run(first, AGENTS, task, spec, events=sink)
    assert len(sink.written()) >= 4
    sort = sorted if agent == "batch" else list
    expected = {n: sort(kinds) for n, kinds in sink.written().items()}
    for crash in range(1, len(first.places)):
        replayed = ListSink()
        await durable_run(ListJournal(recorded=first.places[:crash]), AGENTS, task, spec, events=replayed)
        assert {n: sort(kinds) for n, kinds in replayed.written().items()} == expected, crash


async def test_a_run_recorded_in_another_layout_is_refused_as_before_with_its_events_kept(tmp_path):
    """The events add nothing to the journal: a run of layout 1 ends at its first model record, as
    without them, and its readers get the events of that end."""
    spec = {"agent": "record", "options": {"effects": str(tmp_path / "effects.txt")}}
    first = ListJournal()
    await durable_run(first, AGENTS, TASK, spec)
    reply = {key: value for key, value in first.entries[0][2].items() if key != "layout"}
    recorded: list[Any] = [("step", "model", reply), ("step", "tool_started", {"call": "c1"})]
    bare, journal, sink = ListJournal(recorded=recorded), ListJournal(recorded=recorded), ListSink()
    without = await durable_run(bare, AGENTS, TASK, spec)
    result = await durable_run(journal, AGENTS, TASK, spec, events=sink)
    assert result == without and result["stop_reason"] == "error"
    assert "was recorded in step layout 1" in result["error"]
    assert journal.entries == bare.entries and [name for _, name, _ in journal.entries] == ["model"]
    kinds = [kind for _, kinds, _ in sink.segments for kind in kinds]
    assert kinds[-1] == "transition" and sink.segments[-1][2]  # its end into ERROR, written at its end


class Lost(BaseException):
    """As the engine's "no longer owned by this execution": it goes through every `except Exception`."""


@pytest.mark.parametrize("failure", [Lost(), RuntimeError("the database went away")], ids=["lost", "error"])
async def test_an_execution_whose_journal_failed_hands_over_no_more_segments(failure, tmp_path):
    """Its agent goes on from an outcome nobody recorded (to its end in ERROR, after an `Exception`):
    a replay goes otherwise, so nothing of that is handed over, not even the last segment."""
    spec = {"agent": "record", "options": {"effects": str(tmp_path / "effects.txt")}}

    class Failing(ListJournal):
        def reserve(self, name: str) -> Any:
            step = super().reserve(name)
            if len(self.places) == 3:  # the third step (call c2's)

                async def fail(body: Callable[[], Any]) -> Any:
                    raise failure

                step.run = fail
            return step

    sink = ListSink()
    if isinstance(failure, Exception):
        result = await durable_run(Failing(), AGENTS, TASK, spec, events=sink)
        assert (result["state"], result["error"]) == ("ERROR", "RuntimeError: the database went away")
    else:
        with pytest.raises(Lost):
            await durable_run(Failing(), AGENTS, TASK, spec, events=sink)
    assert [number for number, _, _ in sink.segments] == [1, 2, 3]  # up to the failed step's place
    assert sink.segments[-1][1][-1] == "tool_call_started"  # c2's start; nothing after it
    assert all(not urgent for _, _, urgent in sink.segments)  # and no last segment


# -- the table ---------------------------------------------------------------------------------------


def _events(kind: str, n: int) -> list[tuple[str, dict[str, Any]]]:
    return [(kind, {"n": i}) for i in range(n)]


async def test_a_segment_is_written_once_whichever_execution_writes_it_and_seqs_never_overlap(
    either_db,  # noqa: F811 (the fixture)
):
    from agentfsm.durable.engine import migrate

    await asyncio.to_thread(migrate, either_db)
    table = EventTable(either_db)
    try:
        table.append(
            [("r", 1, _events("first", 2)), ("r", 2, _events("first", 1)), ("r", 4, _events("first", 3))]
        )
        # A replay (another version of 2 and 4, and 3 it had empty the first time): only 5 is new.
        table.append(
            [("r", 2, _events("again", 5)), ("r", 4, _events("again", 1)), ("r", 5, _events("again", 2))]
        )
        table.append([("r", 3, _events("late", 4))])  # below what is covered: written before, or empty
        read = table.read("r", 0)
        assert [(e.seq, e.kind) for e in read] == [(n, "first") for n in range(1, 7)] + [
            (7, "again"),
            (8, "again"),
        ]
        assert table.read("r", 5) == read[5:] and table.read("r", 8) == [] and table.read("other", 0) == []
        assert table.read("r", 0)[0] == RunEvent("r", 1, "first", {"n": 0})
        half = "half \ud800 a character"  # a provider's cut character: written escaped, read back as given
        table.append([("s", 1, [("text_delta", {"text": half})])])
        assert table.read("s", 0)[0].data == {"text": half}

        # Two executions writing one run's segments at once (a worker taken for dead, and the new owner):
        # each segment number once, and no seq twice.
        def execution(tag: str) -> None:
            writer = EventTable(either_db)
            try:
                for number in range(1, 41):
                    writer.append([("w", number, _events(tag, 1 + number % 3))])
            finally:
                writer.close()

        threads = [threading.Thread(target=execution, args=(tag,)) for tag in ("a", "b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        written = table.read("w", 0)
        assert [e.seq for e in written] == list(range(1, len(written) + 1))
        assert len(written) == sum(1 + number % 3 for number in range(1, 41))
    finally:
        table.close()


async def test_a_pause_s_events_reach_readers_at_once_and_the_others_within_the_linger(tmp_path):
    """The writer's batching, on its own: a lingering segment is written after `linger_s`, one handed
    over urgent at once with every segment before it; a closed writer fails what comes after."""
    from agentfsm.durable.events import EventWriter
    from agentfsm.errors import RecordingError

    db = f"sqlite:///{tmp_path / 'events.db'}"
    writer = EventWriter(EventTable(db), linger_s=2.0)
    try:
        writer.write("r", 1, _events("lingering", 2))
        await asyncio.sleep(0.1)
        assert writer.table.read("r", 0) == []  # still waiting for company
        done = writer.write("r", 2, _events("paused", 1), urgent=True)
        assert done is not None
        await asyncio.wait_for(done, 5)
        assert [e.kind for e in writer.table.read("r", 0)] == ["lingering", "lingering", "paused"]
        writer.write("r", 3, _events("later", 1))
        started = time.monotonic()
        while not writer.table.read("r", 3):
            assert time.monotonic() - started < 5
            await asyncio.sleep(0.02)
        assert time.monotonic() - started >= 1.5
    finally:
        writer.close()
        writer.table.close()
    refused = writer.write("r", 4, _events("after", 1), urgent=True)
    assert refused is not None
    with pytest.raises(RecordingError, match="came after the worker stopped writing events"):
        await refused
