"""`str_replace_editor`: view, create and edit files in the sandbox's workspace.

Upstream's tool and wording (`cat -n` views, a 2-level directory listing, the
unique-match rule, per-file undo), with three differences on purpose:
- every file access goes through the sandbox (`resolve`, `read_file`,
  `write_file`), so a path that leaves the workspace, by ``..`` or by a
  symlink, is refused in Docker and local mode alike;
- files are edited verbatim (upstream expanded tabs in the whole file on every
  replacement), and the lines reported for several matches are those where
  each match starts, multi-line matches included;
- long output is clipped with a visible marker saying which lines were shown,
  without formatting the lines that are not.
The undo history is per sandbox: a new sandbox (the next run's) starts empty.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ConfigError, EditorError
from .editor_files import (
    check_range,
    clip,
    kind_of,
    listing,
    numbered,
    occurrences,
    read_text,
    resolve,
    split_lines,
    write_text,
)
from .sandboxed import SandboxProvider, as_provider
from .tool import Tool, ToolResult

if TYPE_CHECKING:
    from ..sandbox.base import Sandbox

__all__ = ["StrReplaceEditor"]

Command = Literal["view", "create", "str_replace", "insert", "undo_edit"]
COMMANDS: tuple[Command, ...] = ("view", "create", "str_replace", "insert", "undo_edit")
SNIPPET_LINES = 4

_DESCRIPTION = """Custom editing tool for viewing, creating and editing files
* State is persistent across command calls and discussions with the user
* If `path` is a file, `view` displays the result of applying `cat -n`. If `path` is a directory, \
`view` lists non-hidden files and directories up to 2 levels deep
* The `create` command cannot be used if the specified `path` already exists as a file
* If a `command` generates a long output, it will be truncated and marked with `<response clipped>`
* The `undo_edit` command will revert the last edit made to the file at `path`

