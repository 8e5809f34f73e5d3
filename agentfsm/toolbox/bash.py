"""`bash`: a command in the sandbox's persistent shell session.

The session (its working directory, its variables) lives in the sandbox, one
per sandbox, so every `Bash` tool sharing a sandbox shares the shell. A command
that runs past the timeout is killed and the session restarted; the
observation says so, because the model's `cd` and `export` are gone after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .sandboxed import SandboxProvider, as_provider, exec_text, exit_note
from .tool import Tool, ToolResult

if TYPE_CHECKING:
    from ..sandbox.base import Sandbox

__all__ = ["Bash"]

_DESCRIPTION = """Execute a bash command in the terminal.
* State persists between calls: the working directory and environment variables stay as the \
previous command left them. The command's stdin is empty: interactive programs get end of file.
* Long running commands: For commands that may run indefinitely, it should be run in the background \
and the output should be redirected to a file, e.g. command = `python3 app.py > server.log 2>&1 &`.
* Timeout: a command still running after {timeout} is killed and the shell session is \
restarted (working directory and environment variables are reset); run such commands in the background."""


class Bash(Tool):
    """Run shell commands in the sandbox the provider hands out (created on first use)."""

    name = "bash"

    def __init__(
        self,
        sandbox: Sandbox | SandboxProvider,
        *,
        timeout: float | None = None,
        max_output: int | None = None,
    ) -> None:
        """`timeout`: seconds before a command is killed and the session restarted (None: the
        sandbox's default); `max_output`: characters of stdout and stderr together (None: the
        sandbox's limit per stream)."""
        if timeout is not None and timeout <= 0:
            raise ConfigError(f"`timeout` must be a positive number of seconds or None, got {timeout!r}")
        parameters: dict[str, Any] = {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The bash command to execute."}},
            "required": ["command"],
        }
        shown = "the sandbox's timeout" if timeout is None else f"{timeout:g} seconds"
        super().__init__(description=_DESCRIPTION.format(timeout=shown), parameters=parameters)
        self.provider = as_provider(sandbox)
        self.timeout = timeout
        self.max_output = max_output

    async def execute(self, command: str) -> ToolResult:
        sandbox = await self.provider.get()
        seconds = self.timeout or sandbox.default_timeout
        result = await sandbox.bash(command, timeout=seconds)
        text = exec_text(result, self.max_output)
        if result.timed_out:
            note = (
                f"Command timed out after {seconds:g} seconds: it was killed and the shell session "
                "restarted, so the working directory and environment variables are reset. "
                "Run long commands in the background with their output redirected to a file."
            )
            return ToolResult(error=f"{note}\n{text}" if text else note)
        if result.exit_code not in (0, None):
            end = f"[{exit_note(result.exit_code)}]"
            text = f"{text}\n{end}" if text else end
        return ToolResult(output=text)
