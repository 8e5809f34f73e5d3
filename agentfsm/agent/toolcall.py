"""`ToolCallAgent`: think = ask the LLM for tool calls; act = run them.

Every failure of a tool is an observation for the model, never a crash
(OpenManus's wording for each kind). The assistant message is recorded in
THINKING, before any tool runs, so the call/result pairing holds in memory
at every transition. With `output_type`, the run's answer is a validated
object given through the `final_result` tool (`agentfsm.agent.output`).
"""

from __future__ import annotations

import functools
import json
import logging
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from ..errors import TokenLimitExceeded, WrongTypeError
from ..fsm.machine import StateSpec
from ..log import event
from ..memory import Memory
from ..messages import Message, Role, ToolCall
from ..model.base import ChatModel, LLMResponse, ToolChoice
from ..model.options import describe_model
from ..options import Spec
from ..questions import InputHandler
from ..run.driver import RunDriver
from ..run.result import RunResult, StopReason
from ..run.state import Observation
from ..toolbox.terminate import Terminate
from ..toolbox.tool import Tool, ToolCollection
from .approval import STATE as AWAITING_APPROVAL
from .approval import Approvals, Approver, with_approval
from .awaiting_input import STATE as AWAITING_INPUT
from .awaiting_input import Questions, with_input
from .base import RUN_ENDED
from .images import latest_images
from .options import AgentOptions
from .output import STEP_PROMPT as OUTPUT_STEP_PROMPT
from .output import TEXT_NUDGE, FinalResult, count_failures, with_output
from .react import ReActAgent
from .tool_runner import ToolRunner

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["ToolCallAgent", "ToolCallOptions"]

SYSTEM_PROMPT = "You are an agent that can execute tool calls"
NEXT_STEP_PROMPT = "If you want to stop interaction, use `terminate` tool/function call."
REQUIRED_NUDGE = "You must call one of the available tools to continue."
EMPTY_NUDGE = "Your last reply was empty. Continue with the task: call a tool, or give your final answer."


@dataclass(frozen=True, kw_only=True)
class ToolCallOptions(AgentOptions):
    """`ToolCallAgent`'s options: the engine's (`AgentOptions`) and how it asks and acts."""

    max_steps: int = 30
    system_prompt: str | None = SYSTEM_PROMPT
    """The system prompt of every request (None: none)."""
    next_step_prompt: str | None = NEXT_STEP_PROMPT
    """Sent with each request, never kept in memory (None: none): a user message after the
    history, or the end of the system prompt when the history ends with tool results."""
    tool_choice: Annotated[ToolChoice, Spec(flag="tool choice sent to the model")] = "auto"
    """``auto``; ``required`` (a reply without calls gets one nudge, a second ends in ERROR); ``none``."""
    max_observe: Annotated[int | None, Spec(ge=1, none="no limit")] = None
    """Characters of a tool's observation the model reads; the rest is cut, with a marker saying so."""
    special_tool_names: frozenset[str] = frozenset({"terminate"})
    """Tools whose successful call ends the run (`terminated`); calls after one are not run."""
    parallel_tool_calls: bool = False
    """Run the calls of one reply concurrently (results are still recorded in call order)."""
    max_images: Annotated[int | None, Spec(ge=0, none="every one", file_none=-1)] = None
    """Images (tools' screenshots) a request carries: the latest ones; each older one is replaced
    by a marker in its message, while memory keeps them all (`agentfsm.agent.images`)."""
    require_approval: Annotated[
        frozenset[str],
        Spec(
            flag="ask before each call to TOOL (repeat, or separate with commas): on the terminal "
            "(run), or the MCP client as an elicitation (mcp-serve)"
        ),
    ] = frozenset()
    """Tools whose calls wait for a decision (AWAITING_APPROVAL), besides tools marked `needs_approval`."""
    max_input_rounds: Annotated[int, Spec(ge=1)] = 10
    """Times one call may ask for input (AWAITING_INPUT); one more is an error observation."""
    output_retries: Annotated[int, Spec(ge=0)] = 2
    """With `output_type`: invalid final answers the model may correct; one more ends the run in
    ERROR with `output_retries`."""


