"""`agentfsm debug`: step through a run at a prompt.

A thin command loop over `Stepper`: every command either moves the run
(`step`, `next`, `continue`), changes where it pauses (`break`, `clear`), or
shows what the engine holds between transitions (`state`, `memory`,
`request`, `calls`, `usage`, `diagram`), or changes a result before it is
recorded (`edit`). It pauses before the first transition. It reads lines,
so it works on a terminal and with piped input alike; end of input quits.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TextIO

from ..agent.base import BaseAgent
from ..agent.stepping import Breakpoint, Stepper
from ..fsm.diagram import to_mermaid
from ..fsm.machine import Payload
from ..messages import Message
from ..recording.trace import TraceWriter
from ..run.events import LLMCall, LLMRetry, TextDelta, ToolCallDelta, Transition
from ..run.result import RunResult, StopReason
from .output import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    exit_code,
    exit_interrupted,
    format_transition,
    print_result,
)

__all__ = ["COMMANDS", "Debugger", "debug_command", "read_stdin_line"]

ReadLine = Callable[[str], Awaitable[str | None]]

COMMANDS = {
    "step": "one transition (step N: N transitions)",
    "next": "to the next THINKING (one full think, act, observe step)",
    "continue": "until a breakpoint or the end of the run",
    "break": "break STATE | SOURCE->DEST | TRIGGER | tool:NAME: pause there (no argument: list)",
    "clear": "clear STATE | SOURCE->DEST | TRIGGER | tool:NAME: remove a breakpoint",
    "state": "the machine's state, step and stop reason",
    "memory": "the messages in memory",
    "request": "the last reply of the model, and what it was asked",
    "calls": "the pending tool calls",
    "usage": "tokens, calls and cost so far",
    "edit": "edit N TEXT: replace pending observation N (in OBSERVING, before it is recorded)",
    "diagram": "the machine in Mermaid, the current state highlighted",
    "quit": "end the run (it ends cancelled) and leave, with exit status 130",
    "help": "this list",
}
_ALIASES = {"s": "step", "n": "next", "c": "continue", "b": "break", "q": "quit", "h": "help", "?": "help"}


WAIT_NOTICE_S = 1.0
"""After this long without a transition, a move that waits for the model says so."""


async def read_stdin_line(prompt: str) -> str | None:
    """Show `prompt` on stdout and read a command from stdin without blocking the loop (None at
    end of input). On a terminal the line is edited with readline, and earlier commands come
    back with Up (the session's history); piped commands are read as they are."""
    if sys.stdin.isatty() and sys.stdout.isatty():
        with contextlib.suppress(ImportError):  # a Python built without readline: plain lines
            import readline  # noqa: F401  (input() edits lines and keeps history once it is loaded)
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str | None] = loop.create_future()

    def deliver(line: str | None) -> None:
        if not answer.done():
            answer.set_result(line)

    def read() -> None:
        line: str | None
        try:
            line = input(prompt)
        except (EOFError, OSError, ValueError):  # end of input, or stdin closed
            line = None
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
            loop.call_soon_threadsafe(deliver, line)

    # A daemon thread, not the default executor, which asyncio.run would wait for (terminal.py).
    threading.Thread(target=read, name="agentfsm-debugger", daemon=True).start()
    return await answer


