"""The workflow engine under durable runs: DBOS, on PostgreSQL or SQLite. The only module that imports dbos
(and, for the errors its calls raise, SQLAlchemy's exceptions).

Why DBOS: its workflows are plain functions whose steps are recorded in a
database (the system database, which is also its queue), it needs no server
of its own, and it runs on SQLite for one machine. What this module uses of it
is public API only: workflows and steps, queues with their concurrency and rate
limits, messages and events, and the `DBOSClient` operations (enqueue, list,
cancel, resume). Everything is stored as JSON (DBOS's portable serializer),
never pickled.

DBOS creates its tables only when an executor launches, and its client
expects them there. Every process that opens the database here, a worker or
a client, first runs DBOS's own migrations (`migrate`), so a run may be
submitted before any worker started, and a database from an older DBOS is
brought up to this one's schema whoever opens it first.

DBOS keeps one instance per process: `Engine` owns it for a worker's lifetime,
registering the workflow afresh at each launch and dropping the registrations
at shutdown, so a process may run one worker after another.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from dbos import DBOS, DBOSClient, DBOSConfig, DBOSPortableJSONSerializer, StepReservation
from dbos import error as dbos_error
from sqlalchemy import exc as sa_exc

from ..errors import ConfigError, KeyNotFoundError
from ..runs.spec import AgentFactory
from .events import EventTable, EventWriter
from .fence import Fence
from .run import durable_run

__all__ = [
    "CANCELLED_MARK",
    "CONNECT_TIMEOUT_S",
    "PARKED_MARK",
    "WORKFLOW",
    "Engine",
    "EngineClient",
    "Listed",
    "check_url",
    "migrate",
]

WORKFLOW = "agentfsm.run"
"""The workflow's registered name: what a queue entry names (the same in every release)."""
APP_NAME = "agentfsm"
_ACTIVE = ("ENQUEUED", "PENDING", "DELAYED")
PARKED_MARK = "agentfsm_parked"
"""The workflow attribute of a parked run (`agentfsm.durable.run`): ``{"pause": N, "queue": Q}``, the
pause it left its worker at and the queue it goes back to. DBOS sees a parked run as CANCELLED (and on
no queue); the mark says it waits for a decision, which resumes it. None once it goes on."""
CANCELLED_MARK = "agentfsm_cancelled"
"""The workflow attribute `DurableRuns.cancel` sets before cancelling: a parked run so marked is cancelled,
and no decision resumes it."""
CONNECT_TIMEOUT_S = 5
"""Seconds a PostgreSQL server has to answer a connection before the command gives up (a
``connect_timeout=N`` in the URL's query sets another): DBOS's own calls wait with no limit on a
server that accepts and never answers, and retry a refused one for minutes."""


def check_url(url: str) -> str:
    """`url` when it names a database DBOS runs on; `ConfigError` naming the forms it takes."""
    if url.startswith("sqlite:///") and url[len("sqlite:///") :].partition("?")[0] in ("", ":memory:"):
        # Each connection would have a database of its own: what one process enqueued, no worker sees.
        raise ConfigError(f"--db {url!r} names no file: give sqlite:///FILE (a path, e.g. sqlite:///runs.db)")
    if url.startswith(("sqlite:///", "postgresql://", "postgres://", "postgresql+psycopg://")):
        return url
    raise ConfigError(
        f"--db {url!r} is not a database URL: give sqlite:///FILE (one machine) or "
        "postgresql://USER@HOST:PORT/DB (several; tools/postgres-env starts one)"
    )


def migrate(url: str) -> None:
    """Create DBOS's tables in the database at `url` (a PostgreSQL database itself too, when the server
    lacks it), or bring them up to this DBOS's version: what a worker's launch does first, done by
    DBOS's own migrations (`DBOS.migrate`), so the schema is the one a worker makes. Quick when the
    tables are there already. A database that cannot be opened (no server, a folder that is not
    there) is a `ConfigError` of one line, at once: DBOS's client would retry its calls for minutes.
    DBOS's log lines of a failed migration are dropped, the error says it all; a successful one's
    are logged as DBOS logged them."""
    if not url.startswith("sqlite:"):
        _reach(url)
    with _held_logs(logging.getLogger("dbos")) as held:
        try:
            DBOS.migrate(url)
        except sa_exc.DBAPIError as exc:
            held.clear()
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc)
            if url.startswith("sqlite:"):
                fix = "give a file in a folder that exists and that this process may write"
            else:
                fix = "start the server (tools/postgres-env starts one) or fix the URL"
            raise ConfigError(f"cannot open the database --db {url!r} ({reason}): {fix}") from None


