"""Questions to the person at the terminal: `ask_human`'s, approvals of tool calls, and a tool's questions.

Both read a line in a daemon thread, not `asyncio.to_thread`: `asyncio.run`
waits for the default executor's threads when it shuts down, so a pending
read there would make Ctrl-C hang until Enter. A daemon thread is left behind
instead, and ends with the process.

Where a question goes: to the terminal itself. Questions are written to
stderr (stdout carries only the command's result) and answers read from
stdin, but when either is redirected (`2>log`, `< file`) and the process has
a terminal, that side is the terminal (`/dev/tty`) instead, so the person
sees the question and answers it where they sit. Without any terminal (a
script, CI, a process started in a session of its own) stdin and stderr are
used as they are: piped input answers one question a line, which is how the
command line is tested.

Keys typed before a question is shown are thrown away (the terminal's input
queue is flushed just before the question is written): a `y` typed while the
model was thinking must not approve a call nobody has seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TextIO, cast

from ..errors import EndOfInputError
from ..forms import FormField, form_fields
from ..messages import ToolCall
from ..questions import Answer, Question
from ..run.state import Decision

if TYPE_CHECKING:
    from ..flow.plan import Plan
    from ..flow.review import PlanDecision

__all__ = [
    "TerminalApprover",
    "TerminalInputHandler",
    "TerminalPlanReviewer",
    "ask_on_terminal",
    "read_line",
    "say",
    "terminal_available",
]


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # detached or closed
        return False


@contextlib.contextmanager
def _terminal() -> Iterator[tuple[TextIO, TextIO]]:
    """Where to read the answer and write the question: stdin and stderr, each replaced by the
    terminal (`/dev/tty`) when it is redirected and the process has one."""
    with contextlib.ExitStack() as opened:
        reader = _tty(opened, "r") if _redirected(sys.stdin) else None
        writer = _tty(opened, "w") if _redirected(sys.stderr) else None
        yield reader or sys.stdin, writer or sys.stderr


def _redirected(stream: TextIO) -> bool:
    """A file descriptor that is no terminal (`2>log`, `< file`, a pipe). A stream an application
    put in place of it (an `io.StringIO` of answers) has none, and is used as it is."""
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return False
    return not _isatty(stream)


def _tty(opened: contextlib.ExitStack, mode: str) -> TextIO | None:
    """The process's terminal opened for `mode`, closed with `opened`; None without one."""
    try:
        tty = open("/dev/tty", mode, encoding="utf-8", errors="replace")  # noqa: SIM115
        return cast(TextIO, opened.enter_context(tty))
    except OSError:  # no controlling terminal: a script, CI
        return None


def terminal_available() -> bool:
    """Whether a person can be asked: stdin is a terminal, or it is redirected and the process
    has a terminal all the same (`/dev/tty`, where the question then goes)."""
    if _isatty(sys.stdin):
        return True
    if not _redirected(sys.stdin):
        return False
    with contextlib.ExitStack() as opened:
        return _tty(opened, "r") is not None


def say(text: str) -> None:
    """Write `text` where questions are asked (the terminal, see the module's doc)."""
    with _terminal() as (_, writer):
        writer.write(text)
        writer.flush()


def _flush_typeahead(reader: TextIO) -> None:
    """Throw away what was typed on the terminal `reader` before now (nothing for a pipe)."""
    if not _isatty(reader):
        return
    import termios

    with contextlib.suppress(OSError, ValueError, termios.error):
        termios.tcflush(reader.fileno(), termios.TCIFLUSH)


async def read_line(prompt: str, *, out: TextIO | None = None) -> str:
    """Write `prompt` and read one line without blocking the event loop: on the terminal (see
    the module's doc), or on `out` and stdin when `out` is given. Keys typed before the prompt is
    shown are discarded. Returns the line without its newline; raises `EndOfInputError` (an
    `EOFError`) at end of input.
    """
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str] = loop.create_future()

    def deliver(line: str) -> None:
        if not answer.done():  # done: the run was cancelled while the human was typing
            answer.set_result(line)

    def ask(reader: TextIO, writer: TextIO) -> str:
        _flush_typeahead(reader)
        writer.write(prompt)
        writer.flush()
        return reader.readline()

    def read() -> None:
        try:
            if out is not None:
                line = ask(sys.stdin, out)
            else:
                with _terminal() as (reader, writer):
                    line = ask(reader, writer)
        except (OSError, ValueError):  # stdin closed or detached: as good as end of file
            line = ""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting any more
            loop.call_soon_threadsafe(deliver, line)

    threading.Thread(target=read, name="agentfsm-terminal", daemon=True).start()
    line = await answer
    if not line:
        raise EndOfInputError("stdin reached end of file")
    return line.rstrip("\n")


async def ask_on_terminal(question: str) -> str:
    """`ask_human`'s callback for the command line: the model's question, the person's answer."""
    return await read_line(f"\nBot: {question}\n\nYou: ")


