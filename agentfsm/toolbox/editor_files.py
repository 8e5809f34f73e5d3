"""Files in the sandbox as the editor sees them: confined access, `cat -n` lines, clipped output.

Every access goes through the sandbox (`resolve`, `read_file`, `write_file`,
`exec`), so the workspace confinement is the sandbox's, the same in Docker
and local mode. Lines are split on newlines only and counted like `cat -n`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import EditorError

if TYPE_CHECKING:
    from ..sandbox.base import Sandbox

__all__ = [
    "CLIPPED",
    "EditorError",
    "check_range",
    "clip",
    "kind_of",
    "listing",
    "marker",
    "numbered",
    "occurrences",
    "read_text",
    "resolve",
    "split_lines",
    "write_text",
]

CLIPPED = "<response clipped>"
_STAT_TIMEOUT = 30.0
_KIND_SCRIPT = (
    'if [ -d "$1" ]; then echo directory; elif [ -f "$1" ]; then echo file; '
    'elif [ -e "$1" ]; then echo "special file"; else echo missing; fi'
)


async def resolve(sandbox: Sandbox, path: str) -> str:
    try:
        return await sandbox.resolve(path)
    except PermissionError as exc:
        raise EditorError(f"{exc}. Use a path inside the workspace.") from None


async def kind_of(sandbox: Sandbox, path: str) -> str:
    """``file``, ``directory``, ``missing`` or ``special file`` (symlinks followed), in one command."""
    result = await sandbox.exec(["sh", "-c", _KIND_SCRIPT, "sh", path], timeout=_STAT_TIMEOUT)
    kind = result.stdout.strip()
    if result.exit_code != 0 or kind not in ("file", "directory", "missing", "special file"):
        problem = result.stderr.strip() or f"exit code {result.exit_code}"
        raise EditorError(f"Cannot inspect {path}: {problem}")
    return kind


async def read_text(sandbox: Sandbox, path: str, kind: str) -> str:
    if kind == "missing":
        raise EditorError(f"The path {path} does not exist. Please provide a valid path.")
    if kind == "directory":
        raise EditorError(
            f"The path {path} is a directory and only the `view` command can be used on directories"
        )
    if kind != "file":
        raise EditorError(f"The path {path} is a {kind}, not a regular file.")
    data = await sandbox.read_file(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EditorError(
            f"The file {path} is not UTF-8 text (byte {exc.start}); the editor only handles text: "
            "use `bash` or `python_execute` for binary files."
        ) from None


async def write_text(sandbox: Sandbox, path: str, text: str) -> None:
    try:
        await sandbox.write_file(path, text.encode("utf-8"))
    except PermissionError as exc:
        raise EditorError(f"{exc}. Use a path inside the workspace.") from None


async def listing(sandbox: Sandbox, path: str) -> str:
    """`find` two levels deep, hidden entries (and what is under them) left out, sorted."""
    argv = ["find", path, "-maxdepth", "2", "-mindepth", "1", "-name", ".*", "-prune", "-o", "-print"]
    result = await sandbox.exec(argv, timeout=_STAT_TIMEOUT)
    if result.exit_code != 0 and not result.stdout:
        raise EditorError(f"Cannot list {path}: {result.stderr.strip() or 'find failed'}")
    return "\n".join([path, *sorted(result.stdout.splitlines())])


def split_lines(text: str, *, keepends: bool = False) -> list[str]:
    """Lines as `cat -n` counts them: split on newlines only, no empty line after a final newline."""
    parts = text.split("\n")
    if keepends:
        return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    return parts[:-1] if parts[-1] == "" else parts


def occurrences(text: str, needle: str) -> list[int]:
    """Every start of `needle` in `text`, overlapping ones too (they make a match ambiguous)."""
    starts, at = [], text.find(needle)
    while at != -1:
        starts.append(at)
        at = text.find(needle, at + 1)
    return starts


def check_range(view_range: list[int], n_lines: int) -> tuple[int, int]:
    if len(view_range) != 2:
        raise EditorError("Invalid `view_range`. It should be a list of two integers.")
    first, last = view_range
    if not 1 <= first <= max(n_lines, 1):
        raise EditorError(
            f"Invalid `view_range`: {view_range}. Its first element `{first}` should be within the range "
            f"of lines of the file: {[1, n_lines]}"
        )
    if last == -1:
        return first, n_lines
    if last > n_lines:
        raise EditorError(
            f"Invalid `view_range`: {view_range}. Its second element `{last}` should be smaller than the "
            f"number of lines in the file: `{n_lines}`"
        )
    if last < first:
        raise EditorError(
            f"Invalid `view_range`: {view_range}. Its second element `{last}` should be larger or equal "
            f"than its first `{first}`"
        )
    return first, last


def marker(shown: str) -> str:
    return (
        f"{CLIPPED} ({shown}) <NOTE>To save on context only part of this output has been shown to you. "
        "Use `view_range`, or search with `grep -n` in `bash`, to see the lines you are looking for.</NOTE>"
    )


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + "\n" + marker(f"{limit} of {len(text)} characters shown")


def numbered(lines: list[str], what: str, first: int, *, total: int, limit: int) -> str:
    """`cat -n` of `lines` (numbered from `first`, of `total`), clipped at `limit` with a marker.

    Stops formatting at the limit, so a 10 MB file costs no more than a small one.
    """
    out = [f"Here's the result of running `cat -n` on {what}:\n"]
    size = len(out[0])
    for number, line in enumerate(lines, first):
        row = f"{number:6}\t{line}\n"
        room = limit - size
        if len(row) > room:
            if room < 2 * len(CLIPPED):  # no room left to show a useful part of this line
                return "".join(out) + marker(f"lines {first}-{number - 1} of {total} shown")
            cut = f"lines {first}-{number} of {total} shown, line {number} cut after {room} characters"
            return "".join(out) + row[:room] + "\n" + marker(cut)
        out.append(row)
        size += len(row)
    return "".join(out)