def _reach(url: str) -> None:
    """Return once the PostgreSQL server of `url` accepted a login, within its connect timeout
    (`CONNECT_TIMEOUT_S` unless the URL sets ``connect_timeout``); else `ConfigError` naming the
    database and the cause. A database the server lacks is no error here: DBOS's migration
    creates it."""
    import psycopg

    parsed = urlsplit(url)
    conninfo = urlunsplit(("postgresql", *parsed[1:]))
    options = dict(parse_qsl(parsed.query))
    timeout = options.get("connect_timeout", str(CONNECT_TIMEOUT_S))
    try:
        seconds = int(timeout)
    except ValueError:
        raise ConfigError(f"--db {url!r}: connect_timeout={timeout!r} is not whole seconds") from None
    keywords = {} if "connect_timeout" in options else {"connect_timeout": seconds}
    try:
        psycopg.connect(conninfo, **keywords).close()  # type: ignore[arg-type]
    except psycopg.OperationalError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if re.search(r'database "[^"]*" does not exist', reason):
            return
        if "timeout expired" in reason:
            reason = f"no answer within {seconds} s"
        raise ConfigError(
            f"cannot open the database --db {url!r} ({reason}): start the server (tools/postgres-env "
            "starts one), fix the URL or its password, or give it longer with ?connect_timeout=SECONDS"
        ) from None
    except psycopg.Error as exc:  # a malformed URL: psycopg names what it could not read
        raise ConfigError(f"--db {url!r} cannot be used ({exc}): fix the URL") from None


@contextmanager
def _held_logs(logger: logging.Logger) -> Iterator[list[logging.LogRecord]]:
    """Hold back what this thread logs to `logger` inside the block; handle it at the block's end,
    unless the block cleared the list. Other threads' records pass as usual."""
    held: list[logging.LogRecord] = []
    thread = threading.get_ident()

    def hold(record: logging.LogRecord) -> bool:
        if record.thread != thread:
            return True
        held.append(record)
        return False

    logger.addFilter(hold)
    try:
        yield held
    finally:
        logger.removeFilter(hold)
        for record in held:
            logger.handle(record)


async def _outside(call: Callable[[], None]) -> None:
    """Run `call` in a thread outside the running workflow's context: DBOS's calls made there are plain
    database writes, not steps of the workflow (a step would be replayed, not made, on the run's next
    execution, and would take a place among the run's own steps)."""
    await asyncio.get_running_loop().run_in_executor(None, call)  # no context copied, unlike to_thread


