"""`Worker`: runs durable runs from a queue, beats, and finishes the runs of workers that died.

A worker is a DBOS executor (`agentfsm.durable.engine`) with a name (its worker
id) listening to one queue, at most `concurrency` runs at a time (a run paused
for longer than `park_after_s` leaves its place: `agentfsm.durable.run`). When it
starts, DBOS recovers the unfinished runs of its own id (a restarted worker
with the same id goes on with them at once). Every `heartbeat_s` it counts up
its heartbeat (`agentfsm.durable.heartbeat`) and looks at the others': a worker
of its queue whose count stood still for `dead_after_s` is dead, and the first
worker to claim its row puts the dead worker's runs back on the queue with
DBOS's `resume_workflows`, where any worker of the same application version
takes them and replays them from their last recorded step, and then deletes
the row. So a dead worker's runs go on within about `dead_after_s +
heartbeat_s` plus the queue's polling interval.

A claim stays in the table until its takeover is done, so a takeover is never
lost half way. A claimer whose takeover failed (a database error) finds the row
claimed by itself and does it again at its next round. A claimer that died
leaves the row claimed and standing still (count and claim): after
`dead_after_s` of that, whoever sees it claims it again, even the claimed
worker itself if it is alive, and does the takeover. A dead claimer therefore
costs one more bound: the runs go on within about `2 x (dead_after_s +
heartbeat_s)` plus polling. Every pass puts back only the runs the dead
worker's id still holds (running, not yet back on the queue), so a second
pass resumes nothing twice.

A worker taken for dead while alive (frozen, or its heartbeat failing) fences
itself (`agentfsm.durable.fence`): its runs start no step while its last
successful beat is older than half of `dead_after_s`, and once a beat finds its
row claimed (or gone), the executions it had at its previous beat end at their
next step, leaving the runs to their new owner. It registers again once the
takeover deleted its row.

A run is continued only by a worker of the application version that started
it (DBOS dequeues by version): the replay must find the same steps. A worker
of another version refuses a dead worker's runs, and says which version can
continue them.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Mapping
from types import TracebackType

from ..errors import WrongValueError
from ..log import event
from ..runs.spec import AgentFactory
from .engine import Engine, EngineClient, check_url
from .fence import Fence
from .heartbeat import Beat, Heartbeats
from .run import LAYOUT

__all__ = ["DEFAULT_QUEUE", "PARK_AFTER_S", "Worker", "default_app_version"]

DEFAULT_QUEUE = "agentfsm"
"""The queue workers take runs from and `DurableRuns` submits to, unless told another."""
PARK_AFTER_S = 30.0
"""Seconds a paused run waits on its worker for a decision before it parks, freeing its place."""


def default_app_version() -> str:
    """The application version a worker declares unless told: agentfsm's release and the step layout
    it records. Runs started by one release are continued by workers of that release (the same steps
    replay the same way); the layout is named too, so two builds of one release number that record
    different layouts never take each other's runs."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("agentfsm")
    except PackageNotFoundError:
        release = "unknown"
    return f"agentfsm-{release}-layout{LAYOUT}"


