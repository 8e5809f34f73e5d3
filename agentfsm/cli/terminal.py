"""Questions to the person at the terminal: `ask_human`'s, approvals of tool calls, and a tool's questions.

Both read a line of stdin in a daemon thread, not `asyncio.to_thread`:
`asyncio.run` waits for the default executor's threads when it shuts down, so
a pending `input()` there would make Ctrl-C hang until Enter. A daemon thread
is left behind instead, and ends with the process. Prompts go to stderr,
because stdout carries only the command's result. Piped input works the same
way (one answer a line), which is how the command line is tested.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TextIO

from ..errors import EndOfInputError
from ..messages import ToolCall
from ..questions import Answer, Question
from ..run.state import Decision

if TYPE_CHECKING:
    from ..flow.plan import Plan
    from ..flow.review import PlanDecision

__all__ = ["TerminalApprover", "TerminalInputHandler", "TerminalPlanReviewer", "ask_on_terminal", "read_line"]


async def read_line(prompt: str, *, out: TextIO | None = None) -> str:
    """Write `prompt` on `out` (default stderr) and read one line of stdin without blocking
    the event loop. Returns the line without its newline; raises `EndOfInputError` (an
    `EOFError`) when stdin is closed.
    """
    stream = out if out is not None else sys.stderr
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str] = loop.create_future()

    def deliver(line: str) -> None:
        if not answer.done():  # done: the run was cancelled while the human was typing
            answer.set_result(line)

    def read() -> None:
        try:
            stream.write(prompt)
            stream.flush()
            line = sys.stdin.readline()
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
                    sys.stderr.write("\n(input closed: the remaining calls are rejected)\n")
                    closed = Decision.reject("no answer: nobody was there to approve it")
                    decisions.extend(closed for _ in calls[len(decisions) :])
            return decisions

    async def _ask(self, call: ToolCall) -> Decision:
        sys.stderr.write(f"\nApproval needed: {call.name}({call.arguments})  [{call.id}]\n")
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
                    sys.stderr.write(f"not JSON ({exc}); asking again\n")
                    continue
                if not isinstance(parsed, dict):
                    sys.stderr.write("the arguments must be a JSON object; asking again\n")
                    continue
                return Decision.approve(text)
            sys.stderr.write(f"answer y, n or e (got {choice!r})\n")


class TerminalInputHandler:
    """An `InputHandler` that asks a tool's question on the terminal: each field its schema names,
    or [d]ecline / [c]ancel. A URL question is shown, and accepted once the person says they
    opened it.

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
                sys.stderr.write("\n(input closed: the question is cancelled)\n")
                return Answer.cancel()

    async def _ask(self, call: ToolCall, question: Question) -> Answer:
        sys.stderr.write(f"\nInput needed by {call.name} [{call.id}]: {question.message}\n")
        if question.url is not None:
            sys.stderr.write(f"open: {question.url}\n")
            while True:
                choice = (await read_line("done? [y]es / [d]ecline / [c]ancel: ")).strip().lower()
                if choice in ("y", "yes"):
                    return Answer.accept()
                if choice in ("d", "c", "decline", "cancel"):
                    return Answer.decline() if choice.startswith("d") else Answer.cancel()
                sys.stderr.write(f"answer y, d or c (got {choice!r})\n")
        fields: dict[str, Any] = dict(question.schema.get("properties") or {})
        required = set(question.schema.get("required") or ())
        content: dict[str, Any] = {}
        sys.stderr.write("(type d to decline, c to cancel)\n")
        for name, spec in fields.items():
            while True:
                kind = spec.get("type", "string") if isinstance(spec, dict) else "string"
                mark = "" if name in required else ", optional"
                text = (await read_line(f"{spec.get('title', name)} ({kind}{mark}): ")).strip()
                if text in ("d", "c"):
                    return Answer.decline() if text == "d" else Answer.cancel()
                if not text and name not in required:
                    break
                value = _typed(text, kind)
                if value is None:
                    sys.stderr.write(f"not a {kind}: {text!r}; asking again\n")
                    continue
                content[name] = value
                break
        return Answer.accept(content)


def _typed(text: str, kind: str) -> Any:
    """`text` as a value of the JSON schema type `kind`, or None when it is not one."""
    if kind in ("integer", "number"):
        try:
            return int(text) if kind == "integer" else float(text)
        except ValueError:
            return None
    if kind == "boolean":
        return {"y": True, "yes": True, "true": True, "n": False, "no": False, "false": False}.get(
            text.lower()
        )
    return text


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
            print(f"\n{plan.render()}\n", file=sys.stderr, flush=True)
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
                print("no answer: the plan is cancelled", file=sys.stderr, flush=True)
                return PlanDecision(kind="cancel")

    async def _steps(self) -> list[str]:
        """Steps to run instead of those not yet completed, one a line ([agent] tags), until an empty line."""
        print("the steps still to do, one a line ([agent] first), then an empty line:", file=sys.stderr)
        steps: list[str] = []
        while line := (await read_line("> ")).strip():
            steps.append(line)
        return steps
