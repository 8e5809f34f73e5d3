"""Sessions: a conversation kept between runs, and between processes, so that the next run goes on
from it (`BaseAgent.run(..., session=...)`, `agentfsm chat --session NAME`).

Why a store of memory and not of runs: a conversation is what the model is sent, the messages in
memory. A checkpoint keeps one run to resume it; a session keeps the messages all the runs of a
conversation left, so a new run (a new request, another process, a restarted app) starts from them:
the memory window and the model's token budget then apply across the conversation, as they do
within one run. The session is read before the run (its messages replace the agent's memory, when
it holds any) and written after it, however it ended (a cancelled turn keeps what it said).

`Session` is the protocol an app's own store implements (a database, a cache); `FileSession` keeps
one conversation in one JSON file (the `MemorySnapshot`), replaced whole at each save, off the event
loop: a kill leaves the old conversation or the new one, never half of one. Two processes writing one
session at once are not serialised: the last save wins.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Protocol, runtime_checkable

from ..errors import RecordingError, SessionError
from ..memory import MemorySnapshot
from .writer import off_loop

__all__ = ["FileSession", "Session", "session_file"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
"""A session's name, when it names a file in the sessions' folder: nothing a path could read otherwise."""


@runtime_checkable
class Session(Protocol):
    """A stored conversation: its messages read back before a run, written after it."""

    async def load(self) -> MemorySnapshot | None:
        """The conversation so far (None: none yet)."""
        ...

    async def save(self, memory: MemorySnapshot) -> None:
        """Keep `memory` as the conversation."""
        ...

    async def clear(self) -> None:
        """Forget the conversation."""
        ...


class FileSession:
    """A conversation in the JSON file at `path` (made, with its folder, at the first save)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"FileSession({str(self.path)!r})"

    async def load(self) -> MemorySnapshot | None:
        return await off_loop(self._read)

    async def save(self, memory: MemorySnapshot) -> None:
        text = memory.model_dump_json()
        await off_loop(lambda: self._write(text))

    async def clear(self) -> None:
        await off_loop(lambda: self.path.unlink(missing_ok=True))

    def _read(self) -> MemorySnapshot | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SessionError(f"cannot read the session {self.path}: {exc.strerror}") from None
        try:
            return MemorySnapshot.model_validate(json.loads(text))
        except ValueError as exc:  # not JSON, or not a conversation
            first = " ".join(str(exc).split())[:200]
            raise SessionError(
                f"the session {self.path} holds no conversation agentfsm wrote ({first}); "
                "remove it, or give another session"
            ) from None

    def _write(self, text: str) -> None:
        temporary = self.path.with_name(self.path.name + ".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(text, encoding="utf-8")
            os.replace(temporary, self.path)
        except OSError as exc:
            raise RecordingError(
                f"cannot write the session {self.path}: {exc.strerror}; give a folder you can write"
            ) from None


def session_file(name: str, folder: str | os.PathLike[str] | None = None) -> FileSession:
    """The session `name` in `folder` (None: ``$XDG_DATA_HOME/agentfsm/sessions``, by default
    ``~/.local/share/agentfsm/sessions``), as ``NAME.json``; `SessionError` for a name that is not
    1 to 128 letters, digits, ``-``, ``_`` and ``.`` (beginning with a letter or digit)."""
    if not _NAME.fullmatch(name):
        raise SessionError(
            f"session name {name!r} cannot name a file: use 1 to 128 letters, digits, '-', '_' and '.', "
            "beginning with a letter or digit"
        )
    if folder is None:
        data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
        folder = os.path.join(data, "agentfsm", "sessions")
    return FileSession(Path(folder) / f"{name}.json")
