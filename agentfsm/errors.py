"""The exceptions agentfsm raises, one class per kind of mistake, all in this one module.

Every class inherits `AgentfsmError`, so one ``except AgentfsmError`` tells
agentfsm's own exceptions from those of the libraries beneath it. Each also
subclasses the builtin it resembles, so callers who catch ``ValueError`` or
``RuntimeError`` keep working, and each message names the offending value and
how to fix it. (A wrong argument to a constructor or method, such as
``max_steps=0`` or an unknown tool name, is still a plain ``ValueError``,
``TypeError`` or ``KeyError``.) This module imports nothing from the package,
so every layer (the machine, the tools, the sandbox, the agents, the command
line) can import it; the modules that raise a class re-export it where users
have imported it from (``agentfsm.sandbox.SandboxError``,
``agentfsm.agent.replay.ReplayError``...).
"""

from __future__ import annotations

__all__ = [
    "AgentBusyError",
    "AgentfsmError",
    "ArgumentError",
    "CheckpointError",
    "ConfigError",
    "EditorError",
    "LLMError",
    "MachineSetupError",
    "PauseRun",
    "ReplayError",
    "SandboxError",
    "ScriptExhaustedError",
    "TokenLimitExceeded",
    "ToolSetupError",
    "TraceError",
    "WrongPhaseError",
]


class AgentfsmError(Exception):
    """The base of every exception class agentfsm defines: one ``except`` clause catches them all."""


class MachineSetupError(AgentfsmError, TypeError):
    """A machine table is inconsistent: unknown state, unreachable state, dead end."""


class ToolSetupError(AgentfsmError, ValueError):
    """A tool or tool collection is declared wrongly (duplicate name, bad schema)."""


class CheckpointError(AgentfsmError, ValueError):
    """A checkpoint that cannot be read, or that the resuming agent does not match."""


class TraceError(AgentfsmError, ValueError):
    """A trace that cannot be read: missing, not a trace, damaged, or of another schema version."""


class ConfigError(AgentfsmError, ValueError):
    """The configuration (file, environment or flags) is wrong."""


class AgentBusyError(AgentfsmError, RuntimeError):
    """`run()` or `reset()` was called while a run is in progress."""


class WrongPhaseError(AgentfsmError, RuntimeError):
    """An edit between steps was asked for while the machine is not in the phase it applies to."""


class PauseRun(AgentfsmError):
    """Raised by a phase's action to stop driving the machine and leave it in that state.

    `run()` then returns a paused `RunResult` (state RUNNING, `stop_reason` = `reason`), and
    `agent.resume()` runs the phase again. AWAITING_APPROVAL pauses this way when no approver
    is set and calls are still undecided.
    """

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(message or reason)
        self.reason = reason


class TokenLimitExceeded(AgentfsmError):
    """The request does not fit: the model's input window or the run's token budget.

    Raised by the LLM adapter before sending (or when the provider reports a
    context-window error); the agent turns it into the `token_limit` edge.
    It is never retried.
    """


class LLMError(AgentfsmError, RuntimeError):
    """The LLM call failed for good: a non-transient error, or retries ran out."""


class ScriptExhaustedError(AgentfsmError, RuntimeError):
    """A scripted test model was asked for more replies than it was given."""


class ArgumentError(AgentfsmError, ValueError):
    """Arguments that do not match a tool's parameter schema.

    Raised by `Tool.validate` before the tool runs; the agent reports it to
    the model as the call's observation, never as a crash.
    """


class EditorError(AgentfsmError):
    """A refusal for the model (bad path, bad arguments): becomes the observation's error text."""


class SandboxError(AgentfsmError, RuntimeError):
    """The sandbox itself failed (engine unreachable, image missing, container gone)."""


class ReplayError(TraceError):
    """The trace cannot be replayed: unreadable, another schema, or the replay diverged from it."""
