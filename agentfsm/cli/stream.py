"""`agentfsm run --stream`: the model's text on stdout as it arrives, and nothing else there.

A listener on the run's events, like the live view: each `TextDelta` is written to stdout and
flushed at once; a turn's text ends with a line break. The run's summary (state, stop reason,
usage) goes to stderr, so stdout holds the model's words alone, ready to be piped.

Text already printed cannot be taken back: when a stream breaks mid-way and the call is tried
again (`TextDelta.attempt` grows), the printed part stays, a line break ends it, a note on stderr
says the reply is being asked for again, and the new attempt's text follows on a line of its own.
A retry itself (`LLMRetry`) writes nothing here: stdout is the answer's, and the retry's
``llm_retry`` warning is on stderr.
"""

from __future__ import annotations

from typing import TextIO

from ..run.events import AgentEvent, TextDelta, Transition
from ..run.result import RunResult
from .output import summary_line
from .parser import PROG

__all__ = ["TokenPrinter"]


class TokenPrinter:
    """Writes the text of a streaming model to `out` as it comes; `err` gets the notes and the summary."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out, self.err = out, err
        self._open = False
        """Whether the current turn's text has been started on `out` (and needs its line break)."""
        self._attempt = 1

    def __call__(self, event: AgentEvent) -> None:
        if isinstance(event, TextDelta):
            if event.attempt != self._attempt:
                self._attempt = event.attempt
                self._end_line()
                print(f"{PROG}: the model's reply broke off; asking again", file=self.err, flush=True)
            self.out.write(event.text)
            self.out.flush()
            self._open = True
        elif isinstance(event, Transition):  # the turn is over (or never streamed)
            self._attempt = 1
            self._end_line()

    def _end_line(self) -> None:
        if self._open:
            self.out.write("\n")
            self.out.flush()
            self._open = False

    def finish(self, result: RunResult, *, error_line: bool = True) -> None:
        """After the run: close the last line, and write the summary (and any error, unless
        `error_line` is False: see `print_result`) to `err`."""
        self._end_line()
        print(summary_line(result), file=self.err, flush=True)
        if result.error and error_line:
            print(f"{PROG}: error: {result.error}", file=self.err, flush=True)
