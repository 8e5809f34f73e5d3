"""`agentfsm chat`: a conversation with one agent at the terminal, its memory kept between turns.

Each line is a turn: a run of the agent on it (`run()`), whose memory goes on from the turn before,
so the memory window and the model's token budget apply across the conversation as they do within a
run. A turn has what `run` has: the live view, the streamed text (`--stream`), approvals and a
tool's questions asked on the terminal. `--session NAME` keeps the conversation in a session (a file
per session: `agentfsm.recording.session`) saved after every turn, so the next `chat --session NAME`
goes on from it. Ctrl-C in a turn cancels that turn (it ends `cancelled`, what it said is kept) and
the conversation goes on; Ctrl-D, end of input or ``/quit`` ends it. Lines are edited with readline
and come back with Up (the debugger's reader), and piped lines work the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from typing import TextIO

from ..agent.base import BaseAgent
from ..errors import AgentfsmError
from ..fsm.diagram import to_mermaid
from ..recording.session import FileSession, Session, session_file
from ..run.result import RunResult
from .debugger import read_stdin_line
from .driving import log_level, terminal_view
from .output import EXIT_OK, exit_interrupted, print_result, usage_error

__all__ = ["COMMANDS", "chat_command"]

COMMANDS = {
    "/reset": "forget the conversation (and the session's): the next turn starts afresh",
    "/diagram": "the agent's machine in Mermaid, its state highlighted",
    "/save": "save the conversation to the session now (it is saved after every turn)",
    "/usage": "tokens, model calls and cost of the conversation so far",
    "/quit": "end the chat (as Ctrl-D does)",
    "/help": "this list",
}


def chat_command(args: argparse.Namespace) -> int:
    """Talk to the agent the flags and configuration build (as `run` builds it) until end of input."""
    from . import log_setup
    from .building import command_agent

    if args.db and not args.session:
        return usage_error("--db keeps a session in the database: give --session NAME too")
    try:
        name, built, settings = command_agent(args)
        session = _session(args.session, args.db) if args.session else None
    except (ValueError, AgentfsmError) as exc:  # ConfigError, SessionError, MissingExtraError
        return usage_error(str(exc))
    except KeyboardInterrupt:
        return exit_interrupted()
    if not isinstance(built, BaseAgent):
        return usage_error(f"--agent {name} built a flow; chat talks to an agent: run the flow with `run`")
    secrets = settings.llm_for(name).secrets()
    with log_setup.configured(args.log_format, secrets=secrets, level=log_level(args)):
        return asyncio.run(Chat(built, session, stream=bool(args.stream)).talk())


def _session(given: str, db: str | None) -> Session:
    """The session `given` names: a row of the durable database at `db`, else a file by name (in the
    data folder), or the ``.json`` path given."""
    if db is not None:
        from ..durable.sessions import DatabaseSession  # SQLAlchemy, DBOS's, loaded only for --db

        return DatabaseSession(db, given)
    if given.endswith(".json"):
        return FileSession(given)
    return session_file(given)


class Chat:
    """The conversation's loop: read a line, run a turn or a command, until the end of input."""

    def __init__(
        self, agent: BaseAgent, session: Session | None, *, stream: bool, out: TextIO | None = None
    ) -> None:
        self.agent, self.session, self.stream = agent, session, stream
        self.out = out if out is not None else sys.stdout
        self.turns: list[RunResult] = []
        self.prompt = "you> " if sys.stdin.isatty() and self.out.isatty() else ""
        self.in_turn = False
        self.cancelled = False

    def interrupt(self) -> None:
        """Ctrl-C: in a turn, cancel it (it ends `cancelled`; the chat goes on); at the prompt, say
        how the chat ends."""
        if self.in_turn:
            self.cancelled = True
            asyncio.get_running_loop().create_task(self.agent.cancel())
        else:
            _say("Ctrl-D or /quit ends the chat")

    async def talk(self) -> int:
        if self.session is not None:
            saved = await self.session.load()
            if saved is not None and saved.messages:
                _say(f"{len(saved.messages)} messages of {self.session!r} go on")
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):  # no signals off the main thread
            loop.add_signal_handler(signal.SIGINT, self.interrupt)
        try:
            while (line := await read_stdin_line(self.prompt)) is not None:
                line = line.strip()
                if not line:
                    continue
                if line.startswith("/"):
                    if not await self.command(line):
                        break
                    continue
                await self.turn(line)
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signal.SIGINT)
            await self.agent.aclose()
            close = getattr(self.session, "close", None)  # a database's connections
            if close is not None:
                close()
        return EXIT_OK

    async def turn(self, line: str) -> None:
        """One run on `line`: Ctrl-C meanwhile cancels it, and the conversation goes on."""
        agent = self.agent
        printer = None
        if self.stream:
            from .stream import TokenPrinter

            printer = TokenPrinter(self.out, sys.stderr)
            unsubscribe = agent.on_event(printer)
        view = None if self.stream else terminal_view(agent, False)
        for asker in (getattr(agent, "approver", None), getattr(agent, "input_handler", None)):
            if asker is not None and view is not None and hasattr(asker, "quiet"):
                asker.quiet = view.suspended
        self.in_turn, self.cancelled = True, False
        try:
            with view if view is not None else contextlib.nullcontext():
                result = await agent.run(line, session=self.session)
        finally:
            self.in_turn = False
            if printer is not None:
                unsubscribe()
        cancelled = self.cancelled
        self.turns.append(result)
        if printer is not None:
            printer.finish(result, error_line=not cancelled)
        else:
            print_result(result, False, self.out, error_line=not cancelled)
        if cancelled:
            _say("the turn was cancelled; the conversation goes on (Ctrl-D ends it)")

    async def command(self, line: str) -> bool:
        """Run the command `line`; False when it ends the chat."""
        word = line.split()[0]
        if word == "/quit":
            return False
        if word == "/reset":
            self.agent.reset(clear_memory=True)
            if self.session is not None:
                await self.session.clear()
            _say("the conversation starts afresh")
        elif word == "/diagram":
            print(to_mermaid(self.agent.table, highlight=self.agent.fsm_state), file=self.out)
        elif word == "/save":
            if self.session is None:
                _say("no session to save to: start the chat with --session NAME")
            else:
                await self.session.save(self.agent.memory.snapshot())
                _say(f"saved to {self.session!r}")
        elif word == "/usage":
            spent = [turn.usage for turn in self.turns]
            tokens_in, tokens_out = sum(u.input_tokens for u in spent), sum(u.output_tokens for u in spent)
            costs = [u.cost_usd for u in spent if u.cost_usd is not None]
            cost = f", ${sum(costs):.4f}" if costs else ""
            calls = sum(u.llm_calls for u in spent)
            tokens = f"{tokens_in} in / {tokens_out} out tokens"
            _say(f"{len(self.turns)} turns: {tokens}, {calls} model calls{cost}")
        elif word == "/help":
            for name, what in COMMANDS.items():
                _say(f"{name:<9} {what}")
        else:
            _say(f"no command {word}; /help lists them")
        return True


def _say(text: str) -> None:
    print(f"({text})", file=sys.stderr, flush=True)
