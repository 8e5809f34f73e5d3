"""What the recorders share about their files: the path type, one JSON line, and write errors.

A trace and a checkpoint are both JSON Lines written while a run goes on, so
both refuse a path they could not write before the run starts, write lone
surrogates escaped, and end a run whose write failed with the same message.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from ..errors import RecordingError

__all__ = ["RecordPath", "check_writable", "escape_surrogates", "json_line", "write_failed"]

RecordPath = str | os.PathLike[str]
"""A trace's, a checkpoint's or a lease's file."""
_SURROGATE = re.compile("[\ud800-\udfff]")
_ENCODER = json.JSONEncoder(ensure_ascii=False, check_circular=False)
"""The encoder of every record, made once: `json.dumps` with an option makes one for each call.
Records are built of JSON values (dumps of the engine's types, plain dicts and lists), so none
holds itself and the check for cycles is skipped. The output is `json.dumps(record,
ensure_ascii=False)`'s, byte for byte; the two savings are about a fifth of the encoding of a
short run's trace (13 records, 7 KB: 70 against 90 microseconds)."""


def json_line(record: dict[str, Any]) -> str:
    """`record` as one line of JSON, in UTF-8 as written (not escaped to ASCII: half the size for
    most scripts, and readable)."""
    return _ENCODER.encode(record) + "\n"


def json_text(value: Any) -> str:
    """`value` as JSON, encoded as `json_line` encodes a record."""
    return _ENCODER.encode(value)


def escape_surrogates(line: str) -> str:
    """`line` (JSON) with each lone surrogate written as its escape (``\\ud800``).

    Why: a model's output may hold one (a provider that cuts a character in
    two), UTF-8 cannot encode it, and the write would fail; inside a JSON
    string its escape is valid and reads back as the same character, so a
    replay stays exact. Called only when encoding failed, so it costs nothing
    otherwise. (Surrogates only occur inside JSON strings: the rest is ASCII.)
    """
    return _SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", line)


def check_writable(path: RecordPath, what: str) -> None:
    """Refuse, before a run starts, a `path` the `what` ("trace", "checkpoint") could not be written
    to: a folder, a file in a missing folder, one without permission. `RecordingError`."""
    name = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(name))
    if os.path.isdir(name):
        problem = "it is a directory; name a file in it"
    elif not os.path.isdir(folder):
        problem = f"no such folder {folder}; create it first, or name a file in an existing one"
    elif not os.access(name if os.path.exists(name) else folder, os.W_OK):
        problem = "permission denied; name a file you may write"
    else:
        return
    raise RecordingError(f"cannot write the {what} {name}: {problem}")


def write_failed(what: str, path: RecordPath, exc: OSError) -> RecordingError:
    """The error a run ends with when a write of its `what` failed: the file and the OS's cause."""
    cause = exc.strerror or str(exc)
    return RecordingError(
        f"cannot write the {what} {os.fspath(path)}: {cause} (errno {exc.errno}); "
        "free space or restore the folder, then resume or run again"
    )