class _Journal:
    """The running workflow's steps, messages and events, as `agentfsm.durable.run.Journal`.
    With a `fence`, a step starts only while the worker's heartbeat holds (`agentfsm.durable.fence`);
    an execution whose run another worker claimed ends there, as DBOS ends one that lost its run.
    `parked`: the ids of the runs this process parked, whose cancellation DBOS logs are dropped."""

    def __init__(
        self, run_id: str, queue: str, fence: Fence | None = None, parked: set[str] | None = None
    ) -> None:
        self._run_id = run_id
        self._queue = queue
        self._fence = fence
        self._ticket = fence.ticket() if fence is not None else 0.0
        self._parked = parked if parked is not None else set()

    @property
    def run_id(self) -> str:
        return self._run_id

    def reserve(self, name: str) -> _Step:
        # DBOS draws the step's id here, from the workflow's counter, whichever task runs it later.
        return _Step(self, name, DBOS.reserve_step())

    async def admit(self) -> None:
        """Return when the fence lets a step start; raise when this execution lost its run."""
        if self._fence is not None and not await self._fence.admit(self._ticket):
            raise dbos_error.DBOSWorkflowConflictIDError(self._run_id)  # DBOS waits for the owner's outcome

    async def receive(self, topic: str, timeout_s: float) -> Any:
        return await DBOS.recv_async(topic, timeout_s)

    async def publish(self, key: str, value: Any) -> None:
        await DBOS.set_event_async(key, value)

    async def mark_parked(self, pause: int | None) -> None:
        run_id = self._run_id
        mark = None if pause is None else {"pause": pause, "queue": self._queue}
        await _outside(lambda: DBOS.update_workflow_attributes(run_id, {PARKED_MARK: mark}, merge=True))

    async def leave(self) -> NoReturn:
        # DBOS's own way out of an execution: the run is CANCELLED (its slot on the worker free at
        # once), and `resume_workflows` puts it back on its queue, to be replayed from its steps.
        run_id = self._run_id
        self._parked.add(run_id)
        await _outside(lambda: DBOS.cancel_workflow(run_id))
        raise dbos_error.DBOSWorkflowCancelledError(run_id)


class _Step:
    """A step at the id DBOS drew for it (`DBOS.reserve_step`), as `agentfsm.durable.run.Step`."""

    def __init__(self, journal: _Journal, name: str, reservation: StepReservation) -> None:
        self.journal = journal
        self.name = name
        self._reservation = reservation

    async def run(self, body: Callable[[], Awaitable[Any]]) -> Any:
        await self.journal.admit()
        return await self._reservation.run_async({"name": self.name}, body)


class _ParkedLogs(logging.Filter):
    """Drops what DBOS logs when an execution this process parked ends: to DBOS a parked run was
    cancelled while it ran, and it says so in a warning and a traceback, for an end that is planned."""

    def __init__(self, parked: set[str]) -> None:
        super().__init__()
        self.parked = parked

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, dbos_error.DBOSAwaitedWorkflowCancelledError):
            if error.workflow_id in self.parked:
                self.parked.discard(error.workflow_id)  # the last word of that execution
                return False
            return True
        message = record.getMessage()
        return not any(f"Workflow {run_id} was cancelled" in message for run_id in self.parked)


