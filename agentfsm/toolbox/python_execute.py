"""`python_execute`: run a Python snippet in the sandbox, as a process of its own.

Why in the sandbox rather than upstream's `exec` in a process forked from
the agent's: the code is the model's, so it runs where the sandbox's limits
hold (memory, processes, network, a read-only root in Docker), and a timeout
kills it for real. Each snippet is a child forked from the sandbox's Python
worker (`Sandbox.run_python`, `agentfsm.sandbox.worker`: started once per
sandbox, so a call costs a fork, not an interpreter start and an engine
exec); with an explicit `python` interpreter it is a new process of that
interpreter, the code sent on stdin. Either way the output is unbuffered, so
what was printed before a timeout or a crash is still seen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .sandboxed import SandboxProvider, as_provider, exec_text, exit_note, timeout_schema
from .tool import Tool, ToolResult

if TYPE_CHECKING:
    from ..sandbox.base import Sandbox

__all__ = ["PythonExecute"]

_DESCRIPTION = (
    "Executes Python code string. Note: Only print outputs are visible, function return values are "
    "not captured. Use print statements to see results. Each call runs as a new process in the "
    "workspace directory; stdout, stderr and any exception are returned, and the process is killed "
    "after `timeout` seconds."
)


class PythonExecute(Tool):
    """Run Python code in the sandbox the provider hands out (created on first use)."""

    name = "python_execute"
    description = _DESCRIPTION

    def __init__(
        self,
        sandbox: Sandbox | SandboxProvider,
        *,
        timeout: float | None = None,
        max_timeout: float = 600.0,
        python: str | None = None,
        max_output: int | None = None,
    ) -> None:
        """`timeout`: seconds when the model gives none (None: the sandbox's default); `max_timeout`:
        the most the model may ask for; `python`: an interpreter to start per call (None: the worker);
        `max_output`: characters of stdout and stderr together (None: the sandbox's limit per stream)."""
        if timeout is not None and not 0 < timeout <= max_timeout:
            raise ConfigError(
                f"`timeout` must be positive and at most `max_timeout` ({max_timeout!r}), got {timeout!r}"
            )
        parameters: dict[str, Any] = {
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "The Python code to execute."},
                "timeout": timeout_schema(timeout, max_timeout),
            },
            "required": ["code"],
        }
        super().__init__(parameters=parameters)
        self.provider = as_provider(sandbox)
        self.timeout = timeout
        self.python = python
        self.max_output = max_output

    async def execute(self, code: str, timeout: float | None = None) -> ToolResult:
        sandbox = await self.provider.get()
        seconds = timeout or self.timeout or sandbox.default_timeout
        if self.python is None:
            result = await sandbox.run_python(code, timeout=seconds)
        else:
            result = await sandbox.exec([self.python, "-u", "-"], timeout=seconds, stdin=code)
        text = exec_text(result, self.max_output)
        if result.timed_out:
            note = (
                f"Execution timeout after {seconds:g} seconds: the process was killed. "
                "Make the code finish sooner, or pass a larger `timeout`."
            )
            return ToolResult(error=f"{note}\n{text}" if text else note)
        if result.exit_code != 0:
            ended = f"Python failed ({exit_note(result.exit_code)})"
            return ToolResult(error=f"{ended}:\n{text}" if text else ended)
        return ToolResult(output=text)