class Worker:
    """Runs the runs of `queue` in the database at `db`, building each agent with `agents[spec.agent]`.

    `concurrency`: runs at a time on this worker (DBOS's ``worker_concurrency``);
    `global_concurrency`: across all workers of the queue; `rate_limit`: ``(n, seconds)``,
    at most n runs started per that many seconds on the queue; `park_after_s`: how long a paused run
    waits here for a decision before it parks, leaving its place to other runs until a decision puts
    it back on the queue (None: it keeps its place while it waits). `worker_id` names it
    (default: host and process id); `app_version` is the version its runs are continued by.
    Use it as ``async with Worker(...):`` around the work, or `await worker.serve()`.
    """

    def __init__(
        self,
        db: str,
        *,
        agents: Mapping[str, AgentFactory],
        queue: str = DEFAULT_QUEUE,
        concurrency: int | None = 4,
        global_concurrency: int | None = None,
        rate_limit: tuple[int, float] | None = None,
        worker_id: str | None = None,
        app_version: str | None = None,
        heartbeat_s: float = 1.0,
        dead_after_s: float = 5.0,
        polling_s: float = 0.2,
        park_after_s: float | None = PARK_AFTER_S,
    ) -> None:
        for name, value in (("concurrency", concurrency), ("global_concurrency", global_concurrency)):
            if value is not None and value < 1:
                raise WrongValueError(f"`{name}` must be at least 1 (or None: no limit), got {value!r}")
        if rate_limit is not None and (rate_limit[0] < 1 or rate_limit[1] <= 0):
            raise WrongValueError(
                f"`rate_limit` is (runs, seconds) with runs >= 1 and seconds > 0, got {rate_limit!r}"
            )
        if not 0 < heartbeat_s < dead_after_s:
            raise WrongValueError(
                f"`heartbeat_s` ({heartbeat_s!r}) must be above 0 and below `dead_after_s` ({dead_after_s!r})"
            )
        if not agents:
            raise WrongValueError("a Worker needs at least one agent factory in `agents`")
        if park_after_s is not None and not park_after_s >= 0:
            raise WrongValueError(
                f"`park_after_s` must be 0 or more seconds (or None: a paused run keeps its place), "
                f"got {park_after_s!r}"
            )
        self.db = check_url(db)
        self.queue = queue
        self.concurrency = concurrency
        self.global_concurrency = global_concurrency
        self.rate_limit = rate_limit
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.app_version = app_version or default_app_version()
        self.heartbeat_s = heartbeat_s
        self.dead_after_s = dead_after_s
        self.polling_s = polling_s
        self.park_after_s = park_after_s
        self.taken_over: list[str] = []
        """Ids of the runs this worker put back on the queue after their worker died."""
        self._fence = Fence(dead_after_s / 2)
        """Stops this worker's runs from taking steps while its beats lapse, and after a takeover."""
        self._engine = Engine(
            db, worker_id=self.worker_id, app_version=self.app_version, agents=agents, fence=self._fence
        )
        self._client = EngineClient(db)
        self._heartbeats: Heartbeats | None = None
        self._watch: threading.Thread | None = None
        self._stopping = threading.Event()
        self._seen: dict[str, tuple[tuple[int, str | None], float]] = {}
        """Each watched row's count and claim, and when (by this worker's clock) it was first seen so."""
        self._owned = False
        """Whether this worker's row was its own (unclaimed) at its last beat: a claim is told once."""
        self._refused: set[str] = set()

    async def __aenter__(self) -> Worker:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Launch: recover this worker id's unfinished runs, beat, and take runs from the queue."""
        await self._engine.launch(  # first: DBOS creates the database when it is missing
            self.queue,
            concurrency=self.concurrency,
            global_concurrency=self.global_concurrency,
            rate_limit=self.rate_limit,
            polling_s=self.polling_s,
            park_after_s=self.park_after_s,
        )
        try:
            self._heartbeats = await asyncio.to_thread(Heartbeats, self.db)
            found = await asyncio.to_thread(
                self._heartbeats.beat, self.worker_id, self.queue, self.app_version
            )
            self._owned = found != "claimed"  # claimed: the takeover of this id's last process goes on
            self._fence.beaten(claimed=False)
        except BaseException:
            await self._engine.shutdown()
            raise
        self._stopping.clear()
        self._watch = threading.Thread(
            target=self._beat_and_watch, name=f"agentfsm-heartbeat-{self.worker_id}"
        )
        self._watch.start()
        event(
            "durable_worker_started",
            worker=self.worker_id,
            queue=self.queue,
            app_version=self.app_version,
            concurrency=self.concurrency,
        )

    async def stop(self) -> None:
        """Stop taking runs. Runs in progress stay in the database, for this worker id's next start
        or, once its heartbeat has stood still long enough, for another worker."""
        if self._watch is not None:
            self._stopping.set()
            await asyncio.to_thread(self._watch.join)
            self._watch = None
        await self._engine.shutdown()
        self._client.close()
        if self._heartbeats is not None:
            self._heartbeats.close()
            self._heartbeats = None
        event("durable_worker_stopped", worker=self.worker_id)

    async def serve(self, stop: asyncio.Event | None = None) -> None:
        """Run until `stop` is set (or forever, until cancelled)."""
        async with self:
            await (stop.wait() if stop is not None else asyncio.Event().wait())

    def _beat_and_watch(self) -> None:
        """The heartbeat's thread. A thread of its own, not a task of the event loop: a tool that
        holds the loop (CPU work, a blocking call) must not stop the beats, or the worker would be
        taken for dead while its runs go on."""
        while not self._stopping.wait(self.heartbeat_s):
            try:
                self._round()
            except Exception as exc:  # a database hiccup: the next beat tries again
                event("durable_heartbeat_failed", worker=self.worker_id, error=f"{type(exc).__name__}: {exc}")

    def _round(self) -> None:
        """One beat, and a look at every row of the queue: the others', and this worker's own once
        claimed (its claimer may die too)."""
        heartbeats = self._heartbeats
        assert heartbeats is not None
        found = heartbeats.beat(self.worker_id, self.queue, self.app_version)
        claimed = self._owned and found != "counted"
        self._owned = found != "claimed"
        self._fence.beaten(claimed=claimed)
        if claimed:
            event(
                "durable_worker_claimed",
                worker=self.worker_id,
                reason="another worker took this one for dead and its runs over: their executions here "
                "end at their next step",
            )
        now = time.monotonic()
        rows = [beat for beat in heartbeats.beats() if beat.queue == self.queue]
        present = {beat.worker_id for beat in rows}
        self._seen = {worker: seen for worker, seen in self._seen.items() if worker in present}
        for beat in rows:
            if beat.claimed_by == self.worker_id:
                self._take_over(beat)  # a claim of this id (this process or its last) left half way: again
                continue
            if beat.worker_id == self.worker_id and beat.claimed_by is None:
                continue
            seen = self._seen.get(beat.worker_id)
            if seen is None or seen[0] != (beat.count, beat.claimed_by):
                self._seen[beat.worker_id] = ((beat.count, beat.claimed_by), now)
            elif now - seen[1] >= self.dead_after_s:
                self._dead(beat)

    def _dead(self, beat: Beat) -> None:
        """`beat`'s worker stopped beating (or its claimer stopped taking it over): claim it and put its
        runs back on the queue, or refuse them when they belong to another application version."""
        assert self._heartbeats is not None
        if beat.app_version != self.app_version:
            if beat.worker_id not in self._refused:
                self._refused.add(beat.worker_id)
                event(
                    "durable_takeover_refused",
                    worker=self.worker_id,
                    dead=beat.worker_id,
                    reason=f"worker {beat.worker_id!r} ran application version {beat.app_version!r} and "
                    f"this one runs {self.app_version!r}: its runs replay only on their own version; "
                    f"start a worker of version {beat.app_version!r} on queue {self.queue!r} to finish them",
                )
            return
        if self._heartbeats.claim(beat, self.worker_id):
            self._take_over(beat)
        # else another worker won it

    def _take_over(self, beat: Beat) -> None:
        """Put the runs `beat`'s worker still holds back on the queue, then delete its row (the claim is
        this worker's). Done again after a failure, it puts back only what is still held there. This
        worker's own row (its claimer died): its executions are disowned first, since all go back."""
        assert self._heartbeats is not None
        if beat.worker_id == self.worker_id:
            self._fence.disown()
        runs = self._client.active(self.queue, beat.worker_id)
        mine = [run.run_id for run in runs if run.app_version in (None, self.app_version)]
        self._client.resume(mine, self.queue)
        self._heartbeats.finish(beat.worker_id, self.worker_id)
        self._seen.pop(beat.worker_id, None)
        self.taken_over.extend(mine)
        event("durable_takeover", worker=self.worker_id, dead=beat.worker_id, runs=mine)
