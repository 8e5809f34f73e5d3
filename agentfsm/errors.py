"""The exceptions agentfsm raises, one class per kind of mistake, all in this one module.

Every class inherits `AgentfsmError`, and every exception agentfsm raises is one of
them, so one ``except AgentfsmError`` tells agentfsm's own exceptions from those of
the libraries beneath it. Each also subclasses the builtin it resembles, so callers
who catch ``ValueError``, ``KeyError`` or ``PermissionError`` keep working, and each
message names the offending value and how to fix it. This module imports nothing
from the package, so every layer (the machine, the tools, the sandbox, the agents,
the command line) can import it; the modules that raise a class re-export it where
users have imported it from (``agentfsm.sandbox.SandboxError``,
``agentfsm.agent.replay.ReplayError``...).

A few raises stay another library's or Python's own exception, because a protocol
asks for exactly that class (``tests/test_errors.py`` lists them):

- a module ``__getattr__`` (`agentfsm.lazy`) raises ``AttributeError``, as Python
  does for any missing module attribute;
- an abstract method raises ``NotImplementedError``;
- ``StopIteration`` and ``StopAsyncIteration`` end an iteration, ``CancelledError``
  and ``KeyboardInterrupt`` pass through as they came;
- ``AssertionError`` marks a state that cannot happen unless agentfsm itself is
  wrong, as an ``assert`` statement would;
- an exception raised again (``raise``, ``raise exc``), or one a test model was
  scripted to raise, is the original;
- a ``type=`` function of the command line's parser raises
  ``argparse.ArgumentTypeError``, which argparse turns into its usage error;
- the machine's event raises ``transitions.MachineError``, as `transitions` expects
  of an event; `MachineTable.take` turns it into `MachineSetupError`.

The exceptions of the libraries beneath (pydantic's ``ValidationError`` for a bad
`SandboxSettings`, the OS's own ``OSError`` from a file of a local sandbox) are
theirs, not agentfsm's.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "AgentBusyError",
    "AgentfsmError",
    "ArgumentError",
    "BrowserError",
    "CheckpointError",
    "CheckpointLeasedError",
    "ConfigError",
    "ConnectTimeout",
    "DetachedError",
    "EditorError",
    "EndOfInputError",
    "IndexOutOfRangeError",
    "InspectorError",
    "KeyNotFoundError",
    "LLMError",
    "MCPLoginError",
    "MCPServerError",
    "MCPTimeoutError",
    "MachineSetupError",
    "MissingExtraError",
    "NoSuchFileError",
    "NotAFileError",
    "NotFoundError",
    "OptionsSetupError",
    "OutputValidationError",
    "OutsideWorkspaceError",
    "PauseRun",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderTimeoutError",
    "RecordingError",
    "ReplayError",
    "RunningLoopError",
    "SandboxError",
    "SandboxPathError",
    "ScriptExhaustedError",
    "SearchConnectionError",
    "SearchError",
    "SearchTimeoutError",
    "SessionError",
    "TokenLimitExceeded",
    "ToolSetupError",
    "TraceError",
    "WrongPhaseError",
    "WrongTypeError",
    "WrongValueError",
]


class AgentfsmError(Exception):
    """The base of every exception class agentfsm defines: one ``except`` clause catches them all."""


class MachineSetupError(AgentfsmError, TypeError):
    """A machine table is inconsistent: unknown state, unreachable state, dead end."""


class ToolSetupError(AgentfsmError, ValueError):
    """A tool or tool collection is declared wrongly (duplicate name, bad schema)."""


class CheckpointError(AgentfsmError, ValueError):
    """A checkpoint that cannot be read, or that the resuming agent does not match."""


class CheckpointLeasedError(AgentfsmError, RuntimeError):
    """A checkpoint is leased by a run in progress (in another process, or in this one): a second
    run or resume of it is refused at once, so no tool runs twice. The message names the owner
    (pid, host, since when) and the fix."""


class TraceError(AgentfsmError, ValueError):
    """A trace that cannot be read: missing, not a trace, damaged, or of another schema version."""


class RecordingError(AgentfsmError, OSError):
    """A trace or a checkpoint cannot be written: a path that names a folder or a missing one
    (refused before the run starts), a full disk or a folder removed while the run goes on
    (the run ends in ERROR with this message)."""


class ConfigError(AgentfsmError, ValueError):
    """An option or setting has a value it does not take: in the configuration (file,
    environment or flags), or passed in code (a tool's `timeout`, a `SandboxSettings` field)."""


class OptionsSetupError(AgentfsmError, TypeError):
    """An `Options` record is declared wrongly: a subclass retypes an inherited option, or an
    option has bounds its type cannot have."""


class WrongValueError(AgentfsmError, ValueError):
    """A function or method was given a value it does not take, or arguments that do not go
    together: a `Breakpoint` on no state nor edge, an unknown diagram format, both `checkpoint`
    and `trace` to `resume`."""


class WrongTypeError(AgentfsmError, TypeError):
    """An object of the wrong kind where agentfsm needs one of its own: a pending call that is
    not a `ToolCall`, a sandbox that is not a `Sandbox` or a provider, an `llm` that is not a model."""


class NotFoundError(AgentfsmError, LookupError):
    """Something asked for by name, id or index is not there; raised as one of its two
    subclasses, `KeyNotFoundError` or `IndexOutOfRangeError`."""


class KeyNotFoundError(NotFoundError, KeyError):
    """No item of that name or id (a tool name, a tool call's id). The message reads as
    written, where a plain ``KeyError`` shows it quoted."""

    def __str__(self) -> str:
        return Exception.__str__(self)


class IndexOutOfRangeError(NotFoundError, IndexError):
    """An index past either end of a sequence (the observations of a step)."""


class MissingExtraError(AgentfsmError, ImportError):
    """A feature needs an optional dependency that is not installed; the message names the
    ``pip install 'agentfsm[...]'`` that adds it (or what to use instead)."""


class EndOfInputError(AgentfsmError, EOFError):
    """The command line read a line from stdin, but it was at end of file or closed;
    `ask_human` tells the model that no human answered."""


class AgentBusyError(AgentfsmError, RuntimeError):
    """`run()` or `reset()` was called while a run is in progress."""


class DetachedError(AgentfsmError, ReferenceError):
    """A part of an agent was used after the agent was freed (a tool runner kept without its
    agent): the agent owns its parts, and they refer back to it weakly."""


class RunningLoopError(AgentfsmError, RuntimeError):
    """`run_sync()` was called where an event loop already runs (async code, a notebook): it
    would have to start a second loop in the same thread, which asyncio refuses."""


class OutputValidationError(AgentfsmError, ValueError):
    """The model gave no valid final result for the agent's `output_type` within `output_retries`
    corrections: the run ends in ERROR with `output_retries`, this on `RunResult.exception`."""


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


class ConnectTimeout(AgentfsmError, TimeoutError):
    """No connection to the model's server within the bound (the first contact with `api_base`).

    Retried like any timeout, and as briefly as a server that has never answered; what the
    user reads is the `LLMError` it ends in, which names the URL.
    """


class ProviderError(LLMError):
    """One failed request to a provider's HTTP API, as `OpenAICompatible` sends it.

    It carries what the retry policy reads: the HTTP status and headers of the
    answer when a server answered (``Retry-After``), and the error body's `code`
    (``context_length_exceeded``). `RetryPolicy` retries it or not, and wraps
    the last one into the `LLMError` the caller sees.
    """

    def __init__(
        self,
        message: str,
        *,
        url: str,
        status_code: int | None = None,
        code: str | None = None,
        response_headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.url = url
        self.status_code = status_code
        self.code = code
        self.response_headers = response_headers


class ProviderConnectionError(ProviderError, ConnectionError):
    """No answer: the connection was refused, dropped, or the reply could not be read."""


class ProviderTimeoutError(ProviderError, TimeoutError):
    """No complete answer within the request's `timeout`."""


class MCPServerError(AgentfsmError, ConnectionError):
    """An MCP server cannot be reached, or stopped answering: it failed to start, refused the
    connection, or died (its process ended, its connection dropped)."""


class MCPTimeoutError(MCPServerError, TimeoutError):
    """An MCP server did not answer within its `timeout` (connecting, or one call)."""


class MCPLoginError(MCPServerError):
    """An MCP server behind OAuth has no usable tokens (never logged in, or its refresh was
    refused), or its authorization failed: the message names `agentfsm mcp login SERVER`, or
    (the client-credentials grant, which has no login) the credentials to check."""


class ScriptExhaustedError(AgentfsmError, RuntimeError):
    """A scripted test model was asked for more replies than it was given."""


class ArgumentError(AgentfsmError, ValueError):
    """Arguments that do not match a tool's parameter schema.

    Raised by `Tool.validate` before the tool runs; the agent reports it to
    the model as the call's observation, never as a crash.
    """


class EditorError(AgentfsmError):
    """A refusal for the model (bad path, bad arguments): becomes the observation's error text."""


class BrowserError(AgentfsmError, RuntimeError):
    """The browser itself failed: Chromium is missing or would not start, or it died. The browser
    tool reports it to the model as an observation; the next call starts a new browser."""


class SearchError(AgentfsmError, RuntimeError):
    """A web search failed: one backend's request (raised by an attempt, which the retries read),
    or the search as a whole, every configured backend tried (what ``web_search`` reports).

    Like `ProviderError`, an attempt's error carries what the retry policy reads: the HTTP status
    and headers of the answer when a service answered (``Retry-After``); and `fix`, what to change
    when it is the last word.
    """

    def __init__(
        self,
        message: str,
        *,
        backend: str,
        fix: str = "",
        status_code: int | None = None,
        response_headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.backend = backend
        self.fix = fix
        self.status_code = status_code
        self.response_headers = response_headers


class SearchConnectionError(SearchError, ConnectionError):
    """No answer from a search service: the connection was refused, dropped, or cut short."""


class SearchTimeoutError(SearchError, TimeoutError):
    """No complete answer from a search service within its `timeout`."""


class SandboxError(AgentfsmError, RuntimeError):
    """The sandbox itself failed (engine unreachable, image missing, container gone)."""


class SandboxPathError(AgentfsmError, OSError):
    """A path in the sandbox that cannot be read or written; the subclasses tell why, and the
    Docker sandbox raises this class itself when the container cannot resolve the path."""


class OutsideWorkspaceError(SandboxPathError, PermissionError):
    """The path leaves the sandbox's workspace (directly, or through a symlink): refused."""


class NoSuchFileError(SandboxPathError, FileNotFoundError):
    """No file at that path in the Docker sandbox's workspace (a local sandbox lets the OS's
    own ``FileNotFoundError`` through)."""


class NotAFileError(SandboxPathError, IsADirectoryError):
    """The path names the workspace directory itself, or something other than a regular file."""


class InspectorError(AgentfsmError, OSError):
    """The inspector cannot serve (its address is taken or not this machine's), or cannot show a
    recording it was given (the message is the one line its row shows)."""


class SessionError(AgentfsmError, ValueError):
    """A session's stored conversation cannot be read back (not one, damaged), or its name cannot
    name a file."""


class ReplayError(TraceError):
    """The trace cannot be replayed or drawn: unreadable, another schema, an edge the machine
    does not have, or the replay diverged from it."""
