"""The exceptions agentfsm raises, one class per kind of mistake.

Each subclasses the builtin it resembles, so callers who catch ``ValueError``
or ``RuntimeError`` keep working, and each message names the offending value
and how to fix it.
"""

from __future__ import annotations

__all__ = [
    "AgentBusyError",
    "CheckpointError",
    "ConfigError",
    "LLMError",
    "MachineSetupError",
    "PauseRun",
    "ScriptExhaustedError",
    "TokenLimitExceeded",
    "ToolSetupError",
    "TraceError",
    "WrongPhaseError",
]


class MachineSetupError(TypeError):
    """A machine table is inconsistent: unknown state, unreachable state, dead end."""


class ToolSetupError(ValueError):
    """A tool or tool collection is declared wrongly (duplicate name, bad schema)."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be read, or that the resuming agent does not match."""


class TraceError(ValueError):
    """A trace that cannot be read: missing, not a trace, damaged, or of another schema version."""


class ConfigError(ValueError):
    """The configuration (file, environment or flags) is wrong."""


class AgentBusyError(RuntimeError):
    """`run()` or `reset()` was called while a run is in progress."""


class WrongPhaseError(RuntimeError):
    """An edit between steps was asked for while the machine is not in the phase it applies to."""


class PauseRun(Exception):
    """Raised by a phase's action to stop driving the machine and leave it in that state.

    `run()` then returns a paused `RunResult` (state RUNNING, `stop_reason` = `reason`), and
    `agent.resume()` runs the phase again. AWAITING_APPROVAL pauses this way when no approver
    is set and calls are still undecided.
    """

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(message or reason)
        self.reason = reason


class TokenLimitExceeded(Exception):
    """The request does not fit: the model's input window or the run's token budget.

    Raised by the LLM adapter before sending (or when the provider reports a
    context-window error); the agent turns it into the `token_limit` edge.
    It is never retried.
    """


class LLMError(RuntimeError):
    """The LLM call failed for good: a non-transient error, or retries ran out."""


class ScriptExhaustedError(RuntimeError):
    """A scripted test model was asked for more replies than it was given."""
