"""What the system-touching tools share: a sandbox obtained lazily, and how an execution reads.

Why a provider rather than a sandbox: a container takes a second or more to
start and must not exist for a run that never touches the system. A tool holds
a `SandboxProvider` (typically the agent's `SandboxSession`, shared by all its
tools) and asks it for the sandbox inside `execute`, so the sandbox is created
on first use and every tool of one agent works in the same one.

The sandbox module is imported for type checking only: `import agentfsm` stays
free of the sandbox implementations (and of docker).
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..errors import WrongTypeError

if TYPE_CHECKING:
    from ..sandbox.base import ExecResult, Sandbox

__all__ = ["SandboxProvider", "as_provider", "exec_text", "exit_note", "timeout_schema"]


@runtime_checkable
class SandboxProvider(Protocol):
    """Anything that hands out the sandbox to use, creating it on the first call."""

    async def get(self) -> Sandbox: ...


class _Owned:
    """A provider for a sandbox the caller owns: started on first use, never closed by the tools."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    async def get(self) -> Sandbox:
        await self.sandbox.start()  # idempotent
        return self.sandbox


def as_provider(source: Sandbox | SandboxProvider) -> SandboxProvider:
    """`source` as a provider: a `SandboxSession` as it is, a bare `Sandbox` wrapped."""
    if isinstance(source, SandboxProvider):
        return source
    if callable(getattr(source, "exec", None)) and callable(getattr(source, "start", None)):
        return _Owned(source)
    raise WrongTypeError(
        f"expected a Sandbox or a sandbox provider (an object with `async get()`, e.g. a SandboxSession), "
        f"got {source!r}"
    )


def exec_text(result: ExecResult, limit: int | None = None) -> str:
    """stdout, then stderr under its own heading, so the model can tell them apart.

    With `limit`, the text fits in about that many characters and stderr keeps
    up to half of them: a traceback after a flood of output must still be seen.
    stdout keeps its head, stderr its tail (where the exception and the
    sandbox's notes are).
    """
    out, err = result.stdout.rstrip("\n"), result.stderr.strip("\n")
    if limit is not None and len(out) + len(err) > limit:
        err_room = min(len(err), limit // 2)
        out, err = _head(out, limit - err_room, "stdout"), _tail(err, err_room, "stderr")
    parts = [out] if out else []
    if err:
        parts.append("stderr:\n" + err)
    return "\n".join(parts)


def _head(text: str, room: int, name: str) -> str:
    if len(text) <= room:
        return text
    return f"{text[:room]}\n... [{name} clipped: {len(text) - room} of {len(text)} characters not shown]"


def _tail(text: str, room: int, name: str) -> str:
    if len(text) <= room:
        return text
    cut = len(text) - room
    return f"[{name} clipped: the first {cut} of {len(text)} characters not shown] ...\n{text[-room:]}"


def exit_note(exit_code: int | None) -> str:
    """How a process ended, in words (signals are negative locally, 128+n in a container shell)."""
    if exit_code is None:
        return "the process was killed"
    signal_number = -exit_code if exit_code < 0 else exit_code - 128 if exit_code > 128 else 0
    if signal_number:
        try:
            name = signal.Signals(signal_number).name
        except ValueError:
            name = f"signal {signal_number}"
        hint = " (the sandbox's memory or process limit may have been reached)" if name == "SIGKILL" else ""
        return f"the process was killed by {name}{hint}"
    return f"exit code {exit_code}"


def timeout_schema(default: float | None, maximum: float) -> dict[str, Any]:
    """The optional `timeout` parameter: seconds, bounded so a model cannot ask for a day."""
    shown = "the sandbox's timeout" if default is None else f"{default:g}"
    return {
        "type": "number",
        "exclusiveMinimum": 0,
        "maximum": maximum,
        "description": f"Optional. Seconds before the process is killed (default {shown}, "
        f"at most {maximum:g}).",
    }
