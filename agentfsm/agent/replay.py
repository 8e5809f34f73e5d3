"""Replay a trace offline: the recorded replies stand in for the model, the recorded results for the tools.

Why replay re-drives the machine instead of reading the `transition` records
back: it proves the trace is complete (the same inputs give the same edges,
guards and result) and it works on a trace cut short by a crash, which has
no `result` record. Nothing is executed and no model is called. Each request
the engine builds is checked against the one recorded, and each replayed
edge against the recorded edge, so a replay that diverges says where.
Edits recorded between two edges are re-applied between the same two edges,
approvals and answers among them: a run paused for approval or for input and resumed
replays as one run.

Only tool-calling agents (`ToolCallAgent` and subclasses such as Manus)
are replayed: the header's configuration rebuilds one, with the recorded
system prompt and tool declarations of each request, on the machine of the
recorded class (`agent_class` in the header): a class that extends its table
(`MachineTable.extend`) is replayed on that table, its own phases' actions run
on the replaying agent as they ran on the recorded one. The class is found
among the modules the process has imported (agentfsm's own are imported), or
given (`replay(trace, agent_class=...)`, `agentfsm replay --agent-class`):
replaying a trace never imports a module the trace names.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from ..errors import ConfigError, ReplayError, TokenLimitExceeded, TraceError, WrongPhaseError
from ..fsm.machine import MachineTable
from ..memory import Memory
from ..messages import Message, ToolCall
from ..model.base import LLMResponse, ToolChoice, Usage
from ..questions import Answer, InputRequired
from ..recording.files import RecordPath
from ..recording.trace import read_trace, transition_record
from ..run.events import AgentEvent, EventListener, Transition
from ..run.result import RunResult
from ..run.state import Decision, Observation
from ..toolbox.tool import ToolCollection
from .approval import decide
from .awaiting_input import STATE as AWAITING_INPUT
from .awaiting_input import answer, with_input
from .page_context import sent_page_context, with_page
from .tool_runner import Calling, ToolRunner
from .toolcall import ToolCallAgent, ToolCallOptions

__all__ = [
    "RecordedEdges",
    "Replay",
    "ReplayAgent",
    "ReplayError",
    "ReplayLLM",
    "ReplayScript",
    "ReplayStop",
    "Replayed",
    "Replayer",
    "TraceReplayer",
    "apply_edit",
    "compare_result",
    "compare_transition",
    "replay",
]

_COMPARED = ("source", "dest", "trigger", "step", "guards")


@dataclass(slots=True)
class Replay:
    """What a replay reproduced."""

    header: dict[str, Any]
    transitions: list[Transition]
    result: RunResult | None
    """The recomputed RunResult; None when the trace ended before the run did."""
    ended_early: str | None = None
    """Why the replay stopped before the run's end (a trace cut short), or None."""


class ReplayStop(BaseException):
    """Leaves the run from inside a phase. A BaseException so the engine does not turn it into a
    `fail` edge: the trace ending is not something that happened in the recorded run. (The
    engine ends the replayed run `cancelled` on its way out, as for any exit from a phase that
    is not the phase's failure; that edge is not compared with the trace.)

    Control flow, not an error: it stays inside the replays (this one, and a flow's,
    `agentfsm.flow.replay`), and does not inherit `AgentfsmError`, so no ``except
    AgentfsmError`` (or ``except Exception``) can swallow it; `ReplayError`, the error it may
    carry out of the run, is the one callers see."""

    def __init__(self, error: ReplayError | None, reason: str = "") -> None:
        super().__init__(reason)
        self.error, self.reason = error, reason


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, ensure_ascii=False))


