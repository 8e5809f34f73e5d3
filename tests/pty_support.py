"""The command on a real pseudo-terminal: what a person at a terminal sees and types.

`Terminal` starts the command with stdin, stdout and stderr on the pty's
child side (a window 120 columns wide), reads what it draws, and types keys.
`pieces()` cuts what was drawn where the terminal starts a new line or
redraws one (newline, carriage return, erase line, cursor up), with the
colour codes removed: each piece is what one line of the screen held at
some moment, so text glued onto a status line shows up inside one piece.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Mapping, Sequence
from typing import IO

_CUT = re.compile(rb"\r\n|\r|\n|\x1b\[2K|\x1b\[\d*A|\x1b\[\d*F")
_ESCAPE = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def _foreground(tty: int) -> None:
    """In the child, before the command starts: make the pty its controlling terminal, and give
    SIGINT and SIGQUIT their default actions, as a shell does for a job it runs in the foreground.
    A program started in the background by a shell without job control (a CI script's `cmd &`)
    inherits them ignored, and Ctrl-C would then do nothing to the command under test."""
    fcntl.ioctl(tty, termios.TIOCSCTTY, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


class Terminal:
    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stderr: IO[bytes] | None = None,
        stdin: IO[bytes] | None = None,
        stdout: IO[bytes] | None = None,
    ):
        """`stderr`, `stdin`, `stdout`: files to redirect the command's stderr (`2>file`), stdin
        (`<file`) or stdout (`>file`) to instead of the terminal, which stays its controlling
        terminal (`/dev/tty`)."""
        self.main, child = pty.openpty()
        fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.proc = subprocess.Popen(
            list(argv),
            stdin=stdin if stdin is not None else child,
            stdout=stdout if stdout is not None else child,
            stderr=stderr if stderr is not None else child,
            env={**(env if env is not None else os.environ), "COLUMNS": "120", "LINES": "40"},
            cwd=cwd,
            start_new_session=True,  # the pty becomes its controlling terminal: /dev/tty is the pty
            preexec_fn=lambda: _foreground(child),
        )
        os.close(child)
        self.seen = bytearray()

    def read_until(self, marker: bytes | str, timeout: float = 60.0, *, since: int = 0) -> bytes:
        """Read until `marker` appears after offset `since`; fail with what was seen if it does not."""
        wanted = marker.encode() if isinstance(marker, str) else marker
        deadline = time.monotonic() + timeout
        while wanted not in self.seen[since:]:
            left = deadline - time.monotonic()
            assert left > 0, f"no {wanted!r} within {timeout} s; got:\n{self.text()}"
            if not self._read(left):
                assert wanted in self.seen[since:], f"the command ended without {wanted!r}:\n{self.text()}"
        return bytes(self.seen)

    def read_for(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if not self._read(left):
                time.sleep(left)
                return

    def _read(self, timeout: float) -> bool:
        """Read what is there within `timeout`; False once the command closed the terminal."""
        ready, _, _ = select.select([self.main], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.main, 65536)
        except OSError:  # the child closed the terminal
            return False
        self.seen.extend(chunk)
        return bool(chunk)

    def type(self, keys: bytes | str) -> None:
        os.write(self.main, keys.encode() if isinstance(keys, str) else keys)

    def wait(self, timeout: float = 60.0) -> int:
        """Read to the end, then the exit status."""
        deadline = time.monotonic() + timeout
        while self._read(max(0.01, deadline - time.monotonic())) and self.proc.poll() is None:
            assert time.monotonic() < deadline, f"still running after {timeout} s:\n{self.text()}"
        self.read_for(0.2)
        return self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))

    def modes(self) -> dict[str, bool]:
        """The terminal's line discipline as a person meets it: canonical lines (Enter ends a line),
        echo, and CR read as NL (what Enter sends). Read on the pty's own side, so it also works
        once the command has exited."""
        iflag, _, _, lflag, *_ = termios.tcgetattr(self.main)
        return {
            "icanon": bool(lflag & termios.ICANON),
            "echo": bool(lflag & termios.ECHO),
            "icrnl": bool(iflag & termios.ICRNL),
        }

    def text(self) -> str:
        return bytes(self.seen).decode(errors="replace")

    def pieces(self, since: int = 0) -> list[str]:
        raw = _ESCAPE.sub(b"", _CUT.sub(b"\n", bytes(self.seen[since:])))
        return [piece for piece in raw.decode(errors="replace").split("\n") if piece.strip()]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.main)