class Engine:
    """The process's DBOS, launched as the worker `worker_id` running `agents` from queues."""

    def __init__(
        self,
        url: str,
        *,
        worker_id: str,
        app_version: str,
        agents: Mapping[str, AgentFactory],
        fence: Fence | None = None,
    ) -> None:
        self.url = check_url(url)
        self.worker_id = worker_id
        self.app_version = app_version
        self.agents = dict(agents)
        self.fence = fence
        self._launched = False
        self._parked = _ParkedLogs(set())
        self._events: EventWriter | None = None
        """Writes the runs' events to the database (`agentfsm.durable.events`), from launch to shutdown."""

    async def launch(
        self,
        queue: str,
        *,
        concurrency: int | None,
        global_concurrency: int | None,
        rate_limit: tuple[int, float] | None,
        polling_s: float,
        park_after_s: float | None = None,
    ) -> None:
        """Start DBOS (recovering this worker id's own unfinished runs) and listen to `queue`; a run
        paused for `park_after_s` parks (`agentfsm.durable.run`), None: it keeps its place."""
        config: DBOSConfig = {
            "name": APP_NAME,
            "system_database_url": self.url,
            "executor_id": self.worker_id,
            "application_version": self.app_version,
            "serializer": DBOSPortableJSONSerializer(),
            "log_level": "WARNING",
            "notification_listener_polling_interval_sec": 0.2,
            # A step is two transactions. SQLAlchemy's pre-ping adds a round trip to each (a `;`
            # before every checkout), though DBOS retries its system-database calls on a lost
            # connection anyway (the pool drops the dead ones; the call waits about a second): a
            # worker goes on after a PostgreSQL restart. LIFO keeps reusing the connections whose
            # statements psycopg has already prepared, instead of cycling through all 20.
            "db_engine_kwargs": {"pool_pre_ping": False, "pool_use_lifo": True},
        }
        agents, fence, parked = self.agents, self.fence, self._parked.parked
        await asyncio.to_thread(migrate, self.url)  # a bad URL in one line, before DBOS is set up
        events = self._events = EventWriter(await asyncio.to_thread(EventTable, self.url))

        @DBOS.workflow(name=WORKFLOW)
        async def run(task: str, spec: dict[str, Any]) -> dict[str, Any]:
            run_id = DBOS.workflow_id
            assert run_id is not None  # inside a workflow
            journal = _Journal(run_id, queue, fence, parked)
            return await durable_run(journal, agents, task, spec, park_after_s=park_after_s, events=events)

        logging.getLogger("dbos").addFilter(self._parked)
        DBOS(config=config)
        try:
            DBOS.listen_queues([queue])  # else it takes runs from every queue the database knows
            await asyncio.to_thread(DBOS.launch)
            limiter = None if rate_limit is None else {"limit": rate_limit[0], "period": rate_limit[1]}
            await DBOS.register_queue_async(
                queue,
                worker_concurrency=concurrency,
                global_concurrency=global_concurrency,
                limiter=limiter,  # type: ignore[arg-type]
                polling_interval_sec=polling_s,
                on_conflict="always_update",
            )
        except BaseException:
            DBOS.destroy(destroy_registry=True)
            logging.getLogger("dbos").removeFilter(self._parked)
            self._close_events()  # nothing to write yet: quick, and DBOS took the loop's thread pool with it
            raise
        self._launched = True

    async def shutdown(self) -> None:
        """Stop DBOS; runs still in progress stay PENDING in the database, to be recovered."""
        if self._launched:
            self._launched = False
            await asyncio.to_thread(DBOS.destroy, destroy_registry=True)
            logging.getLogger("dbos").removeFilter(self._parked)
            # DBOS made its thread pool the loop's default executor, and has shut it down now: the
            # loop gets a pool of its own again, or every later `asyncio.to_thread` in it fails.
            from concurrent.futures import ThreadPoolExecutor

            asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor())
            # After DBOS: a run that still waits for its last events then records no outcome.
            await asyncio.to_thread(self._close_events)

    def _close_events(self) -> None:
        """Write the events handed over so far, then let go of the events table."""
        events, self._events = self._events, None
        if events is not None:
            events.close()
            events.table.close()


@dataclass(frozen=True, slots=True, kw_only=True)
class Listed:
    """A workflow as the database lists it."""

    run_id: str
    status: str
    """DBOS's status: ENQUEUED, PENDING, SUCCESS, ERROR, CANCELLED, MAX_RECOVERY_ATTEMPTS_EXCEEDED, ..."""
    output: Any
    error: str | None
    worker: str | None
    app_version: str | None
    queue: str | None
    task: str | None
    parked: int | None = None
    """A parked run's pause (DBOS lists it CANCELLED); None for every other run, a cancelled one too."""