def _dump(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json") for m in messages]


class ReplayScript:
    """The recorded inputs, consumed in order: LLM replies, and tool results by (step, call id)."""

    def __init__(self, records: list[dict[str, Any]], *, name: str | None = None) -> None:
        self.name = name
        """Whose inputs these are, named in a divergence (a flow's replay has one script per agent)."""
        self.llm = [r for r in records if r["kind"] == "llm"]
        self.tools: dict[tuple[int, str], list[dict[str, Any]]] = {}
        """Each call's records in order: a call that asked for input has one per round."""
        for r in records:
            if r["kind"] == "tool":
                self.tools.setdefault((r["step"], r["call_id"]), []).append(r)
        transitions = [r for r in records if r["kind"] == "transition"]
        self.complete = any(r["kind"] == "result" for r in records)
        self.cancelled = bool(transitions) and transitions[-1]["trigger"] == "cancel"
        self.calls = 0

    def stop(self, problem: str) -> ReplayStop:
        if not self.complete:
            return ReplayStop(None, f"the trace ends early: {problem}")
        if self.cancelled:
            return ReplayStop(None, f"the recorded run was cancelled here: {problem}")
        return ReplayStop(ReplayError(self.at(problem)))

    def at(self, problem: str) -> str:
        """`problem`, naming whose replay it is when that is not the trace's only model."""
        return f"{self.name}: {problem}" if self.name else problem

    def peek(self) -> dict[str, Any] | None:
        return self.llm[self.calls] if self.calls < len(self.llm) else None

    def observation(self, step: int, call: ToolCall) -> Observation:
        rounds = self.tools.get((step, call.id))
        if not rounds:
            raise self.stop(f"no tool record for call {call.id!r} ({call.name}) at step {step}")
        record = rounds.pop(0)
        if (record["name"], record["arguments"]) != (call.name, call.arguments):
            replayed, traced = f"{call.name}({call.arguments})", f"{record['name']}({record['arguments']})"
            raise ReplayStop(
                ReplayError(
                    self.at(f"step {step}: call {call.id!r} is {replayed} on replay, {traced} in the trace")
                )
            )
        asked = record.get("input_required")
        return Observation(
            call=call,
            content=record["observation"],
            base64_image=record.get("base64_image"),
            is_error=record["is_error"],
            duration_s=record.get("duration_s", 0.0),
            input_required=InputRequired.model_validate(asked) if asked is not None else None,
            output=record.get("output"),
            usage=Usage.model_validate(spent) if (spent := record.get("usage")) is not None else None,
        )


class ReplayLLM:
    """A model that answers with the recorded replies, after checking each request is the recorded one."""

    def __init__(self, script: ReplayScript, token_budget: int | None) -> None:
        self.script = script
        self.token_budget = token_budget

    async def ask_tool(
        self,
        messages: Sequence[Message],
        *,
        system_msgs: Sequence[Message] = (),
        tools: Sequence[dict[str, Any]] = (),
        tool_choice: ToolChoice = "auto",
    ) -> LLMResponse:
        record = self.script.peek()
        if record is None:
            raise self.script.stop(f"no llm record for call {self.script.calls + 1}")
        self.script.calls += 1
        sent = {"messages": _dump(messages), "system_msgs": _dump(system_msgs), "tools": _json(list(tools)),
                "tool_choice": tool_choice}  # fmt: skip
        for key, value in sent.items():
            if record["request"][key] != value:
                where = f"llm call {self.script.calls} (step {record['step']})"
                raise ReplayStop(
                    ReplayError(self.script.at(f"{where}: the request's {key} differ from the trace's"))
                )
        error = record.get("error")
        if error is not None:
            if error["type"] == "TokenLimitExceeded":
                raise TokenLimitExceeded(error["message"])
            raise type(error["type"], (Exception,), {})(error["message"])  # the same "Type: message"
        return LLMResponse.model_validate(record["reply"])


class _RecordedTools(ToolCollection):
    """The tool declarations of the request about to be replayed (the set may change between steps)."""

    def __init__(self) -> None:
        super().__init__()
        self.params: list[dict[str, Any]] = []

    def to_params(self) -> list[dict[str, Any]]:
        return self.params


class _RecordedCalls(ToolRunner):
    """The tool-call path of a replay: each call's observation is the trace's (nothing runs)."""

    def __init__(self, agent: Calling, script: ReplayScript) -> None:
        super().__init__(agent)
        self.script = script

    async def execute(self, call: ToolCall) -> Observation:
        return self.script.observation(self.agent.run_state.step, call)


class ReplayAgent(ToolCallAgent):
    """A trace's tool-calling agent, rebuilt from its header to replay it: the same options,
    prompts, history and machine, with a model and tools that answer from the trace, so nothing
    is sent and nothing runs."""

    def __init__(
        self, header: dict[str, Any], script: ReplayScript, table: MachineTable | None = None
    ) -> None:
        """The agent of the trace whose `header` this is, on `table` (the recorded class's; None:
        the tool-calling agent's), its model and tools answering from `script`."""
        config = header.get("config", {})
        missing = [key for key in ("llm", "tools") if key not in config]
        if missing:
            raise ReplayError(
                f"the trace's agent ({header.get('agent_class')}) is not a tool-calling agent "
                f"(its configuration lacks {', '.join(missing)}); replay needs one"
            )
        for key, kind, what in (("llm", dict, "a table"), ("max_messages", int, "a whole number")):
            if key in config and (not isinstance(config[key], kind) or isinstance(config[key], bool)):
                raise ReplayError(
                    f"the trace's header is damaged: its config.{key} is {config[key]!r}, not {what}"
                )
        try:
            options = ToolCallOptions.from_json(config)  # options a trace lacks take their defaults
        except (ConfigError, TypeError) as exc:
            raise ReplayError(f"the trace's configuration is not an agent's: {exc}") from None
        self.script = script
        self.recorded_tools = _RecordedTools()
        if table is not None:
            self.table = table
        self._init_tool_agent(
            options,
            llm=ReplayLLM(script, config["llm"].get("token_budget")),
            tools=self.recorded_tools,
            memory=Memory(config.get("max_messages", 100)),
            approver=None,
            name=header.get("agent"),
        )
        self.tool_runner = _RecordedCalls(self, script)
        output = config.get("output")
        if isinstance(output, dict) and isinstance(output.get("tool"), str):  # it had `output_type`
            self.output_name, self._output_config = output["tool"], output
            self._sync_table()
        if config.get("awaiting_input") and AWAITING_INPUT not in self.table.by_name:  # the recorded had it
            self.table = with_input(self.table)
        for message in header.get("history", []):
            self.memory.add_message(Message.model_validate(message))

    async def think(self) -> None:
        upcoming = self.script.peek()
        if upcoming is not None:  # the tools as sent then (the set may change between steps)
            self.recorded_tools.params = upcoming["request"]["tools"]
        await super().think()

    @property
    def next_step_prompt(self) -> str | None:
        """The configured step prompt, followed by the page state when the recorded request carried
        one (Manus and BrowserAgent read the page while they run; replay reads it in the trace)."""
        configured = self.options.next_step_prompt
        upcoming = self.script.peek()
        if upcoming is None:
            return configured
        request = upcoming["request"]
        sent = [message.get("content") for message in request["system_msgs"][:1]]
        if request["messages"] and request["messages"][-1].get("role") == "user":
            sent.append(request["messages"][-1].get("content"))
        for text in sent:
            page = sent_page_context(text, configured) if isinstance(text, str) else None
            if page is not None:
                return with_page(configured, page)
        return configured

    def _system_messages(self, step_prompt: str | None = None) -> tuple[Message, ...]:
        """The system prompt as sent then (Manus rewrites its prompt per think), without the step
        prompt this think puts at its end: that part is rebuilt, so the request check still
        compares it (a stuck hint, a nudge) with the trace's."""
        upcoming = self.script.peek()
        if upcoming is not None:
            system = upcoming["request"]["system_msgs"]
            text = system[0]["content"] if system else None
            if step_prompt and text is not None:
                text = None if text == step_prompt else text.removesuffix(f"\n\n{step_prompt}")
            self.system_prompt = text
        return super()._system_messages(step_prompt)


class Replayed(Protocol):
    """A machine a replay re-drives (a replay agent, a flow of replay agents)."""

    last_result: RunResult | None

    @property
    def table(self) -> MachineTable: ...

    def iter(self, request: str) -> AsyncGenerator[Transition, None]: ...

    async def cancel(self) -> object: ...

    def on_event(self, callback: EventListener, *, first: bool = False) -> Callable[[], None]: ...


class RecordedEdges:
    """One machine's recorded edges (an agent's, a flow's, or an agent's inside a flow's trace) and
    the edits made right after each: what a replay compares the edges it takes with."""

    def __init__(self, records: list[dict[str, Any]], *, name: str | None = None) -> None:
        self.name = name
        """Whose edges these are, named in a divergence (None: the trace's own machine)."""
        self.recorded: list[dict[str, Any]] = []
        self.edits: dict[int, list[dict[str, Any]]] = {}  # transition index -> edits right after it
        for record in records:
            if record["kind"] == "transition":
                self.recorded.append(record)
            elif record["kind"] == "edit":
                self.edits.setdefault(len(self.recorded) - 1, []).append(record)
        self.replayed = 0

    def check(self, transition: Transition, complete: bool) -> int:
        """Compare the next replayed edge with the recorded one (`ReplayError` if they differ, or if
        the trace is `complete` and has no more); its index."""
        index, self.replayed = self.replayed, self.replayed + 1
        try:
            compare_transition(transition, self.recorded, index, complete)
        except ReplayError as exc:
            raise self._named(exc) from None
        return index

    def check_all_taken(self) -> None:
        """`ReplayError` unless the replay took every recorded edge (a complete trace's)."""
        if self.replayed != len(self.recorded):
            took, has = self.replayed, len(self.recorded)
            raise self._named(ReplayError(f"the replay took {took} transitions, the trace has {has}"))

    def _named(self, exc: ReplayError) -> ReplayError:
        return ReplayError(f"{self.name}: {exc}") if self.name else exc


class TraceReplayer:
    """What every replay does, an agent's (`Replayer`) and a flow's (`agentfsm.flow.replay`): read
    the trace, re-drive the recorded machine with `iter()`, compare each edge with the recorded
    one, re-apply the edits made after it, and at a complete trace's end check that every edge
    was taken and that the outcome is the recorded one. What differs is in the hooks: the
    machine built from the trace (`model`), the records that are its own (`own_records`), what
    follows an edge (`after_edge`), how a divergence is explained (`diverged`) and the end's
    further checks (`check_end`)."""

    model: Replayed
    """The replayed machine, built by the subclass from the trace."""
    outcome: ClassVar[str] = "run"
    """What the replayed machine's result is called in a divergence."""

    def __init__(self, path: RecordPath) -> None:
        try:
            self.header, records = read_trace(path)  # each request whole, as the engine sends it
        except TraceError as exc:
            raise ReplayError(str(exc)) from None
        if self.header.get("begins_after"):
            edges = self.header["begins_after"].get("edges")
            raise ReplayError(
                f"{path} begins after {edges} edges of its run (a fork of a checkpoint, whose history no "
                "trace holds): a replay starts at a run's beginning; replay a trace that holds it"
            )
        self.records = records
        own = self.own = self.own_records(records)
        """The replayed machine's own records (`own_records`)."""
        results = [r for r in own if r["kind"] == "result"]
        self.complete = bool(results)
        """Whether the trace holds the run's end (a trace cut short by a crash does not)."""
        self.recorded_result: Any = results[-1].get("result") if results else None
        """The last ``result`` record's RunResult (a paused and resumed run's end), or None."""
        self.recorded_end: dict[str, Any] | None = results[-1] if results else None
        self.edges = RecordedEdges(own)
        self.replayed: list[Transition] = []
        self.ended_early: str | None = None
        """Why the replay stopped before the run's end (a trace cut short), or None."""

    @property
    def request(self) -> str:
        return str(self.header["request"])

    def own_records(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The records of the replayed machine itself (a flow's trace holds its agents' too)."""
        return records

    def after_edge(self, index: int) -> None:
        """Re-apply what was done after recorded edge `index` (an agent: its edits)."""

    def diverged(self, exc: ReplayError) -> ReplayError:
        """The error for a replayed edge that is not the recorded one."""
        return exc

    def check_end(self) -> None:
        """Further checks at a complete trace's end, after the edges' count (`ReplayError`)."""

    async def transitions(self) -> AsyncGenerator[Transition, None]:
        """Each replayed edge, checked against the trace, with what was done after it re-applied."""
        try:
            steps = self.model.iter(self.request)
            async with aclosing(steps):
                async for transition in steps:
                    self._check(transition)
                    yield transition
            for transition in await self._cancelled_at_pause():
                self._check(transition)
                yield transition
        except ReplayStop as stop:
            if stop.error is not None:
                raise stop.error from None
            self.ended_early = stop.reason
            return
        if self.complete:
            self.edges.check_all_taken()
            self.check_end()
            ended = self.model.last_result
            if ended is not None:
                compare_result(ended.model_dump(mode="json"), self.recorded_result, self.outcome)

    def _check(self, transition: Transition) -> None:
        self.replayed.append(transition)
        try:
            index = self.edges.check(transition, self.complete)
        except ReplayError as exc:
            raise self.diverged(exc) from None
        self.after_edge(index)

    async def _cancelled_at_pause(self) -> list[Transition]:
        """The edges of the cancel that ended the recorded run at a pause (`cancel(trace=...)`
        appended them), taken again; none when the run did not end so."""
        recorded, at = self.edges.recorded, len(self.replayed)
        ended = self.model.last_result
        if ended is None or not ended.paused or at >= len(recorded):
            return []
        if recorded[at]["trigger"] != self.model.table.cancel:
            return []
        taken: list[Transition] = []

        def took(event: AgentEvent) -> None:
            if isinstance(event, Transition):
                taken.append(event)

        unsubscribe = self.model.on_event(took)
        try:
            await self.model.cancel()
        finally:
            unsubscribe()
        return taken


class Replayer(TraceReplayer):
    """One replay of an agent's trace at `path`: `transitions()` re-drives it step by step (what
    `agentfsm replay --step` puts under the debugger); `run()` drives it to the end."""

    def __init__(self, path: RecordPath, *, agent_class: type[ToolCallAgent] | None = None) -> None:
        super().__init__(path)
        self.script = ReplayScript(self.records)
        recorded_class = agent_class or recorded_agent_class(self.header.get("agent_class"))
        table = recorded_class.table if recorded_class is not None else None
        self.agent: ToolCallAgent = ReplayAgent(self.header, self.script, table)
        self.model = self.agent
        _check_states(self.agent.table, self.records, self.header.get("agent_class"), recorded_class)
        self._unfound = None if recorded_class is not None else self.header.get("agent_class")
        """The recorded class, when it was not found: a divergence may be its table's."""

    def after_edge(self, index: int) -> None:
        for edit in self.edges.edits.get(index, ()):
            apply_edit(self.agent, edit)

    def diverged(self, exc: ReplayError) -> ReplayError:
        if self._unfound is None:
            return exc
        return ReplayError(
            f"{exc} (the trace's agent class {self._unfound} is not imported here; if it "
            "extends its table, give it: `replay(trace, agent_class=...)`, or `agentfsm "
            "replay --agent-class MODULE:CLASS`)"
        )

    @property
    def result(self) -> RunResult | None:
        return self.agent.last_result if self.ended_early is None else None

    async def run(self) -> Replay:
        async for _ in self.transitions():
            pass
        return Replay(self.header, self.replayed, self.result, self.ended_early)


async def replay(trace: RecordPath, *, agent_class: type[ToolCallAgent] | None = None) -> Replay:
    """Re-drive the machine from the trace at `trace`; `ReplayError` when it cannot or diverges.
    `agent_class`: the recorded agent's class, when the process has not imported it (its table
    is the machine replayed)."""
    return await Replayer(trace, agent_class=agent_class).run()


def recorded_agent_class(name: object) -> type[ToolCallAgent] | None:
    """The tool-calling agent class named ``module.QualName`` (a trace header's `agent_class`), if
    its module is imported already (agentfsm's own modules are imported here); else None. A
    trace's names are data: no other module is imported for them."""
    if not isinstance(name, str) or "." not in name:
        return None
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        module = sys.modules.get(module_name)
        if module is None and parts[0] == "agentfsm":
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
        found: Any = module
        for attribute in parts[cut:]:
            found = getattr(found, attribute, None)
        if isinstance(found, type) and issubclass(found, ToolCallAgent):
            return found
    return None


def _check_states(
    table: MachineTable, records: list[dict[str, Any]], recorded: object, agent_class: type | None
) -> None:
    """`ReplayError` when the trace's transitions go through states `table` lacks: the recorded
    class extended its table and this replay does not have that class (`agent_class` None), or the
    trace does not match the class it names (damaged, or of another version of it)."""
    transitions = [r for r in records if r.get("kind") == "transition"]
    unknown = [
        (index, end, r.get(end))
        for index, r in enumerate(transitions, 1)
        for end in ("source", "dest")
        if r.get(end) not in table.by_name
    ]
    if not unknown:
        return
    if agent_class is not None:
        index, end, state = unknown[0]
        raise ReplayError(
            f"transition {index}'s {end} {state!r} is no state of {agent_class.__qualname__}'s table: the "
            "trace is damaged, or was written by another version of that class"
        )
    missing = sorted({str(state) for _, _, state in unknown})
    raise ReplayError(
        f"the trace goes through states {missing} of its agent class {recorded}, which is not imported "
        "here: give the class (`replay(trace, agent_class=...)`, or `agentfsm replay --agent-class "
        "MODULE:CLASS`)"
    )


RESULT_COMPARED = ("state", "stop_reason", "steps", "output", "error")
"""What a replayed run's result must share with the recorded one: its outcome. (Its usage and
timings are the replay's own; its run id is a new run's.)"""


def compare_result(mine: dict[str, Any], recorded: object, what: str) -> None:
    """`ReplayError` naming the first field of `RESULT_COMPARED` where the replayed result `mine`
    and the `recorded` one differ: a recorded outcome that the recorded inputs do not give."""
    if not isinstance(recorded, dict):
        raise ReplayError(f"the trace's {what} result is {_short(recorded)}, not a run's result")
    for key in RESULT_COMPARED:
        if mine.get(key) != recorded.get(key):
            raise ReplayError(
                f"the replayed {what}'s {key} is {_short(mine.get(key))}, "
                f"the trace's {_short(recorded.get(key))}: the trace's outcome differs from its replay"
            )


def _short(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def compare_transition(
    transition: Transition, recorded: list[dict[str, Any]], index: int, complete: bool
) -> None:
    """Check the replayed `transition` against the trace's transition number `index` (0-based):
    `ReplayError` naming both when they differ, or when the replay goes past the last one of a
    `complete` trace (one cut short ends where it ends)."""
    if index >= len(recorded):
        if complete:
            raise ReplayError(f"the replay went on past the trace's last transition ({len(recorded)})")
        return
    mine, theirs = transition_record(transition), recorded[index]
    if any(mine[key] != theirs.get(key) for key in _COMPARED):
        replayed = {key: mine[key] for key in _COMPARED}
        traced = {key: theirs.get(key) for key in _COMPARED}
        raise ReplayError(f"transition {index + 1} differs: replayed {replayed}, traced {traced}")


def apply_edit(agent: ToolCallAgent, edit: dict[str, Any]) -> None:
    """Re-apply a trace's `edit` record to `agent`, between the same two edges as in the run: new
    pending calls, an approval's decision, an answer, or an edited observation. `ReplayError` when
    the agent cannot take it there."""
    try:
        if edit["edit"] == "pending_calls":
            agent.replace_pending_calls(ToolCall.model_validate(call) for call in edit["after"])
        elif edit["edit"] == "approval":
            decide(agent, edit["call_id"], Decision.model_validate(edit["after"]))
        elif edit["edit"] == "answer":
            answer(agent, edit["call_id"], Answer.model_validate(edit["after"]), key=edit["before"])
        else:
            agent.edit_observation(edit["call_id"], edit["after"])
    except (WrongPhaseError, KeyError, IndexError, ValueError) as exc:
        raise ReplayError(f"cannot re-apply the edit at step {edit.get('step')}: {exc}") from None