Notes for using the `str_replace` command:
* The `old_str` parameter should match EXACTLY one or more consecutive lines from the original file. \
Be mindful of whitespaces!
* If the `old_str` parameter is not unique in the file, the replacement will not be performed. \
Make sure to include enough context in `old_str` to make it unique
* The `new_str` parameter should contain the edited lines that should replace the `old_str`"""

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {
            "description": "The commands to run. Allowed options are: "
            "`view`, `create`, `str_replace`, `insert`, `undo_edit`.",
            "enum": list(COMMANDS),
            "type": "string",
        },
        "path": {"description": "Absolute path to file or directory.", "type": "string"},
        "file_text": {
            "description": "Required parameter of `create` command, "
            "with the content of the file to be created.",
            "type": "string",
        },
        "old_str": {
            "description": "Required parameter of `str_replace` command "
            "containing the string in `path` to replace.",
            "type": "string",
        },
        "new_str": {
            "description": "Optional parameter of `str_replace` command containing the new string "
            "(if not given, no string will be added). Required parameter of `insert` command containing "
            "the string to insert.",
            "type": "string",
        },
        "insert_line": {
            "description": "Required parameter of `insert` command. "
            "The `new_str` will be inserted AFTER the line `insert_line` of `path`.",
            "type": "integer",
        },
        "view_range": {
            "description": "Optional parameter of `view` command when `path` points to a file. "
            "If none is given, the full file is shown. If provided, the file will be shown in the indicated "
            "line number range, e.g. [11, 12] will show lines 11 and 12. Indexing at 1 to start. "
            "Setting `[start_line, -1]` shows all lines from `start_line` to the end of the file.",
            "items": {"type": "integer"},
            "type": "array",
        },
    },
    "required": ["command", "path"],
}


class StrReplaceEditor(Tool):
    """View and edit files in the sandbox the provider hands out (created on first use)."""

    name = "str_replace_editor"
    description = _DESCRIPTION
    parameters = _PARAMETERS

    def __init__(
        self, sandbox: Sandbox | SandboxProvider, *, max_response: int = 16_000, max_undo: int = 20
    ) -> None:
        """`max_response`: characters of output before it is clipped; `max_undo`: edits kept per file."""
        if max_response < 100 or max_undo < 1:
            raise ConfigError(
                f"`max_response` must be at least 100 and `max_undo` at least 1, "
                f"got {max_response!r} and {max_undo!r}"
            )
        super().__init__()
        self.provider = as_provider(sandbox)
        self.max_response = max_response
        self.max_undo = max_undo
        self._history: dict[str, list[str]] = {}
        self._history_of: Sandbox | None = None
        self._lock = asyncio.Lock()  # read-modify-write of parallel calls must not interleave

    async def execute(
        self,
        command: Command,
        path: str,
        file_text: str | None = None,
        old_str: str | None = None,
        new_str: str | None = None,
        insert_line: int | None = None,
        view_range: list[int] | None = None,
    ) -> ToolResult:
        sandbox = await self.provider.get()
        if sandbox is not self._history_of:  # a new sandbox: the old one's files are gone
            self._history, self._history_of = {}, sandbox
        async with self._lock:
            try:
                full = await resolve(sandbox, path)
                kind = await kind_of(sandbox, full)
                if command == "view":
                    text = await self._view(sandbox, full, kind, view_range)
                elif command == "create":
                    text = await self._create(sandbox, full, kind, file_text)
                elif command == "str_replace":
                    text = await self._str_replace(sandbox, full, kind, old_str, new_str)
                elif command == "insert":
                    text = await self._insert(sandbox, full, kind, insert_line, new_str)
                else:
                    text = await self._undo(sandbox, full, kind)
            except EditorError as exc:
                return ToolResult(error=str(exc))
        return ToolResult(output=text)

    # -- the commands -------------------------------------------------------------

    async def _view(self, sandbox: Sandbox, path: str, kind: str, view_range: list[int] | None) -> str:
        if kind == "directory":
            if view_range is not None:
                raise EditorError(
                    "The `view_range` parameter is not allowed when `path` points to a directory."
                )
            entries = await listing(sandbox, path)
            head = (
                f"Here's the files and directories up to 2 levels deep in {path}, excluding hidden items:\n"
            )
            return clip(head + entries + "\n", self.max_response)
        lines = split_lines(await read_text(sandbox, path, kind))
        first, last = 1, len(lines)
        if view_range is not None:
            first, last = check_range(view_range, len(lines))
        return self._cat(lines[first - 1 : last], path, first, total=len(lines))

    async def _create(self, sandbox: Sandbox, path: str, kind: str, file_text: str | None) -> str:
        if file_text is None:
            raise EditorError("Parameter `file_text` is required for command: create")
        if kind != "missing":
            raise EditorError(
                f"File already exists at: {path}. Cannot overwrite files using command `create`."
            )
        await write_text(sandbox, path, file_text)
        return f"File created successfully at: {path}"

    async def _str_replace(
        self, sandbox: Sandbox, path: str, kind: str, old_str: str | None, new_str: str | None
    ) -> str:
        if not old_str:
            raise EditorError(
                "Parameter `old_str` is required for command: str_replace, and must not be empty"
            )
        text = await read_text(sandbox, path, kind)
        starts = occurrences(text, old_str)
        if not starts:
            raise EditorError(
                f"No replacement was performed, old_str `{old_str}` did not appear verbatim in {path}."
            )
        if len(starts) > 1:
            lines = [text.count("\n", 0, start) + 1 for start in starts]
            raise EditorError(
                "No replacement was performed. "
                f"Multiple occurrences of old_str `{old_str}` in lines {lines}. Please ensure it is unique"
            )
        new_str = new_str or ""
        start = starts[0]
        new_text = text[:start] + new_str + text[start + len(old_str) :]
        await self._save(sandbox, path, text, new_text)
        line = text.count("\n", 0, start)  # 0-based line where the replacement starts
        snippet = self._snippet(new_text, path, line, line + new_str.count("\n"))
        return (
            f"The file {path} has been edited. {snippet}"
            "Review the changes and make sure they are as expected. Edit the file again if necessary."
        )

    async def _insert(
        self, sandbox: Sandbox, path: str, kind: str, insert_line: int | None, new_str: str | None
    ) -> str:
        if insert_line is None:
            raise EditorError("Parameter `insert_line` is required for command: insert")
        if new_str is None:
            raise EditorError("Parameter `new_str` is required for command: insert")
        text = await read_text(sandbox, path, kind)
        lines = split_lines(text, keepends=True)
        if not 0 <= insert_line <= len(lines):
            raise EditorError(
                f"Invalid `insert_line` parameter: {insert_line}. It should be within the range of lines "
                f"of the file: {[0, len(lines)]}"
            )
        if insert_line == len(lines) and lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        block = new_str if new_str.endswith("\n") else new_str + "\n"
        new_text = "".join(lines[:insert_line]) + block + "".join(lines[insert_line:])
        await self._save(sandbox, path, text, new_text)
        snippet = self._snippet(new_text, path, insert_line, insert_line + block.count("\n") - 1)
        return (
            f"The file {path} has been edited. {snippet}"
            "Review the changes and make sure they are as expected (correct indentation, no duplicate "
            "lines, etc). Edit the file again if necessary."
        )

    async def _undo(self, sandbox: Sandbox, path: str, kind: str) -> str:
        history = self._history.get(path)
        if not history:
            raise EditorError(f"No edit history found for {path}.")
        if kind not in ("file", "missing"):
            raise EditorError(f"The path {path} is a {kind} now; cannot restore a file there.")
        previous = history.pop()
        await write_text(sandbox, path, previous)
        lines = split_lines(previous)
        return f"Last edit to {path} undone successfully. {self._cat(lines, path, 1, total=len(lines))}"

    # -- helpers --------------------------------------------------------------------

    async def _save(self, sandbox: Sandbox, path: str, old_text: str, new_text: str) -> None:
        await write_text(sandbox, path, new_text)
        history = self._history.setdefault(path, [])
        history.append(old_text)
        del history[: -self.max_undo]

    def _snippet(self, text: str, path: str, first: int, last: int) -> str:
        """Lines `first`..`last` (0-based) of `text` and a few around them, numbered."""
        lines = split_lines(text)
        start = max(0, first - SNIPPET_LINES)
        end = min(len(lines), last + SNIPPET_LINES + 1)
        return self._cat(lines[start:end], f"a snippet of {path}", start + 1, total=len(lines)) + "\n"

    def _cat(self, lines: list[str], what: str, first: int, *, total: int) -> str:
        return numbered(lines, what, first, total=total, limit=self.max_response)