class EngineClient:
    """The operations on runs that any process may do: enqueue, read, message, cancel, resume."""

    def __init__(self, url: str) -> None:
        self.url = check_url(url)
        self._client: DBOSClient | None = None

    def _dbos(self) -> DBOSClient:
        """DBOS's client, made at the first call, once the database has DBOS's tables (`migrate`): a
        run submitted before any worker opened the database is enqueued, not refused."""
        if self._client is None:
            migrate(self.url)
            self._client = DBOSClient(
                system_database_url=self.url,
                serializer=DBOSPortableJSONSerializer(),
                application_name=APP_NAME,
                lazy=True,
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.destroy()
            self._client = None

    def enqueue(self, queue: str, task: str, spec: dict[str, Any], run_id: str | None) -> str:
        options: Any = {"workflow_name": WORKFLOW, "queue_name": queue}
        if run_id is not None:
            options["workflow_id"] = run_id
        handle: Any = self._dbos().enqueue(options, task, spec)
        return str(handle.get_workflow_id())

    def get(self, run_id: str, *, whole: bool = True) -> Listed:
        """The run as the database lists it; not `whole`: without its input and output (its task,
        its result and trace), for a look at where it is."""
        found = self._dbos().list_workflows(
            workflow_ids=[run_id], name=WORKFLOW, load_input=whole, load_output=whole
        )
        if not found:
            raise KeyNotFoundError(
                f"no run {run_id!r} in {self.url}; `agentfsm submit` prints the ids it makes"
            )
        return _listed(found[0])

    def active(self, queue: str, worker: str) -> list[Listed]:
        """The runs of `queue` that the worker `worker` holds (started or recovering)."""
        found = self._dbos().list_workflows(
            status=["PENDING"], executor_id=worker, queue_name=queue, name=WORKFLOW, load_output=False
        )
        return [_listed(status) for status in found]

    def listed(
        self,
        queue: str | None = None,
        *,
        active_only: bool = False,
        limit: int | None = None,
        offset: int = 0,
        newest_first: bool = False,
    ) -> list[Listed]:
        """The runs (of `queue`; only those not ended with `active_only`) in submission order, or the
        newest first; `limit` and `offset` page them in that order."""
        found = self._dbos().list_workflows(
            queue_name=queue,
            name=WORKFLOW,
            status=list(_ACTIVE) if active_only else None,
            limit=limit,
            offset=offset or None,
            sort_desc=newest_first,
        )
        return [_listed(status) for status in found]

    def ended(self, run_id: str) -> bool:
        """Whether the run has ended: finished, failed or cancelled (a queued, running, paused or
        parked run has not)."""
        listed = self.get(run_id, whole=False)
        return listed.status not in _ACTIVE and listed.parked is None

    def resume(self, run_ids: list[str], queue: str) -> None:
        """Put `run_ids` back on `queue` (ENQUEUED): a worker of their version continues each."""
        if run_ids:
            self._dbos().resume_workflows(run_ids, queue_name=queue)

    def wake(self, run_id: str) -> bool:
        """Put the parked run `run_id` back on its queue, to go on from its steps; whether it was
        parked (a run that is not, cancelled ones included, is left alone)."""
        listed = self.get(run_id)
        if listed.parked is None or listed.status != "CANCELLED" or listed.queue is None:
            return False
        self._dbos().resume_workflows([run_id], queue_name=listed.queue)
        return True

    def event(self, run_id: str, key: str) -> Any:
        return self._dbos().get_event(run_id, key, timeout_seconds=0)

    def send(self, run_id: str, message: dict[str, Any], topic: str, once: str | None = None) -> None:
        """Send `message` to the run on `topic`; with `once`, an idempotency key: a second message with
        the same key is not stored (DBOS keeps the first)."""
        try:
            self._dbos().send(run_id, message, topic, idempotency_key=once)
        except dbos_error.DBOSNonExistentWorkflowError:
            raise KeyNotFoundError(f"no run {run_id!r} in {self.url}") from None

    def cancel(self, run_id: str) -> None:
        """Cancel the run; marked first, so that a parked run (CANCELLED already) stays cancelled
        whatever decision comes later."""
        self.get(run_id)  # an unknown id is an error, not a silent no-op
        self._dbos().update_workflow_attributes(run_id, {CANCELLED_MARK: True}, merge=True)
        self._dbos().cancel_workflow(run_id)


def _listed(status: Any) -> Listed:
    inputs = status.input or {}
    args = inputs.get("args") if isinstance(inputs, dict) else None
    error = status.error
    marks = status.attributes if isinstance(status.attributes, dict) else {}
    mark = marks.get(PARKED_MARK)
    pause = mark.get("pause") if isinstance(mark, dict) and not marks.get(CANCELLED_MARK) else None
    parked = pause if isinstance(pause, int) and not isinstance(pause, bool) else None
    queue = status.queue_name
    if parked is not None and isinstance(mark, dict) and isinstance(mark.get("queue"), str):
        queue = queue or mark["queue"]
    return Listed(
        run_id=status.workflow_id,
        status=str(status.status),
        output=status.output,
        error=None if error is None else f"{type(error).__name__}: {error}",
        worker=status.executor_id,
        app_version=status.app_version,
        queue=queue,
        task=args[0] if args else None,
        parked=parked,
    )