class TerminalApprover:
    """An `Approver` that asks on the terminal, one call at a time: yes, no (with a reason), or edit.

    When stdin is closed, the calls still waiting are rejected ("no answer"),
    so a run without a person never runs a call that needs approval.
    `quiet`, if set, is entered around the questions (the live view stops drawing).
    """

    CHOICES = "approve? [y]es / [n]o / [e]dit the arguments: "

    def __init__(self) -> None:
        self.quiet: Callable[[], AbstractContextManager[object]] | None = None

    async def __call__(self, calls: Sequence[ToolCall]) -> list[Decision]:
        with self.quiet() if self.quiet is not None else contextlib.nullcontext():
            decisions: list[Decision] = []
            for call in calls:
                try:
                    decisions.append(await self._ask(call))
                except EOFError:
                    say("\n(input closed: the remaining calls are rejected)\n")
                    closed = Decision.reject("no answer: nobody was there to approve it")
                    decisions.extend(closed for _ in calls[len(decisions) :])
            return decisions

    async def _ask(self, call: ToolCall) -> Decision:
        say(f"\nApproval needed: {call.name}({call.arguments})  [{call.id}]\n")
        while True:
            choice = (await read_line(self.CHOICES)).strip().lower()
            if choice in ("y", "yes"):
                return Decision.approve()
            if choice in ("n", "no"):
                reason = (await read_line("reason for the model (optional): ")).strip()
                return Decision.reject(reason or None)
            if choice in ("e", "edit"):
                text = (await read_line("new arguments (a JSON object): ")).strip()
                try:
                    parsed = json.loads(text)
                except json.JSONDecodeError as exc:
                    say(f"not JSON ({exc}); asking again\n")
                    continue
                if not isinstance(parsed, dict):
                    say("the arguments must be a JSON object; asking again\n")
                    continue
                return Decision.approve(text)
            say(f"answer y, n or e (got {choice!r})\n")


class TerminalInputHandler:
    """An `InputHandler` that asks a tool's question on the terminal: each field its schema names,
    or [d]ecline / [c]ancel. A field's choices are listed, numbered (a multiple choice is answered
    as a comma-separated list of numbers or values), its default is shown and taken on an empty
    line, and each answer is checked against the field's schema (type, choices, bounds, length,
    format; a required field left empty) and asked again, saying why, when it does not fit. A URL
    question is shown, and accepted once the person says they opened it.

    When stdin is closed, the question is cancelled ("nobody was there"), so a run without a
    person goes on with the tool's answer to that. `quiet` is as `TerminalApprover`'s.
    """

    def __init__(self) -> None:
        self.quiet: Callable[[], AbstractContextManager[object]] | None = None

    async def __call__(self, call: ToolCall, question: Question) -> Answer:
        with self.quiet() if self.quiet is not None else contextlib.nullcontext():
            try:
                return await self._ask(call, question)
            except EOFError:
                say("\n(input closed: the question is cancelled)\n")
                return Answer.cancel()

    async def _ask(self, call: ToolCall, question: Question) -> Answer:
        say(f"\nInput needed by {call.name} [{call.id}]: {question.message}\n")
        if question.url is not None:
            say(f"open: {question.url}\n")
            while True:
                choice = (await read_line("done? [y]es / [d]ecline / [c]ancel: ")).strip().lower()
                if choice in ("y", "yes"):
                    return Answer.accept()
                if choice in ("d", "c", "decline", "cancel"):
                    return Answer.decline() if choice.startswith("d") else Answer.cancel()
                say(f"answer y, d or c (got {choice!r})\n")
        content: dict[str, Any] = {}
        say("(type d to decline, c to cancel)\n")
        for field in form_fields(question.schema):
            choices = field.choices
            if choices:
                how = "choose any, comma separated" if field.multiple else "choose one"
                listed = "  ".join(f"{number}) {label}" for number, (_, label) in enumerate(choices, 1))
                say(f"{field.title}, {how}: {listed}\n")
            prompt = f"{field.title} ({_described(field)}): "
            while True:
                text = (await read_line(prompt)).strip()
                if text in ("d", "c"):
                    return Answer.decline() if text == "d" else Answer.cancel()
                if not text:
                    if field.has_default:
                        content[field.name] = field.default
                        break
                    if not field.required:
                        break
                    say(f"{field.title} is required; asking again\n")
                    continue
                try:
                    content[field.name] = field.read(text)
                except ValueError as exc:
                    say(f"{exc}; asking again\n")
                    continue
                break
        return Answer.accept(content)


def _described(field: FormField) -> str:
    """What the prompt says of `field`: its type, whether it may be left empty, its default."""
    kind = "list" if field.multiple else field.kind
    if field.choices:
        kind = "numbers or values" if field.multiple else "number or value"
    parts = [kind]
    if field.has_default:
        default = field.default
        shown = ", ".join(map(str, default)) if isinstance(default, list) else json.dumps(default)
        parts.append(f"Enter for {shown}")
    elif not field.required:
        parts.append("optional")
    return ", ".join(parts)


class TerminalPlanReviewer:
    """A flow's `Reviewer` on the terminal: the plan, then approve, edit (new steps, one a line) or
    cancel. When stdin is closed, the plan is cancelled: a flow under review never runs a plan
    nobody saw. `quiet`, if set, is entered around the questions (the live view stops drawing)."""

    CHOICES = "run this plan? [a]pprove / [e]dit the steps / [c]ancel: "

    def __init__(self) -> None:
        self.quiet: Callable[[], AbstractContextManager[object]] | None = None

    async def __call__(self, plan: Plan) -> PlanDecision:
        from ..flow.review import PlanDecision

        with self.quiet() if self.quiet is not None else contextlib.nullcontext():
            say(f"\n{plan.render()}\n\n")
            try:
                while True:
                    choice = (await read_line(self.CHOICES)).strip().lower()
                    if choice in ("a", "approve", "y", "yes"):
                        return PlanDecision(kind="approve")
                    if choice in ("c", "cancel", "n", "no"):
                        return PlanDecision(kind="cancel")
                    if choice in ("e", "edit"):
                        return PlanDecision(kind="edit", steps=tuple(await self._steps()))
            except EndOfInputError:
                say("no answer: the plan is cancelled\n")
                return PlanDecision(kind="cancel")

    async def _steps(self) -> list[str]:
        """Steps to run instead of those not yet completed, one a line ([agent] tags), until an empty line."""
        say("the steps still to do, one a line ([agent] first), then an empty line:\n")
        steps: list[str] = []
        while line := (await read_line("> ")).strip():
            steps.append(line)
        return steps