class ToolCallAgent(Approvals, Questions, ReActAgent):
    """The tool-calling agent: the base of Manus and every practical agent."""

    options: ToolCallOptions
    options_class: ClassVar[type[ToolCallOptions]] = ToolCallOptions

    def __init__(
        self,
        *,
        llm: ChatModel,
        tools: ToolCollection | Iterable[Tool] | None = None,
        memory: Memory | None = None,
        output_type: type[BaseModel] | None = None,
        approver: Approver | None = None,
        input_handler: InputHandler | None = None,
        name: str | None = None,
        options: ToolCallOptions | None = None,
        **values: Any,
    ) -> None:
        """The options are `options_class`'s (`ToolCallOptions`, documented and checked there),
        by name (`values`) over the record `options` if given; `inspect.signature` lists them.
        `tools` defaults to `terminate` alone (with `output_type`, to none); `approver` decides
        calls that need approval, `input_handler` answers a tool's questions (None: the run
        pauses). `output_type`: a pydantic model the run's answer must be, given through the
        `final_result` tool, validated, and returned as `RunResult.parsed` (the default step
        prompt then names `final_result` instead of `terminate`)."""
        record = self.options_class.build(values, start=options, owner=type(self).__qualname__)
        if output_type is not None and record.next_step_prompt == NEXT_STEP_PROMPT:
            record = replace(record, next_step_prompt=OUTPUT_STEP_PROMPT)
        self._init_tool_agent(
            record,
            llm=llm,
            tools=tools,
            memory=memory,
            approver=approver,
            input_handler=input_handler,
            name=name,
            output_type=output_type,
        )

    def _init_tool_agent(
        self,
        options: ToolCallOptions,
        *,
        llm: ChatModel,
        tools: ToolCollection | Iterable[Tool] | None,
        memory: Memory | None,
        approver: Approver | None,
        name: str | None,
        input_handler: InputHandler | None = None,
        output_type: type[BaseModel] | None = None,
    ) -> None:
        """The constructor's work once the options are a checked record (Manus and replay build
        theirs, then call this)."""
        if not callable(getattr(llm, "ask_tool", None)):
            raise WrongTypeError(f"`llm` must be an LLM (or a ChatModel with `ask_tool`), got {llm!r}")
        final = FinalResult(output_type) if output_type is not None else None
        self._init_agent(options, name=name, memory=memory)
        self.llm = llm
        if tools is None:
            tools = [Terminate()] if final is None else []
        self.tools = ToolCollection.of(tools)
        if final is not None:
            self.tools.add(final)
        self.output_type = output_type
        """The pydantic model the run's answer must be (None: any text, or none)."""
        self.output_name = final.name if final is not None else None
        """The tool the answer comes through (`final_result`), when there is one."""
        self._output_config = final.describe() if final is not None else None
        self.system_prompt = options.system_prompt
        """The prompt the next request sends: `options.system_prompt` (Manus fills in its workspace)."""
        self.approver = approver
        """Asked in AWAITING_APPROVAL; None: the run pauses there (see `agentfsm.agent.approval`)."""
        self.input_handler = input_handler
        """Asked in AWAITING_INPUT; None: the run pauses there (see `agentfsm.agent.awaiting_input`)."""
        self._sync_table()
        self._tools_seen = self.tools.to_params()
        self.tool_runner = ToolRunner(self)
        """The tool-call path: runs each reply's calls (a durable run hands the agent one of its own)."""

    # -- the options, by name (read-only: replace `options` to change them) ----------------

    @property
    def next_step_prompt(self) -> str | None:
        return self.options.next_step_prompt

    @property
    def tool_choice(self) -> ToolChoice:
        return self.options.tool_choice

    @property
    def max_observe(self) -> int | None:
        return self.options.max_observe

    @property
    def parallel_tool_calls(self) -> bool:
        return self.options.parallel_tool_calls

    @property
    def require_approval(self) -> frozenset[str]:
        return self.options.require_approval

    @property
    def max_input_rounds(self) -> int:
        return self.options.max_input_rounds

    @property
    def output_retries(self) -> int:
        return self.options.output_retries

    @property
    def finish_on_answer(self) -> bool:
        """The option, off while an `output_type` is asked for (a text reply is not the answer)."""
        return self.options.finish_on_answer and self.output_name is None

    @property
    def special_tool_names(self) -> frozenset[str]:
        """The option's tools, and `final_result` when there is one."""
        names = self.options.special_tool_names
        return names | {self.output_name} if self.output_name is not None else names

    # -- the table the tools need ---------------------------------------------------------

    def _start_driver(self, closers: tuple[Callable[[], None], ...]) -> RunDriver:
        """A run starts on the table its tools need now: a tool added or replaced since the agent
        was made (an MCP server's, a durable run's question) may ask for input or need approval."""
        self._follow_tools()
        return super()._start_driver(closers)

    def _follow_tools(self) -> list[dict[str, Any]]:
        """The tools' parameters as the next request sends them; when the set changed (a new
        list), the table is checked against it again first."""
        tools = self.tools.to_params()
        if tools is not self._tools_seen:
            self._tools_seen = tools
            self._sync_table()
        return tools

    def _sync_table(self) -> None:
        """Use the table with AWAITING_APPROVAL once any tool needs approval, and with
        AWAITING_INPUT once any tool may ask for input (the set may grow; states are only added)."""
        table = self.table
        if AWAITING_INPUT not in table.by_name and self.tools.asks_for_input:
            table = with_input(table)
        if AWAITING_APPROVAL not in table.by_name and (self.require_approval or self.tools.approval_names):
            table = with_approval(table)
        if self.output_name is not None:
            table = with_output(table)
        self.table = table

    def still_waiting_for(self) -> str | None:
        calls = self.pending_approval if self.approver is None else []
        questions = self.pending_input if self.input_handler is None else []
        if calls:
            names = ", ".join(f"{c.name} ({c.id})" for c in calls)
            return f"decisions on {names}: `approve()` or `reject()` each"
        if questions:
            asked = ", ".join(f"{q.key!r} of {c.name} ({c.id})" for c, q in questions)
            return f"answers to {asked}: `answer()` each"
        return None

    # -- THINKING -------------------------------------------------------------

    async def think(self) -> None:
        run = self.run_state
        turn = run.turn  # new: each THINKING begins with an empty one (`agentfsm.agent.table`)
        nudge, next_step = run.nudge, self.next_step_prompt
        prompt = f"{nudge}\n{next_step}" if nudge and next_step else nudge or next_step or None
        run.nudge = None

        budget = self.llm.token_budget
        if budget is not None and run.usage.total_tokens >= budget:
            turn.token_limit = f"the run's token budget of {budget} is spent ({run.usage.total_tokens} used)"
            return
        # The step prompt follows the history as a user message (OpenManus's place for it, the
        # last thing the model reads), except right after tool results: Mistral rejects a user
        # message there ("Unexpected role 'user' after role 'tool'"), so it ends the system
        # prompt instead, which every provider accepts. After the model's own answer it must be
        # a user message: a request ending on an assistant message is a prefill to Anthropic and
        # refused by Mistral. Never in memory either way.
        last = self.memory.last()
        messages: Sequence[Message]
        if prompt and (last is None or last.role is not Role.TOOL):
            messages, system = self.memory.view(Message.user_message(prompt)), self._system_messages()
        else:
            messages, system = self.memory.view(), self._system_messages(prompt)
        if self.options.max_images is not None:
            messages = latest_images(messages, self.options.max_images)
        tools, choice = self._follow_tools(), self.tool_choice  # the reply is read as it was asked for
        try:
            reply = await self.ask_model(self.llm, messages, system, tools, choice)
        except TokenLimitExceeded as exc:
            turn.token_limit = str(exc)
            return
        if choice != "none" and reply.tool_calls:
            reply = self._with_distinct_ids(reply)
        turn.reply = reply
        run.usage.add(reply.usage)
        if reply.content:
            run.output = reply.content

        calls = reply.tool_calls if choice != "none" else ()
        if calls:
            run.missed_tool_calls = 0
            fields = reply.provider_fields
            self.memory.add_message(Message.from_tool_calls(calls, reply.content, provider_fields=fields))
            turn.pending_calls = list(calls)
            return
        if reply.content:
            self.memory.add_message(
                Message.assistant_message(reply.content, provider_fields=reply.provider_fields)
            )
        if choice == "required":
            run.missed_tool_calls += 1
            run.nudge = REQUIRED_NUDGE
        elif not reply.content:
            run.nudge = EMPTY_NUDGE
        elif self.output_name is not None:  # an answer, but not through `final_result`: one attempt
            run.output_failures += 1
            run.output_problem = "a plain text reply instead of a call"
            run.nudge = TEXT_NUDGE

    def _with_distinct_ids(self, reply: LLMResponse) -> LLMResponse:
        """The reply with an id of its own for each call, before anything records its calls.

        Models do repeat an id within one reply. Everything downstream keys a call by its id
        (memory pairs a result with its call, a step's completed calls and approvals, the trace's
        and the checkpoint's tool records), so a repeated id would run one call and answer both
        with its result. Each repeat gets the id ``<id>_<n>`` instead (the first free n from 2,
        among all ids of the reply): it still runs, as the model asked, and memory, trace and
        checkpoint see one id per call. It depends on the reply alone, so a replay that feeds the
        recorded reply back in gets the same ids. The provider accepts ids it did not issue: a
        history only has to pair each result with a call of the assistant message before it.
        """
        calls, renamed = distinct_ids(reply.tool_calls)
        if not renamed:
            return reply
        run = self.run_state
        event(
            "tool_call_ids_renamed",
            level=logging.WARNING,
            agent=self.name,
            run_id=run.run_id,
            step=run.step,
            renamed={str(i): calls[i].id for i in renamed},
            message=(
                f"the model gave ids {sorted({reply.tool_calls[i].id for i in renamed})!r} to more "
                "than one call; each repeat runs under an id of its own (`<id>_<n>`), so each call "
                "gets its own result"
            ),
        )
        return replace(reply, tool_calls=calls)

    def trace_config(self) -> dict[str, Any]:
        config = {
            **super().trace_config(),
            "llm": describe_model(self.llm),
            "require_approval": self.approval_names,  # the option's tools and those marked on the tool
            "tools": self.tools.to_params(),
        }
        if AWAITING_INPUT in self.table.by_name:  # tools may ask for input: replay builds the same machine
            config["awaiting_input"] = True
        if self._output_config is not None:  # replay routes the output edges as the run did
            config["output"] = self._output_config
        return config

    def _system_messages(self, step_prompt: str | None = None) -> tuple[Message, ...]:
        """The system prompt as messages, `step_prompt` at its end when this think's step prompt
        cannot be a user message (see `think`). One system message, not two: some servers' chat
        templates accept a system message only as the first message."""
        return _system_messages(self.system_prompt, step_prompt)

    # -- ACTING ---------------------------------------------------------------

    async def act(self) -> None:
        run = self.run_state
        calls = run.turn.pending_calls
        specials = self.special_tool_names
        cut = len(calls)
        for i, call in enumerate(calls):
            if call.name in specials:
                cut = i + 1
                break
        to_run, skipped = calls[:cut], calls[cut:]
        done = await self.tool_runner.run_calls(to_run)
        if run.turn.input_requests:  # AWAITING_INPUT follows; ACTING runs again with the answers
            run.turn.observations = done
            return
        special = to_run[-1] if to_run and to_run[-1].name in specials else None
        if special is not None:
            note = f"Not executed: `{special.name}` was called earlier in this reply."
            done += [Observation(call=call, content=note, is_error=True) for call in skipped]
        run.usage.tool_calls += len(to_run)
        run.turn.observations = done
        if self.output_name is not None:
            count_failures(run, done[: len(to_run)], self.output_name)
        if (
            special is not None
            and not done[len(to_run) - 1].is_error
            and self.should_finish_execution(special)
        ):
            run.turn.terminated_by = special.name
            if special.name == self.output_name:
                run.final_output = done[len(to_run) - 1].output

    async def execute_tool(self, call: ToolCall) -> Observation:
        """Run one call's tool (`tool_runner.execute`); every failure comes back as an error
        observation, never an exception."""
        return await self.tool_runner.execute(call)

    def run_result(self, spec: StateSpec, paused: StopReason | str | None) -> RunResult:
        """The engine's result, with the validated answer (`parsed`) and its JSON as the `output`
        when `final_result` ended the run."""
        result = super().run_result(spec, paused)
        run = self.run_state
        if paused is not None or run.final_output is None:
            return result
        parsed = run.parsed
        if parsed is None:  # a run restored from a checkpoint, or replayed: rebuilt from the JSON
            parsed = run.final_output
            if self.output_type is not None:
                parsed = self.output_type.model_validate(run.final_output)
        output = json.dumps(run.final_output, ensure_ascii=False)
        return replace(result, parsed=parsed, output=output)

    def check_deps(self, deps: Any) -> None:
        """Each tool with a `deps_type` takes `deps`: refused before the run starts otherwise."""
        for item in self.tools.with_deps:
            wanted = item.deps_type
            if wanted is not None and not isinstance(deps, wanted):
                raise WrongTypeError(
                    f"tool {item.name!r} takes the run's dependencies, a {wanted.__qualname__}; "
                    f"got {deps!r}: pass `deps=` a {wanted.__qualname__} to the run"
                )

    def interrupt(self) -> None:
        """The run ends outside its phases: answer its open calls, each with its result when this
        step has one (a call that completed before the interruption keeps what it did), else
        with a note that the run ended first."""
        memory, run = self.memory, self.run_state
        for call_id, asked in run.turn.input_requests.items():  # nobody will answer them now
            waiting = next((c for c in run.turn.pending_calls if c.id == call_id), None)
            tool = self.tools.get(waiting.name) if waiting is not None else None
            if tool is not None:
                tool.abandon(asked)
        open_calls = memory.open_calls
        if not open_calls:
            return
        finished = (o for o in run.turn.observations if o.input_required is None)
        results = {**run.turn.completed_calls, **{o.call.id: o for o in finished}}
        answers = []
        for call_id, name in open_calls.items():
            done = results.get(call_id)
            content, image = (done.content, done.base64_image) if done is not None else (RUN_ENDED, None)
            answers.append(Message.tool_message(content, name=name, tool_call_id=call_id, base64_image=image))
        memory.add_messages(answers)

    def should_finish_execution(self, call: ToolCall) -> bool:
        """Whether `call`, a special tool that ran without error, ends the run. True: override it
        to let, say, `terminate` end a run only once a condition of the agent's own holds."""
        return True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass written for the hook's old private name keeps working, with a warning."""
        super().__init_subclass__(**kwargs)
        old = cls.__dict__.get("_should_finish_execution")
        if old is not None:
            warnings.warn(
                f"{cls.__name__}._should_finish_execution is deprecated: rename it should_finish_execution",
                DeprecationWarning,
                stacklevel=2,
            )
            cls.should_finish_execution = old  # type: ignore[method-assign]


@functools.lru_cache(maxsize=64)
def _system_messages(prompt: str | None, step_prompt: str | None) -> tuple[Message, ...]:
    """Built once per pair of texts: messages are immutable, and a trace writes each once."""
    text = f"{prompt}\n\n{step_prompt}" if prompt and step_prompt else prompt or step_prompt
    return (Message.system_message(text),) if text else ()


def distinct_ids(calls: Sequence[ToolCall]) -> tuple[tuple[ToolCall, ...], list[int]]:
    """`calls` with each repeat of an id renamed ``<id>_<n>`` (the first n from 2 that no call of
    `calls` has, nor an earlier rename), and the indexes of the calls renamed."""
    taken = {call.id for call in calls}
    if len(taken) == len(calls):
        return tuple(calls), []
    seen: set[str] = set()
    out: list[ToolCall] = []
    renamed: list[int] = []
    for index, call in enumerate(calls):
        if call.id in seen:
            n = 2
            while f"{call.id}_{n}" in taken:
                n += 1
            new_id = f"{call.id}_{n}"
            taken.add(new_id)
            call = replace(call, id=new_id)
            renamed.append(index)
        seen.add(call.id)
        out.append(call)
    return tuple(out), renamed
