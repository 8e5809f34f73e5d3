"""The terminal's modes as the command found them, put back on every way out.

Why: the debugger's prompt is GNU readline (`input()` with `readline`
loaded), which switches the terminal to its own modes (no canonical lines, no
echo, no CR to NL) while it reads, and back when the line is done. It reads in
a daemon thread (the event loop must go on, see `terminal.py`), and Ctrl-C is
delivered to the main thread, so a session interrupted at the prompt ends
while readline still holds the terminal: the shell, and the next program's
approval prompt, would get a terminal where Enter ends no line. Ctrl-D ends
readline's read itself; an exception or Ctrl-C does not, hence this guard
around the whole command.

`kept()` reads the modes of stdin's terminal on entry and, on exit, if they
changed, writes them back and turns off bracketed paste, which readline turns
on beside them. A process without a terminal has nothing to keep. Modes that did not change
are not written: a command left running in the background (`&`) would be stopped by the
terminal (SIGTTOU) for setting them.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["kept"]

_PASTE_OFF = "\x1b[?2004l"
"""Bracketed paste off (xterm's private mode 2004), as readline writes it when a line is done."""


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """Put the terminal's modes (stdin's, when it is one) back as they were on entry, however the
    block ends: a return, an exception, Ctrl-C."""
    fd, modes = _modes()
    try:
        yield
    finally:
        if modes is not None:
            _restore(fd, modes)


def _modes() -> tuple[int, list[Any] | None]:
    """stdin's descriptor and its terminal's modes; None when it is no terminal."""
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):  # replaced (io.StringIO), closed or detached
        return -1, None
    if not os.isatty(fd):
        return fd, None
    import termios

    try:
        return fd, termios.tcgetattr(fd)
    except termios.error:
        return fd, None


def _restore(fd: int, modes: list[Any]) -> None:
    import termios

    with contextlib.suppress(OSError, termios.error):  # the terminal went away (a hang-up)
        if termios.tcgetattr(fd) == modes:
            return
        termios.tcsetattr(fd, termios.TCSANOW, modes)
        if os.environ.get("TERM", "dumb") != "dumb" and os.isatty(fd):
            os.write(fd, f"{_PASTE_OFF}\r\n".encode())  # and the next line starts at the margin
