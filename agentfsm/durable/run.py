"""One durable run: an agent's run whose model calls and tool calls are steps of a workflow.

The workflow engine (`agentfsm.durable.engine`, on DBOS) records the output of
every step. A run that is recovered (its worker died, or was restarted) runs
its workflow again from the start: each step already recorded returns its
recorded output instead of running, so the agent goes through the very same
replies, observations and transitions, and its result and trace are those of a
run that was never interrupted. Steps not yet recorded then run for real.

What is a step, and why (step layout 6, `LAYOUT`):

- each model call (``model``): its reply, or the error it raised, as data, with
  the layout that recorded it. An error comes back as the same `LLMError`
  whether it was just raised or read back, so a replayed run fails the same way;
- each tool call (``tool``): its observation;
- a call's *start*: a record, durable before the call runs, that it is about to
  run. A recovered run that finds a call started but not completed does not run
  it again (the crash landed inside the call: its effect may or may not have
  happened); the model gets the interrupted observation instead, as a resumed
  checkpoint gives it. A tool marked `idempotent` runs again. So tools run at
  most once, and exactly once unless the crash lands inside the call;
- each decision on a paused run (``recv``: an approval, an answer), and the
  pause itself (an event other processes read, republished after each decision
  while others are left); at the first pause, the worker's `park_after_s`
  (``park_after``), so that every replay waits and parks as that worker did;
  and each time the run parks (``park``). A worker has no person at hand, so `ask_human`
  without a callback is a question the run pauses for (`AskHumanInput`),
  answered from any process like a tool's.

A decision belongs to one pause. The run numbers its pauses (1, 2, ...: the
same numbers on a replay), each pause's event carries its number, and a
decision names the pause it was given for (`DurableRuns` reads it from the
event). The run applies only the decisions of the pause it is at: one for an
earlier pause, a second decision of a call decided already, or one naming no
pause is logged and dropped. Call ids cannot bind a decision: models reuse ids
such as ``call_1`` from one reply to the next, so a spare approval of the
first pause would otherwise approve the next pause's call of the same id.

A paused run parks: when no decision came for `park_after_s`, it leaves its
worker (DBOS's cancellation, so its place on the worker is free for other runs)
with a mark that says which pause it waits at. A decision sent to a parked run
puts it back on its queue (`DurableRuns`), and a worker replays it from its
steps up to the pause, where the decision waits for it. Parking is a ``park``
step, then the mark, then one last look for a decision (one sent while the
mark was being made), and only then the leave; a replay reads the step back
and waits instead of leaving again. An agent's live resources (its MCP
sessions, its sandbox) are built again by the replay, as after a recovery.

A step's place. The engine matches a recorded step to the step a replay asks
for by its place in the run (and its name), so two steps of one name that
swapped places would swap outputs without a word. A place is drawn when a call
*starts* (`ToolCallStarted`, which the agent emits for each call before the
call's first await, so in call order even when a reply's calls run
concurrently), not when its step runs: the places of a reply's calls follow
the order of the calls, whatever order they finish in. A call's start draws
its ``tool`` step's place, and its start record's when it needs one.

Where a call's start is recorded (the recovery rule). A step costs two database
transactions and a commit, so the start is carried by an entry the journal
recorded before the call, when nothing but the agent's own bookkeeping comes
between that record and the call, as between a separate start record and the
call:

- calls run one after another: the entry just before the call's ``tool`` step,
  when that entry is a ``model`` step (its reply's) or a ``tool`` step (the
  previous call of the reply);
- calls run concurrently (`parallel_tool_calls`): every call of the batch (the
  calls that start together) is carried by the entry just before the batch,
  when that is a ``model`` step; the batch's ``tool`` steps carry nothing, as
  they complete in any order.

A call (or batch) that follows any other entry (a pause, a decision, its own
earlier round of questions) gets a ``tool_started`` step first: one per call
run one after another, one for the whole batch (its calls wait for it). One
record for the batch, rather than one per call: a batch of three took 24-28 ms
on PostgreSQL that way, against 35-37 ms with a record before each call (the
calls' records made concurrently) and 43-44 ms with the three records made in
turn before any call (docs/benchmarks-log.md). Every entry goes through the journal
(`_Entries` sees them all), so "just before" is exact. When the call's ``tool``
step is not recorded, the call is taken as started, and so reported interrupted,
exactly when its start record was read back rather than made by this process:
a start made here means no earlier process got past it, since a call begins
only after its start is committed. A crash right after a ``model`` or ``tool``
step therefore lands inside the next call, if the reply has one, and a crash
right after a batch's ``model`` step, or during the batch, inside every call of
the batch whose ``tool`` step is not recorded.

A step may run twice (at least once: a crash after it ran and before its
output was recorded); that is harmless for a start record: the process that
records it is the one that runs the call.

The run's events (what `DurableRuns.events` reads) are no entries of the journal, and
leave the layout as it is. The agent's events are kept in segments: the events since the
place drawn last (a step, the start of a call or of a batch of concurrent calls, a message
received, an event published), handed to the worker's `EventSink` (`agentfsm.durable.events`)
under the number of the place that ends them, without waiting, and the events after the last
place, at the run's end, which waits until all are written. A replay draws the same places
around the same events, so a segment of a number written before is the same segment (but for
what no step records: a streamed reply's pieces, a model call's retries, the order concurrent
calls completed in), and is not written again. A batch's later calls draw no segment's end:
they start while its earlier calls complete, in an order of the moment. What an execution
emits after an operation of the journal raised (its run lost to another worker, cancelled,
parked, its database gone) follows from an outcome nobody recorded, and a replay goes
otherwise: that execution writes no more segments.

Layout 1 (earlier releases) gave every call a ``tool_started`` step; layout 2
ran a reply's calls one after another even with `parallel_tool_calls`. The step
names of a batch are layout 2's, but not what they mean: a layout-2 worker would
replay a batch as calls run in turn, running again a call that ran beside the
one a crash landed in, and this one would replay a layout-2 run of such an
agent as a batch, reporting interrupted a call that never began. Layout 3
bound a decision to its call's id only; layout 4 binds it to its pause; layout 5
records the parking setting at the first pause and each park; layout 6 keeps the
run's trace in its output (`TRACE_KEY`) instead of an event of its own: an event
is one more transaction at the run's end, and a notification every worker's
listener handles, which measured about what one more step costs a run
(docs/benchmarks-log.md, "Durable runs across workers (step layout 6)"). A worker
replays only the layout it records: a run recorded in another one ends in ERROR
at its first model step, saying so (`CheckpointError`); workers of the default
application version never take such a run, since each release declares its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NoReturn, Protocol

from ..agent.tool_runner import INTERRUPTED_CALL, ToolRunner
from ..agent.toolcall import ToolCallAgent
from ..errors import (
    AgentfsmError,
    CheckpointError,
    ConfigError,
    KeyNotFoundError,
    LLMError,
    TokenLimitExceeded,
    WrongPhaseError,
)
from ..log import event
from ..messages import Message, ToolCall
from ..model.base import ChatModel, LLMResponse, ToolChoice
from ..questions import Answer
from ..recording.trace import MemoryTrace
from ..run.events import AgentEvent, ToolCallStarted
from ..run.result import AgentState, RunResult, StopReason
from ..run.state import Observation
from ..runs.events import encode
from ..runs.spec import AgentFactory, AgentSpec
from ..toolbox.ask_human import AskHuman, AskHumanInput

__all__ = [
    "DECISION_TOPIC",
    "LAYOUT",
    "PAUSE_EVENT",
    "TRACE_EVENT",
    "TRACE_KEY",
    "WAKE",
    "DurableModel",
    "EventSink",
    "Journal",
    "Step",
    "durable_run",
]

DECISION_TOPIC = "decision"
"""The topic a paused run receives its approvals and answers on."""
PAUSE_EVENT = "pause"
"""The event a paused run publishes (what it waits for); None once it goes on."""
TRACE_KEY = "trace"
"""The key of the run's output holding its trace (JSON Lines, as `agent.run(trace=...)` writes it),
beside the `RunResult`'s own keys: written with the run's end, in its row, with no step or event
of its own."""
TRACE_EVENT = "trace"
"""The event that held the trace of a run recorded in layout 5 or earlier (read for those runs)."""
LAYOUT = 6
"""The step layout a run records and replays (see the module's docstring); in every model record."""
WAIT_S = 60.0
"""How long one wait for a decision lasts before the run waits again (each wait is a step)."""
WAKE = "wake"
"""The kind of message that only ends a wait for a decision (`DurableRuns.cancel` sends it after
cancelling: the run's next step sees the cancellation), and is otherwise ignored."""

JSON = Any


class Step(Protocol):
    """A step whose place in the run is drawn already (`Journal.reserve`); it runs once."""

    async def run(self, body: Callable[[], Awaitable[JSON]]) -> JSON:
        """`body()`'s output, recorded; when this step is already recorded, its recorded output."""
        ...


class Journal(Protocol):
    """What a durable run asks of its workflow engine: steps, messages and events."""

    @property
    def run_id(self) -> str:
        """The workflow's id: the run's id everywhere (results, traces, the command line)."""
        ...

    def reserve(self, name: str) -> Step:
        """The step `name` at the next place of the run, drawn now: its place is the order of
        the reservations, whenever (and in whichever task) it runs."""
        ...

    async def receive(self, topic: str, timeout_s: float) -> JSON:
        """The next message sent to this run on `topic` (None when `timeout_s` passed without one)."""
        ...

    async def publish(self, key: str, value: JSON) -> None:
        """Set the run's event `key` to `value`, for other processes to read."""
        ...

    async def mark_parked(self, pause: int | None) -> None:
        """Mark the run parked at pause number `pause` (None: not parked), outside its steps."""
        ...

    async def leave(self) -> NoReturn:
        """End this execution of the run, leaving the run to be resumed (it is parked)."""
        ...


class EventSink(Protocol):
    """Where a durable run's events go: the worker's writer (`agentfsm.durable.events.EventWriter`)."""

    def write(
        self, run_id: str, number: int, events: list[tuple[str, dict[str, Any]]], *, urgent: bool = False
    ) -> Awaitable[None] | None:
        """Hand over the segment `number` of the run (its events' kinds and data), without waiting;
        `urgent`: written at once, and an awaitable, done once it and the run's segments before it
        are written (or were, by an earlier execution of the run)."""
        ...


class _Events:
    """A run's events, kept in segments (the module's docstring): each place the run draws ends
    one, and hands it to `sink` under the place's number."""

    def __init__(self, run_id: str, sink: EventSink) -> None:
        self.run_id = run_id
        self.sink = sink
        self.places = 0
        self.derailed = False
        """An operation of the journal failed: nothing this execution emits from there is written."""
        self._kept: list[tuple[str, dict[str, Any]]] = []

    def publish(self, record: AgentEvent) -> None:
        """The agent's listener: the event, encoded as `Runs.events` encodes it, joins the segment."""
        if not self.derailed:
            self._kept.append(encode(record))

    def place(self, *, urgent: bool = False) -> None:
        """The run draws a place: the events so far are a segment (none is written when empty);
        `urgent`: the run is about to wait (a pause), its readers should see it now."""
        self.places += 1
        if self._kept and not self.derailed:
            events, self._kept = self._kept, []
            self.sink.write(self.run_id, self.places, events, urgent=urgent)

    def derail(self) -> None:
        """An operation of the journal raised (the run lost to another worker, cancelled, parked,
        its database gone): what the agent does next follows from an outcome nobody recorded,
        and a replay does otherwise, so this execution writes no more segments."""
        self.derailed, self._kept = True, []

    async def written(self) -> None:
        """The run ends: its last segment handed over, and every segment written."""
        if self.derailed:
            return
        self.places += 1
        events, self._kept = self._kept, []
        done = self.sink.write(self.run_id, self.places, events, urgent=True)
        if done is not None:
            await done


class _Watched:
    """A step of the journal whose failure derails the run's events (`_Events.derail`)."""

    def __init__(self, step: Step, events: _Events | None) -> None:
        self.step = step
        self.events = events

    async def run(self, body: Callable[[], Awaitable[JSON]]) -> JSON:
        return await _watched(self.step.run(body), self.events)


async def _watched(operation: Awaitable[JSON], events: _Events | None) -> JSON:
    """`operation` of the journal; its failure derails the run's `events` (`_Events.derail`)."""
    try:
        return await operation
    except BaseException:
        if events is not None:
            events.derail()
        raise


class DurableModel:
    """A chat model whose every call is a ``model`` step of the run's journal.

    Attributes other than the call are the wrapped model's, so a trace header describes
    the model the worker configured.
    """

    def __init__(self, inner: ChatModel, journal: _Entries) -> None:
        self.inner = inner
        self.__wrapped__ = inner
        """The model a trace describes (`describe_model`): the one the worker configured."""
        self.journal = journal
        self.foreign_layout: int | None = None
        """The layout of a model record read back from another layout (the run was refused)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def token_budget(self) -> int | None:
        return self.inner.token_budget

    async def ask_tool(
        self,
        messages: Sequence[Message],
        *,
        system_msgs: Sequence[Message] = (),
        tools: Sequence[dict[str, Any]] = (),
        tool_choice: ToolChoice = "auto",
    ) -> LLMResponse:
        async def call() -> JSON:
            try:
                reply = await self.inner.ask_tool(
                    messages, system_msgs=system_msgs, tools=tools, tool_choice=tool_choice
                )
            except TokenLimitExceeded as exc:
                return {"layout": LAYOUT, "token_limit": str(exc)}
            except Exception as exc:  # recorded as data: a replay raises it as the first run did
                return {"layout": LAYOUT, "error": f"{type(exc).__name__}: {exc}"}
            return {"layout": LAYOUT, "reply": reply.model_dump(mode="json")}

        data = await self.journal.step("model", call)
        if data.get("layout", 1) != LAYOUT:
            self.foreign_layout = data.get("layout", 1)
            raise CheckpointError(
                f"run {self.journal.run_id!r} was recorded in step layout {self.foreign_layout} and "
                f"this worker replays layout {LAYOUT} only: finish it with a worker of the release that "
                "started it, or submit its task again"
            )
        if "reply" in data:
            return LLMResponse.model_validate(data["reply"])
        if "token_limit" in data:
            raise TokenLimitExceeded(data["token_limit"])
        raise LLMError(data["error"])


class _Start:
    """Where the start of a call, or of a batch of calls, is recorded, and whether this process
    makes it: carried by the entry before (`carried`: whether that entry's step ran here), or a
    ``tool_started`` step of its own, drawn now and recorded once, before any call it starts runs."""

    def __init__(self, reserve: Callable[[str], Step], carried: bool | None, call: ToolCall) -> None:
        self.carried = carried
        self.calls = [call.id]
        """The calls it starts (one, or a batch's, in call order)."""
        self._record = reserve("tool_started") if carried is None else None
        self._made: asyncio.Future[bool] | None = None

    async def began(self) -> bool:
        """Whether the calls this start starts begin here (else their start was read back)."""
        if self._record is None:
            return bool(self.carried)
        if self._made is None:
            self._made = asyncio.ensure_future(self._make(self._record))
        return await self._made

    async def _make(self, record: Step) -> bool:
        made = False

        async def started() -> JSON:
            nonlocal made
            made = True
            return {"call": self.calls[0]} if len(self.calls) == 1 else {"calls": self.calls}

        # A task of its own, started after the first step of every call of a batch (they were
        # scheduled before it), so the record names all of them.
        await record.run(started)
        return made


class _Entries:
    """The run's journal, knowing of its last entry whether it can carry the next call's start
    (a ``model`` step, or a call's ``tool`` step run one after another) and, if so, whether it was
    recorded here or read back; and each started call's start and ``tool`` step."""

    def __init__(self, journal: Journal, events: _Events | None = None) -> None:
        self.journal = journal
        self.events = events
        """The run's events, whose segments end where the run draws a place (None: not kept)."""
        self.carried: bool | None = None
        """None: the last entry carries no start; else whether that entry's step ran here."""
        self._batch: _Start | None = None
        """The start of the calls running concurrently since the last entry of another kind."""
        self._calls: dict[str, tuple[_Start, Step, bool]] = {}
        """Each started call's start, its ``tool`` step, and whether that step carries the next."""

    @property
    def run_id(self) -> str:
        return self.journal.run_id

    def reserve(self, name: str) -> Step:
        """The journal's step `name` at the next place; its failure derails the run's events."""
        return _Watched(self.journal.reserve(name), self.events)

    def _place(self, *, urgent: bool = False) -> None:
        """A place is drawn next (a step, a call's start, a message, an event): the events so far
        are a segment, numbered by the place, in every execution alike (`urgent`: at a pause)."""
        if self.events is not None:
            self.events.place(urgent=urgent)

    async def step(self, name: str, body: Callable[[], Awaitable[JSON]]) -> JSON:
        """A ``model`` step (a carrier)."""
        self._place()
        ran = False

        async def counted() -> JSON:
            nonlocal ran
            ran = True
            return await body()

        self.carried, self._batch = None, None
        output = await self.reserve(name).run(counted)
        self.carried = ran
        return output

    def start(self, call: ToolCall, *, concurrent: bool) -> None:
        """`call` starts: draw its steps' places now, in call order (`concurrent`: it runs beside
        the other calls of its reply, and shares their start)."""
        start = self._batch if concurrent else None
        if start is None:
            # A call, or the first of a batch: the batch's calls complete in any order, and its other
            # calls start in between, so they end no segment (its places would hold other events).
            self._place()
            start = _Start(self.reserve, self.carried, call)
        else:
            start.calls.append(call.id)
        self._batch = start if concurrent else None
        self.carried = None
        self._calls[call.id] = (start, self.reserve("tool"), not concurrent)

    async def call(self, call: ToolCall, body: Callable[[bool], Awaitable[JSON]]) -> JSON:
        """`call`'s ``tool`` step, `body(began)` its body: `began` says whether the call begins
        here (its start made by this process) or was started by an earlier one."""
        if call.id not in self._calls:  # a call run without its start event (none listened)
            self.start(call, concurrent=False)
        start, step, carries = self._calls.pop(call.id)
        began = await start.began()
        ran = False

        async def counted() -> JSON:
            nonlocal ran
            ran = True
            return await body(began)

        output = await step.run(counted)
        if carries:
            self.carried = ran
        return output

    async def receive(self, topic: str, timeout_s: float) -> JSON:
        self._place(urgent=True)
        self.carried, self._batch = None, None
        return await _watched(self.journal.receive(topic, timeout_s), self.events)

    async def publish(self, key: str, value: JSON) -> None:
        self._place(urgent=True)
        self.carried, self._batch = None, None
        await _watched(self.journal.publish(key, value), self.events)

    async def record(self, name: str, value: JSON) -> tuple[JSON, bool]:
        """A step `name` of the run's own bookkeeping (it carries no call's start) recording `value`:
        the value recorded, and whether it was recorded here (else read back from an earlier run)."""
        here = False

        async def made() -> JSON:
            nonlocal here
            here = True
            return value

        self._place(urgent=True)
        self.carried, self._batch = None, None
        return await self.reserve(name).run(made), here

    async def mark_parked(self, pause: int | None) -> None:
        await _watched(self.journal.mark_parked(pause), self.events)

    async def leave(self) -> NoReturn:
        if self.events is not None:
            self.events.derail()  # this execution ends here; the one that resumes the run goes on
        await self.journal.leave()


class _DurableCalls(ToolRunner):
    """A durable run's tool-call path, handed to its agent: each call's tool runs in the call's
    ``tool`` step (`_Entries.call`), so a replay reads its observation back instead of running it,
    and a call whose start was recorded by an earlier execution is reported interrupted."""

    def __init__(self, agent: ToolCallAgent, entries: _Entries) -> None:
        super().__init__(agent)
        self.entries = entries

    async def execute(self, call: ToolCall) -> Observation:
        tool, entries, execute = self.agent.tools.get(call.name), self.entries, super().execute

        async def run(began: bool) -> JSON:
            if not began and tool is not None and not tool.idempotent:
                event("durable_call_interrupted", run_id=entries.run_id, call_id=call.id, tool=call.name)
                content = INTERRUPTED_CALL.format(name=call.name)
                return Observation(call=call, content=content, is_error=True).model_dump(mode="json")
            return (await execute(call)).model_dump(mode="json")

        return Observation.model_validate(await entries.call(call, run))


def _bind(agent: ToolCallAgent, entries: _Entries) -> DurableModel:
    """Hand `agent` a model whose calls are ``model`` steps of `entries` and a tool-call path whose
    calls are ``tool`` steps (their places drawn when a call starts: `ToolCallStarted`); its run's
    id is the workflow's (`durable_run` passes it). Every agent class gets its steps the same way,
    through these two seams."""
    model = DurableModel(agent.llm, entries)
    agent.llm = model
    agent.tool_runner = _DurableCalls(agent, entries)

    concurrent = agent.parallel_tool_calls  # read here: a listener holding the agent would make a cycle

    def started(record: AgentEvent) -> None:
        if isinstance(record, ToolCallStarted):
            entries.start(record.call, concurrent=concurrent)

    agent.on_event(started)
    return model


def _refused(run_id: str, error: str) -> RunResult:
    """The result of a run whose agent could not be built: it ended before it started."""
    return RunResult(
        run_id=run_id, state=AgentState.ERROR, stop_reason=StopReason.ERROR, steps=0, error=error
    )


async def durable_run(
    journal: Journal,
    agents: Mapping[str, AgentFactory],
    task: str,
    spec: Mapping[str, Any],
    *,
    park_after_s: float | None = None,
    events: EventSink | None = None,
) -> dict[str, Any]:
    """The workflow's body: build the agent from `spec`, run `task` to its end, pauses included.

    Returns the `RunResult` as JSON, with the run's trace under `TRACE_KEY`. A pause publishes
    what it waits for and waits for decisions sent from any process (`DurableRuns.approve`,
    `DurableRuns.answer`); with `park_after_s`, a pause that got none for that long parks the run.
    With `events`, the agent's events go there, in segments (the module's docstring), all written
    before this returns.
    """
    try:
        declared = AgentSpec.from_json(spec)
        factory = agents.get(declared.agent)
        if factory is None:
            raise ConfigError(
                f"this worker has no agent {declared.agent!r} (it runs {', '.join(sorted(agents))}); "
                "submit to a queue whose workers register it"
            )
        agent = factory(declared)
    except Exception as exc:  # a spec its factory refuses: the run ends before it starts, saying why
        return _refused(journal.run_id, f"{type(exc).__name__}: {exc}").model_dump(mode="json")
    kept = None if events is None else _Events(journal.run_id, events)
    if kept is not None:  # before `_bind`'s listener: a call's start joins the segment its place ends
        agent.on_event(kept.publish)
    entries = _Entries(journal, kept)
    model = _bind(agent, entries)
    _ask_in_the_run(agent)
    trace = MemoryTrace()  # published whole at the end: no file, and no flush of each record on the loop
    try:
        result = await agent.run(task, trace=trace, run_id=journal.run_id)
        pause = 0
        while result.paused:
            pause += 1
            if pause == 1:  # the setting of the worker that paused it first, whoever replays it
                recorded, _ = await entries.record("park_after", {"park_after_s": park_after_s})
                park_after_s = recorded["park_after_s"]
            await entries.publish(PAUSE_EVENT, _pause(pause, agent))
            await _decided(agent, entries, pause, park_after_s)
            await entries.publish(PAUSE_EVENT, None)
            result = await agent.resume(trace=trace)
    finally:
        await agent.aclose()  # the agent is this run's alone: its MCP servers, sandbox, connections
    if kept is not None:
        await kept.written()
    output = result.model_dump(mode="json")
    if model.foreign_layout is None:  # else the run was refused at its first step: its trace says nothing
        output[TRACE_KEY] = trace.text
    return output


def _ask_in_the_run(agent: ToolCallAgent) -> None:
    """Make `agent`'s `ask_human` without a callback a question of the run: it pauses, and the
    answer given from any process is the observation (instead of "no human is available")."""
    for tool in list(agent.tools):
        if isinstance(tool, AskHuman) and not isinstance(tool, AskHumanInput) and tool.ask is None:
            asking = AskHumanInput()
            asking.name, asking.description = tool.name, tool.description
            agent.tools.replace(asking)  # the run starts on a table with AWAITING_INPUT for it


def _pause(pause: int, agent: ToolCallAgent, decided: Sequence[str] = ()) -> dict[str, Any]:
    """The pause event: the pause's number, what it still waits for, and the calls of it decided
    already (so a second decision of one is refused by the process that would send it)."""
    return {
        "pause": pause,
        "reason": str(StopReason.AWAITING_APPROVAL if agent.pending_approval else StopReason.AWAITING_INPUT),
        "calls": [call.model_dump(mode="json") for call in agent.pending_approval],
        "questions": [
            {"call": call.model_dump(mode="json"), "question": question.model_dump(mode="json")}
            for call, question in agent.pending_input
        ],
        "decided": list(decided),
    }


def _waiting(agent: ToolCallAgent) -> set[str]:
    return {call.id for call in agent.pending_approval} | {call.id for call, _ in agent.pending_input}


async def _decided(agent: ToolCallAgent, journal: _Entries, pause: int, park_after_s: float | None) -> None:
    """Wait for the decisions of pause number `pause` until nothing it waits for is left undecided,
    republishing the pause after each one that leaves some. A decision that does not apply (another
    pause's, an unknown call, one decided already) is logged and dropped: a replay drops it too."""
    asked, decided = _waiting(agent), list[str]()
    while agent.pending_approval or agent.pending_input:
        message = await _next_decision(journal, pause, park_after_s)
        if message is None or (isinstance(message, dict) and message.get("kind") == WAKE):
            continue  # a cancelled run's next receive sees its cancellation and ends it
        try:
            if not isinstance(message, dict) or message.get("pause") != pause:
                given = message.get("pause") if isinstance(message, dict) else None
                raise WrongPhaseError(
                    f"a decision for pause {given!r} reached pause {pause}: it answers only its own pause"
                )
            _apply(agent, message)
        except (AgentfsmError, KeyError, TypeError) as exc:
            event(
                "durable_decision_dropped",
                run_id=journal.run_id,
                pause=pause,
                reason=f"{type(exc).__name__}: {exc}",
            )
            continue
        left = _waiting(agent)
        decided = [call_id for call_id in asked if call_id not in left]
        if left:
            await journal.publish(PAUSE_EVENT, _pause(pause, agent, sorted(decided)))


async def _next_decision(journal: _Entries, pause: int, park_after_s: float | None) -> JSON:
    """The next message on the decision topic (None: none came). With `park_after_s`, a wait that got
    none for that long parks the run (the module's docstring): this execution ends there, and the
    one that resumes it, reading the ``park`` step back, goes on waiting."""
    if park_after_s is None:
        return await journal.receive(DECISION_TOPIC, WAIT_S)
    message = await journal.receive(DECISION_TOPIC, park_after_s)
    if message is not None:
        return message
    _, here = await journal.record("park", True)
    if here:
        await journal.mark_parked(pause)
    message = await journal.receive(DECISION_TOPIC, 0)  # one sent before the mark was seen
    if message is None and here:
        event("durable_run_parked", run_id=journal.run_id, pause=pause, after_s=park_after_s)
        await journal.leave()
    await journal.mark_parked(None)
    return message


def _apply(agent: ToolCallAgent, message: Mapping[str, Any]) -> None:
    kind, call_id = message["kind"], message["call_id"]
    if kind == "approve":
        agent.approve(call_id, arguments=message.get("arguments"))
    elif kind == "reject":
        agent.reject(call_id, message.get("reason"))
    elif kind == "answer":
        answer = Answer.model_validate(message["answer"])
        agent.answer(call_id, answer.content, action=answer.action, key=message.get("key"))
    else:
        raise KeyNotFoundError(f"unknown decision kind {kind!r}: approve, reject or answer")