class Debugger:
    """Drive `agent` through `task` from commands read by `read_line`, printing to `out`."""

    def __init__(
        self,
        agent: BaseAgent,
        task: str,
        *,
        read_line: ReadLine = read_stdin_line,
        out: TextIO | None = None,
        breakpoints: list[Breakpoint] | None = None,
        transitions: AsyncIterator[Transition] | None = None,
    ) -> None:
        self.agent = agent
        self.stepper = Stepper(agent, task, breakpoints=breakpoints, transitions=transitions)
        self.read_line = read_line
        self.out = out if out is not None else sys.stdout
        self.last_call: LLMCall | None = None
        self._streaming = 0
        """The attempt whose pieces are being shown (0: none), while a streaming model writes."""
        self.quit = False
        """The person ended the session (`quit`, or end of input) before the run's end."""
        agent.on_event(self._on_event)

    def _on_event(self, event: object) -> None:
        """Remember the last model call; show a streaming model's turn as it arrives: its text,
        and each tool call's name and arguments (a retried attempt starts on a new line); say
        each retry of the call, and how long it waits."""
        if isinstance(event, TextDelta | ToolCallDelta):
            if event.attempt != self._streaming:
                start = "model: " if self._streaming == 0 else f"\nmodel (attempt {event.attempt}): "
                self.out.write(start)
                self._streaming = event.attempt
            if isinstance(event, TextDelta):
                self.out.write(event.text)
            else:
                self.out.write(f"\n    call {event.name} " if event.name else "")
                self.out.write(event.arguments)
            self.out.flush()
            return
        if self._streaming:
            self._streaming = 0
            self._say("")
        if isinstance(event, LLMRetry):  # while the run is in its model call: say why it waits
            failed = f"model: attempt {event.attempt} failed ({event.error})"
            self._say(f"{failed}; retrying in {event.wait_s:.1f} s")
        elif isinstance(event, LLMCall):
            self.last_call = event

    async def run(self) -> RunResult | None:
        """Serve commands until `quit`, end of input, or the run's end; return the result."""
        self._say(f"paused before the first transition of: {self.stepper.task}\n(type help for the commands)")
        try:
            while True:
                line = await self.read_line("(agentfsm) ")
                if line is None:
                    self._say("end of input: quitting")
                    self.quit = True
                    break
                try:
                    words = shlex.split(line) if line.strip() else []
                except ValueError as exc:  # an unclosed quote
                    self._say(f"error: {exc}")
                    continue
                if not words:
                    continue
                command = _ALIASES.get(words[0], words[0])
                if command == "quit":
                    self.quit = True
                    break
                await self._dispatch(command, words[1:])
                if self.stepper.finished:
                    result = self.stepper.result
                    if result is not None:
                        self._say(f"run ended: {result.state} ({result.stop_reason})")
                    break
        finally:
            await self.stepper.close()
        return self.agent.last_result

    async def _dispatch(self, command: str, args: list[str]) -> None:
        stepper, run = self.stepper, self.agent.run_state
        if command in ("step", "next", "continue"):
            times = 1
            if command == "step" and args:
                if not args[0].isdigit() or int(args[0]) < 1:
                    self._say(f"usage: step [N], N a number of transitions from 1 (got {args[0]!r})")
                    return
                times = int(args[0])
            move = {"step": stepper.step, "next": stepper.next, "continue": stepper.resume}[command]
            before = len(stepper.history)
            notice = asyncio.create_task(self._say_while_the_model_thinks())
            try:
                for _ in range(times):
                    if stepper.finished:
                        break
                    await move()
            finally:
                notice.cancel()
            shown = stepper.history[before:] if command != "continue" else stepper.history[before:][-1:]
            for transition in shown:
                self._show(transition)
        elif command in ("break", "clear"):
            self._breakpoint(command, args)
        elif command == "state":
            self._say(
                f"state {self.agent.state.value}, phase {self.agent.phase or '-'}, step {run.step} "
                f"of {getattr(self.agent, 'max_steps', '?')}, stop_reason {run.stop_reason or '-'}"
            )
        elif command == "memory":
            for index, message in enumerate(self.agent.memory):
                calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
                text = (message.content or "") + (f" -> {calls}" if calls else "")
                self._say(f"{index:>3} {message.role.value:<9} {_clip(text)}")
        elif command == "request":
            self._request()
        elif command == "calls":
            if not run.turn.pending_calls:
                self._say("no pending tool calls")
            for index, call in enumerate(run.turn.pending_calls):
                self._say(f"{index}: {call.name}({call.arguments})  id {call.id}")
        elif command == "usage":
            u = run.usage
            cost = "n/a" if u.cost_usd is None else f"${u.cost_usd:.6f}"
            self._say(
                f"tokens {u.input_tokens} in, {u.output_tokens} out; "
                f"llm_calls {u.llm_calls}; tool_calls {u.tool_calls}; cost {cost}"
            )
        elif command == "edit":
            self._edit(args)
        elif command == "diagram":
            self._say(to_mermaid(self.agent.table, highlight=self.agent.fsm_state).rstrip())
        elif command == "help":
            for name, text in COMMANDS.items():
                self._say(f"  {name:<9} {text}")
        else:
            self._say(f"unknown command {command!r}; type help for the list")

    async def _say_while_the_model_thinks(self) -> None:
        """While a move is under way: once per step, after `WAIT_NOTICE_S` in a phase that asks the
        model (its role: it produces the reply), say that the prompt is waiting for the model."""
        said: tuple[str, int] | None = None
        while True:
            await asyncio.sleep(WAIT_NOTICE_S)
            state, step = self.agent.fsm_state, self.agent.run_state.step
            spec = self.agent.table.by_name.get(state)
            if spec is not None and Payload.REPLY in spec.produces and said != (state, step):
                said = (state, step)
                self._say(f"waiting for the model ({state}, step {step})…")

    def _request(self) -> None:
        call = self.last_call
        if call is None:
            self._say("no model request yet in this run")
            return
        tools = ", ".join(t["function"]["name"] for t in call.tools) or "none"
        self._say(
            f"request at step {call.step}: {len(call.system_msgs)} system and {len(call.messages)} messages, "
            f"tools [{tools}], tool_choice {call.tool_choice}"
        )
        for message in call.messages[-3:]:
            self._say(f"  ... {message.role.value:<9} {_clip(message.content or '')}")
        step_prompt = _step_prompt_in_system(call.system_msgs, getattr(self.agent, "system_prompt", None))
        if step_prompt:
            self._say(f"  step prompt, at the end of the system message: {_clip(step_prompt)}")
        if call.reply is None:
            self._say(f"no reply: {call.error_type}: {call.error}")
            return
        self._say(f"reply: {_clip(call.reply.content or '(no text)')}")
        for tool_call in call.reply.tool_calls:
            self._say(f"  call {tool_call.name}({tool_call.arguments})")

    def _breakpoint(self, command: str, args: list[str]) -> None:
        if not args:
            listed = ", ".join(str(b) for b in self.stepper.breakpoints) or "none"
            self._say(f"breakpoints: {listed}")
            return
        try:
            point = _parse_breakpoint(args[0], self.agent)
            if command == "break":
                self.stepper.add_breakpoint(point)
                self._say(f"breakpoint set: {point}")
            elif self.stepper.clear_breakpoint(point):
                self._say(f"breakpoint cleared: {point}")
            else:
                self._say(f"no breakpoint {point}")
        except ValueError as exc:
            self._say(f"error: {exc}")

    def _edit(self, args: list[str]) -> None:
        run = self.agent.run_state
        recording = self.agent.table.phase_that(consumes=Payload.OBSERVATIONS)
        name = recording.name if recording is not None else "the phase that records results"
        if recording is None or self.agent.phase != recording.name or not run.turn.observations:
            self._say(f"edit works in {name}, before the results are recorded: `break {name}`, then edit")
            return
        if len(args) < 2 or not args[0].isdigit() or int(args[0]) >= len(run.turn.observations):
            self._say(f"usage: edit N TEXT, with N from 0 to {len(run.turn.observations) - 1}")
            return
        edit = getattr(self.agent, "edit_observation", None)
        index, text = int(args[0]), " ".join(args[1:])
        if edit is not None:
            edit(index, text)  # recorded as an edit event, so traces keep it
        else:
            run.turn.observations[index].content = text
        self._say(f"observation {index} is now: {_clip(text)}")

    def _show(self, transition: Transition) -> None:
        self._say(format_transition(transition))

    def _say(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()


def debug_command(
    agent: BaseAgent,
    task: str,
    breaks: list[str],
    *,
    trace: str | None = None,
    transitions: AsyncIterator[Transition] | None = None,
    read_line: ReadLine = read_stdin_line,
) -> int:
    """`agentfsm debug` (and `replay --step`, which passes the replayed `transitions`): serve the
    prompt (`read_line`: on stdin/stdout), print the result, return the exit status.

    Ctrl-C, at the prompt or while the run moves, ends the run cancelled and the session with
    status 130, as `quit` does (with ``interrupted`` on stderr). However the session ends, the
    terminal is left in the modes it had (`terminal_modes.kept`): readline's, which an
    interrupted prompt would leave behind, are undone before anything more is printed.
    """
    from . import terminal_modes

    try:
        breakpoints = [_parse_breakpoint(text, agent) for text in breaks]
        debugger = Debugger(
            agent, task, read_line=read_line, breakpoints=breakpoints, transitions=transitions
        )
    except ValueError as exc:
        sys.stderr.write(f"agentfsm: {exc}\n")
        return EXIT_USAGE

    async def session() -> RunResult | None:
        try:
            if trace is None:
                return await debugger.run()
            with TraceWriter(trace, agent):
                return await debugger.run()
        finally:
            aclose = getattr(agent, "aclose", None)  # agents that hold a sandbox release it
            if aclose is not None:
                await aclose()

    interrupted = False
    with terminal_modes.kept():
        try:
            result = asyncio.run(session())
        except KeyboardInterrupt:
            interrupted, result = True, agent.last_result
    if interrupted:
        if result is not None:  # cancelled by the person: no error line for it
            print_result(result, False, sys.stdout, error_line=False)
        return exit_interrupted()
    if result is None:  # quit before the first transition, or a replay that ended early
        return EXIT_INTERRUPTED if debugger.quit else 0
    if debugger.quit and result.stop_reason == StopReason.CANCELLED:
        # The person ended it: the result says so (cancelled), and no error line is due.
        print_result(result, False, sys.stdout, error_line=False)
        return EXIT_INTERRUPTED
    print_result(result, False, sys.stdout)
    return exit_code(result)


def _parse_breakpoint(text: str, agent: BaseAgent) -> Breakpoint:
    if text.startswith("tool:"):
        return Breakpoint(tool=text.removeprefix("tool:").strip() or None)
    if "->" in text:
        source, dest = (part.strip() or None for part in text.split("->", 1))
        return Breakpoint(source=source, dest=dest)
    if text in agent.table.by_name:
        return Breakpoint(state=text)
    return Breakpoint(trigger=text)


def _clip(text: str, width: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _step_prompt_in_system(system_msgs: Sequence[Message], system_prompt: str | None) -> str | None:
    """What a request's system message says beyond the agent's system prompt: the step prompt,
    which goes there when the history ends with tool results (a user message cannot follow them)."""
    if not system_msgs:
        return None
    text = system_msgs[-1].content or ""
    if system_prompt and text.startswith(system_prompt):
        return text[len(system_prompt) :].strip() or None
    return None if system_prompt else text or None
