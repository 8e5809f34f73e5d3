"""`instrument()`: OpenTelemetry spans of every run, per the GenAI semantic conventions.

The package's only importer of opentelemetry (the `otel` extra). Like the trace writer, it
is a listener on a run's one event stream (`on_event`): installed once, it is subscribed to
each run as it starts (`agentfsm.run.observers`) and reads the same events a trace does.

- ``invoke_agent {agent}`` (INTERNAL), one per run; a flow's is ``invoke_workflow {flow}``,
  and the agents it runs are its children. A run that pauses (approval, input, a flow waiting
  for its agent) ends its span there (`agentfsm.run.paused`, with the pause's stop reason):
  a paused run may never be resumed. The resumed run, in this process or from its checkpoint
  in another, is a new span (`agentfsm.run.resumed`) in the same trace, a child of the paused
  span (an agent of a flow: of the flow's new span) and linked to it: the paused span's
  ``traceparent`` is kept in the run's state (`RunState.traceparent`), so its checkpoint
  carries it. A paused run cancelled instead (in this process, or resumed from its checkpoint
  and cancelled there) ends there: its end is likewise the run's last span, but one that
  ``ends`` the paused span (`agentfsm.run.cancelled_in`, status ERROR), not a resumption.
- ``chat {model}`` (CLIENT), one per model call, with provider, model, usage, finish
  reasons, and the error when the call raised (status ERROR, `error.type`). It starts
  before the request is sent (`LLMCallStarted`) and is current until the call returns, so
  the spans of an instrumented HTTP client under the model are its children. One span for
  the call and all its retries, as the conventions ask ("the logical operation with all
  retries"): each attempt's HTTP request is a span of its own under it, and each retry
  (`LLMRetry`) an `agentfsm.llm.retry` span event on it (the attempt that failed,
  `error.type`, the error's one bounded line, the wait, the HTTP status), with the attempts
  made as `agentfsm.llm.attempts` on a call that was retried. The GenAI conventions define no
  retry event (their `gen_ai.client.operation.exception` is an error that ends the operation,
  which the span's status and `exception` event say), hence the agentfsm namespace.
- ``execute_tool {tool}`` (INTERNAL), with the call id and the tool's type; current while
  the tool runs, so what the tool calls (an MCP server, through the SDK's propagation of
  the current span's context in ``_meta``) joins the trace.
- ``plan {flow}`` (INTERNAL) around a flow's planning phases, parent of the planner's calls.
- Each machine transition is an event (`agentfsm.transition`) on the run's span, with
  source, dest, trigger, step and the guards evaluated with their outcomes, in table order
  (``token_limit=false,has_tool_calls=true``): not a span.

Token usage is on the chat spans only (`gen_ai.usage.*`); the run's span carries the
run's totals as `agentfsm.usage.*`, so a backend that sums `gen_ai.usage.*` over a trace
counts each token once. Message content is written only with `include_content`.
Event types this module does not know (a stream's deltas, say) are passed over.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..errors import MissingExtraError
from ..fsm.machine import Payload
from ..messages import Message
from ..model.base import LLMResponse
from ..run.events import (
    AgentEvent,
    LLMCall,
    LLMCallStarted,
    LLMRetry,
    RunPaused,
    ToolCallCompleted,
    ToolCallStarted,
    Transition,
)
from ..run.observers import observe_runs
from ..run.result import AgentState
from . import conventions as gen_ai

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.trace import (
        Link,
        NonRecordingSpan,
        Span,
        SpanContext,
        SpanKind,
        StatusCode,
        Tracer,
        TracerProvider,
    )
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:  # pragma: no cover - the extra is installed wherever the tests run
    raise MissingExtraError(
        f"OpenTelemetry spans need the `otel` extra: pip install 'agentfsm[otel]' ({exc})"
    ) from None

__all__ = ["RETRY_EVENT", "TRANSITION_EVENT", "Instrumentation", "exported_over_otlp", "instrument"]

TRANSITION_EVENT = "agentfsm.transition"
"""The name of the span event each machine transition is."""
RETRY_EVENT = "agentfsm.llm.retry"
"""The name of the span event each retry of a model call is, on its `chat` span."""
_PROPAGATOR = TraceContextTextMapPropagator()


def instrument(
    tracer_provider: TracerProvider | None = None, *, include_content: bool = False
) -> Instrumentation:
    """Trace every run of every agent and flow started from now on, in this process.

    `tracer_provider`: where the spans go (None: OpenTelemetry's global provider, as set by
    the application). `include_content`: also write the messages sent and received, tool
    arguments and results (off by default: they are the user's data). Returns the
    `Instrumentation`; its `uninstrument()` stops tracing new runs. Call it once.
    """
    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("agentfsm")
    except PackageNotFoundError:  # pragma: no cover - a source tree without its metadata
        release = None
    return Instrumentation(provider.get_tracer("agentfsm", release), include_content=include_content)


class Instrumentation:
    """The spans of every run started while it is installed (see the module's description)."""

    def __init__(self, tracer: Tracer, *, include_content: bool = False) -> None:
        self.tracer = tracer
        self.include_content = include_content
        self.parents: dict[int, Context] = {}
        """The agents a running flow drives (by identity), each with the flow's span context:
        their runs' spans are the flow's children."""
        self._remove = observe_runs(self._observe)

    def uninstrument(self) -> None:
        """Trace no new run (the runs already traced are traced to their end)."""
        self._remove()

    def _observe(self, model: Any) -> Callable[[], None]:
        spans = _RunSpans(self, model)
        unsubscribe = model.on_event(spans.on_event)

        def close() -> None:
            unsubscribe()
            spans.close()

        return close


class _RunSpans:
    """The spans of one run of `model` (an agent or a flow), built from its events."""

    def __init__(self, owner: Instrumentation, model: Any) -> None:
        self.owner = owner
        self.model = model
        planning = frozenset(s.name for s in model.table.states if Payload.PLAN in s.produces)
        self.planning = planning
        """The phases that ask a planner for the plan (a ``plan`` span each)."""
        self.flow = bool(planning)
        """A model whose table plans runs as a workflow (``invoke_workflow``), its planner's calls
        and its agents' runs under its span: read from the table's roles, whatever its class."""
        self.run: Span | None = None
        self.run_context: Context | None = None
        self.phase: Span | None = None
        """The open `plan` span of a flow's planning phase."""
        self.chat: _Current | None = None
        """The open span of the model call in flight, current in the task that asked."""
        self.retries = 0
        """Retries of the model call in flight so far."""
        self.tools: dict[str, _Current] = {}
        """Open tool spans by call id, each current in the task that runs the call."""
        self._models: dict[int, tuple[object, str, dict[str, Any], dict[str, Any]]] = {}
        """What spans say of each model asked in this run, its chat span's name and attributes at
        start (read once a run, not once a call; the SDK copies what it is given)."""
        self._phase_context: Context | None = None

    def _model(self, llm: object) -> tuple[object, str, dict[str, Any], dict[str, Any]]:
        """`llm`, its chat span's name, what a span says of it, and a chat span's attributes at start."""
        known = self._models.get(id(llm))
        if known is None or known[0] is not llm:
            attributes = gen_ai.model_attributes(llm)
            model = attributes.get(gen_ai.REQUEST_MODEL)
            chat = {gen_ai.OPERATION: "chat", **attributes}
            known = self._models[id(llm)] = (llm, f"chat {model}" if model else "chat", attributes, chat)
        return known

    # -- events ---------------------------------------------------------------------

    def on_event(self, event: AgentEvent) -> None:
        if isinstance(event, Transition):
            self._transition(event)
            return
        if self.run is None:  # between runs (paused: an edit), or a run resumed mid-phase
            if not isinstance(event, LLMCallStarted | ToolCallStarted):
                return
            if self.model.fsm_state == self.model.table.initial:
                return
            self._open_run(resumed=True)
        if isinstance(event, LLMCallStarted):
            self._chat_started(event.model)
        elif isinstance(event, LLMCall):
            self._chat_ended(event)
        elif isinstance(event, LLMRetry):
            self._retried(event)
        elif isinstance(event, ToolCallStarted):
            self._tool_started(event)
        elif isinstance(event, ToolCallCompleted):
            self._tool_completed(event)
        elif isinstance(event, RunPaused):
            self._paused(event)

    def _transition(self, t: Transition) -> None:
        table = self.model.table
        if t.dest == table.initial:
            return  # the reset of the previous run: not part of this one
        if self.run is None:
            if t.trigger == table.cancel and table.by_name[t.source].pause:
                self._open_run(resumed=False, cancelled_in=t.source)  # a paused run cancelled
            else:
                self._open_run(resumed=t.source != table.initial)
        assert self.run is not None
        attributes: dict[str, Any] = {
            "agentfsm.transition.source": t.source,
            "agentfsm.transition.dest": t.dest,
            "agentfsm.transition.trigger": t.trigger,
            "agentfsm.step": t.step,
        }
        if t.guards:  # one string, in table order: an attribute costs the SDK per element to check
            attributes["agentfsm.transition.guards"] = ",".join(
                f"{g.name}={'true' if g.held else 'false'}" for g in t.guards
            )
        if t.stop_reason is not None:
            attributes["agentfsm.stop_reason"] = str(t.stop_reason)
        self.run.add_event(TRANSITION_EVENT, attributes)
        if not self.flow:
            final = table.by_name[t.dest].final
            if final is not None:
                self._close_run(t, final)
            return
        planning = self.planning
        if self.phase is not None and t.source in planning:
            self.phase.end()
            self.phase = None
        final = table.by_name[t.dest].final
        if final is not None:
            self._close_run(t, final)
        elif t.dest in planning:
            self.phase = self.owner.tracer.start_span(
                f"plan {self.model.name}",
                context=self.run_context,
                attributes={gen_ai.OPERATION: "plan", gen_ai.AGENT_NAME: self.model.name},
            )
            self._phase_context = trace.set_span_in_context(self.phase, self.run_context)

    def _open_run(self, *, resumed: bool, cancelled_in: str | None = None) -> None:
        """The run's span. A resumed run's is a new span in the trace of the span it had when it
        paused (`RunState.traceparent`, kept by its checkpoint too), linked to that span, and a
        child of it, or of the flow's span for an agent of a flow.

        A paused run that is cancelled (`cancelled_in` the pause) ends there, and its span ended
        at the pause: its end is a span of the same place, not a resumption (nothing ran again).
        The run's outcome is on the last span of its run in either case, so "how did each run end"
        is one query over ``invoke_agent`` spans without `agentfsm.run.paused`: here it is
        `cancelled`, status ERROR, at the moment of the cancel, with `agentfsm.run.cancelled_in`
        and a link that ``ends`` the paused span (no `agentfsm.run.resumed`, no children)."""
        model, owner = self.model, self.owner
        state = model.run_state
        operation = "invoke_workflow" if self.flow else "invoke_agent"
        attributes: dict[str, Any] = {gen_ai.OPERATION: operation, gen_ai.AGENT_NAME: model.name}
        if not self.flow:
            attributes.update(self._model(getattr(model, "llm", None))[2])
        attributes["agentfsm.run.id"] = state.run_id
        parent = owner.parents.get(id(model))  # a flow's agent: the flow's span; else the caller's
        links: list[Link] | None = None
        if resumed or cancelled_in is not None:
            if cancelled_in is not None:
                attributes["agentfsm.run.cancelled_in"] = cancelled_in
            else:
                attributes["agentfsm.run.resumed"] = True
            before = _paused_span(state.traceparent)
            if before is not None:
                links = [Link(before, {"agentfsm.link": "resumes" if resumed else "ends"})]
                if parent is None:
                    parent = trace.set_span_in_context(NonRecordingSpan(before))
        if owner.include_content and state.request and not resumed and cancelled_in is None:
            attributes[gen_ai.INPUT_MESSAGES] = gen_ai.input_messages([Message.user_message(state.request)])
        self.run = owner.tracer.start_span(
            f"{operation} {model.name}", context=parent, attributes=attributes, links=links
        )
        self.run_context = trace.set_span_in_context(self.run, parent)
        made = self.run.get_span_context()
        if made.is_valid:
            state.traceparent = f"00-{made.trace_id:032x}-{made.span_id:016x}-{made.trace_flags:02x}"
        for driven in model.driven_models():
            owner.parents[id(driven)] = self.run_context

    def _totals(self, stop_reason: object) -> dict[str, Any]:
        state = self.model.run_state
        usage = state.usage
        return {
            "agentfsm.stop_reason": str(stop_reason or ""),
            "agentfsm.run.steps": state.step,
            "agentfsm.usage.input_tokens": usage.input_tokens,
            "agentfsm.usage.output_tokens": usage.output_tokens,
            "agentfsm.usage.llm_calls": usage.llm_calls,
            "agentfsm.usage.tool_calls": usage.tool_calls,
        }

    def _close_run(self, t: Transition, final: AgentState) -> None:
        run, state = self.run, self.model.run_state
        assert run is not None
        self._end_open("the run ended before the call returned")
        attributes = self._totals(state.stop_reason or t.stop_reason)
        if self.owner.include_content and state.output:
            attributes[gen_ai.OUTPUT_MESSAGES] = _said(state.output)
        if final is AgentState.ERROR:
            error = t.error or state.error or str(t.stop_reason)
            attributes[gen_ai.ERROR_TYPE] = _error_type(error, t.stop_reason)
            run.set_status(StatusCode.ERROR, error)
        run.set_attributes(attributes)
        self._end_run()

    def _paused(self, paused: RunPaused) -> None:
        """The run waits (approval, input, a flow's agent): its span ends here, saying so; the
        run resumed, whenever and wherever, is a new span of the same trace."""
        assert self.run is not None
        self._end_open("the run paused before the call returned")
        attributes = self._totals(paused.reason)
        attributes["agentfsm.run.paused"] = True
        attributes["agentfsm.run.paused_in"] = paused.state
        self.run.set_attributes(attributes)
        self._end_run()

    def _end_run(self) -> None:
        assert self.run is not None
        self.run.end()
        self.run = None
        if self.phase is not None:
            self.phase.end()
            self.phase = None
        for driven in self.model.driven_models():
            self.owner.parents.pop(id(driven), None)

    def _end_open(self, why: str) -> None:
        if self.chat is not None:
            self._end_chat(why)
        for call_id in list(self.tools):
            self._end_tool(call_id, error=why)

    def _chat_started(self, llm: object) -> None:
        """The call's span, current (in the task that asks) until the call returns: a span the
        model's client opens meanwhile (an instrumented HTTP client's) is its child."""
        if self.chat is not None:  # a call whose end was never reported (cancelled inside a listener)
            self._end_chat("a new call started before this one returned")
        _, name, _, attributes = self._model(llm)
        parent = self._phase_context if self.phase is not None else self.run_context
        span = self.owner.tracer.start_span(name, context=parent, kind=SpanKind.CLIENT, attributes=attributes)
        self.chat = _Current(span, otel_context.attach(trace.set_span_in_context(span, parent)), _task())
        self.retries = 0

    def _retried(self, retry: LLMRetry) -> None:
        """A span event on the call's span: the attempt that failed, why, and the wait before the
        next. The error's text is the provider's (one line, bounded), never the request's content."""
        held = self.chat
        if held is None:
            return
        self.retries += 1
        attributes: dict[str, Any] = {
            "agentfsm.retry.attempt": retry.attempt,
            gen_ai.ERROR_TYPE: retry.error_type,
            "exception.message": retry.error,
            "agentfsm.retry.wait_s": retry.wait_s,
        }
        if retry.status_code is not None:
            attributes[gen_ai.HTTP_STATUS_CODE] = retry.status_code
        held.span.add_event(RETRY_EVENT, attributes)

    def _chat_ended(self, call: LLMCall) -> None:
        held = self.chat
        if held is None:
            return
        span = held.span
        attributes: dict[str, Any] = {}
        reply = call.reply
        if reply is not None:
            if reply.model:
                attributes[gen_ai.RESPONSE_MODEL] = reply.model
            if reply.finish_reason:
                attributes[gen_ai.RESPONSE_FINISH_REASONS] = (reply.finish_reason,)
            attributes[gen_ai.USAGE_INPUT_TOKENS] = reply.usage.input_tokens
            attributes[gen_ai.USAGE_OUTPUT_TOKENS] = reply.usage.output_tokens
        if self.owner.include_content:
            attributes[gen_ai.INPUT_MESSAGES] = gen_ai.input_messages(call.messages)
            if call.system_msgs:
                attributes[gen_ai.SYSTEM_INSTRUCTIONS] = gen_ai.system_instructions(call.system_msgs)
            if reply is not None:
                attributes[gen_ai.OUTPUT_MESSAGES] = gen_ai.output_messages(reply)
        if self.retries:
            attributes["agentfsm.llm.attempts"] = self.retries + 1
        if call.error_type is not None:
            attributes[gen_ai.ERROR_TYPE] = call.error_type
            span.add_event(
                "exception", {"exception.type": call.error_type, "exception.message": call.error or ""}
            )
            span.set_status(StatusCode.ERROR, call.error)
        span.set_attributes(attributes)
        self._end_chat(None)

    def _end_chat(self, error: str | None) -> None:
        held, self.chat = self.chat, None
        assert held is not None
        held.end(error, "cancelled")

    def _tool_started(self, started: ToolCallStarted) -> None:
        call = started.call
        tools = getattr(self.model, "tools", None)
        tool = tools.get(call.name) if tools is not None else None
        attributes: dict[str, Any] = {
            gen_ai.OPERATION: "execute_tool",
            gen_ai.TOOL_NAME: call.name,
            gen_ai.TOOL_CALL_ID: call.id,
            gen_ai.TOOL_TYPE: tool.tool_type if tool is not None else "function",
        }
        if tool is not None and tool.description:
            attributes[gen_ai.TOOL_DESCRIPTION] = tool.description
        if self.owner.include_content:
            attributes[gen_ai.TOOL_CALL_ARGUMENTS] = call.arguments
        span = self.owner.tracer.start_span(
            f"execute_tool {call.name}", context=self.run_context, attributes=attributes
        )
        # Current while the tool runs, in the task that runs it (each parallel call has its own).
        token = otel_context.attach(trace.set_span_in_context(span, self.run_context))
        self.tools[call.id] = _Current(span, token, _task())

    def _tool_completed(self, completed: ToolCallCompleted) -> None:
        observation = completed.observation
        held = self.tools.get(observation.call.id)
        if held is None:
            return
        attributes: dict[str, Any] = {}
        if self.owner.include_content:
            attributes[gen_ai.TOOL_CALL_RESULT] = observation.content
        if observation.input_required is not None:
            attributes["agentfsm.tool.input_required"] = True
        if attributes:
            held.span.set_attributes(attributes)
        self._end_tool(observation.call.id, error=observation.content if observation.is_error else None)

    def _end_tool(self, call_id: str, *, error: str | None) -> None:
        self.tools.pop(call_id).end(error, "tool_error")

    def close(self) -> None:
        """The run is over (or replaced): end what is still open."""
        self._end_open("the run ended before the call returned")
        if self.phase is not None:
            self.phase.end()
            self.phase = None
        if self.run is not None:
            self.run.end()
            self.run = None


@dataclass(slots=True)
class _Current:
    """An open span made current in `task` (`token` undoes that)."""

    span: Span
    token: object
    task: asyncio.Task[Any] | None

    def end(self, error: str | None, error_type: str) -> None:
        """No longer current (where it still can be: the task it was made current in may be gone,
        and its context with it), then ended, in error when `error` says why."""
        if self.task is _task():
            otel_context.detach(self.token)  # type: ignore[arg-type]
        if error is not None:
            self.span.set_attribute(gen_ai.ERROR_TYPE, error_type)
            self.span.set_status(StatusCode.ERROR, error)
        self.span.end()


def _paused_span(traceparent: str | None) -> SpanContext | None:
    """The span context a ``traceparent`` names (a paused run's span), or None."""
    if not traceparent:
        return None
    found = trace.get_current_span(_PROPAGATOR.extract({"traceparent": traceparent})).get_span_context()
    return found if found.is_valid else None


def _task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no event loop: a listener called outside a run's loop
        return None


def _said(text: str) -> str:
    return gen_ai.output_messages(LLMResponse(content=text))


def _error_type(error: str, stop_reason: object) -> str:
    """A low-cardinality `error.type`: the exception's class name of a run's ``"Type: message"``."""
    head, sep, _ = error.partition(":")
    if sep and head and " " not in head.strip():
        return head.strip()
    return str(stop_reason) if stop_reason else "_OTHER"


@contextmanager
def exported_over_otlp(*, include_content: bool = False) -> Iterator[Instrumentation]:
    """The runs started in the block traced and sent over OTLP/HTTP, configured by the standard
    ``OTEL_*`` environment variables (``OTEL_EXPORTER_OTLP_ENDPOINT`` and its traces variant,
    headers, timeout, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, the sampler,
    ``OTEL_SDK_DISABLED``). For an application (the command line): the provider becomes the
    global one, so the MCP SDK's own client spans go there too; it is shut down at the end of
    the block, which sends what is left."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider as SDKTracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = SDKTracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    instrumentation = instrument(provider, include_content=include_content)
    try:
        yield instrumentation
    finally:
        instrumentation.uninstrument()
        provider.shutdown()
