"""Who hears of a model call's retries: whoever asked for the call, through the call's context.

A retry happens deep inside an adapter (its `RetryPolicy`, under `ask_tool`), while the one who
wants to know (the run that asked, for its event stream) is above the `ChatModel` protocol, whose
`ask_tool` takes the request and nothing else. A listener argument on the protocol would break
every model that implements it (a user's, a durable run's wrapper, the test models); the call's
context reaches through all of them unchanged, and into the tasks an adapter starts (they copy
it). So the caller sets its listener in a context variable around the call (`retries_to`, undone
by `stop_retries`), and the policy, when an attempt failed and another follows, hands the
listener a `RetryNotice` before it waits. The caller sets one only when someone listens to it,
and the policy reads the variable only on a retry: a call nobody listens to costs nothing more,
and neither does an attempt that succeeds.

A call made while another's listener is set (a model that runs an agent inside its own call)
reports to that listener unless its own caller sets one.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass

__all__ = [
    "ERROR_TEXT_LIMIT",
    "RetryListener",
    "RetryNotice",
    "heard_by",
    "one_line",
    "retries_to",
    "stop_retries",
]

ERROR_TEXT_LIMIT = 300
"""Characters a retry's error text keeps at most (it is shown on a status line and put on spans)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryNotice:
    """An attempt of a call failed with a transient error, and the call is tried again after
    `wait_s` seconds."""

    attempt: int
    """The attempt that failed (1 for the first); the next one is `attempt + 1`."""
    error_type: str
    """The error's class name (``RateLimitError``, ``ProviderError``, ...)."""
    error: str
    """What the error says (``"ProviderError: HTTP 503: ..."``), on one line, at most
    `ERROR_TEXT_LIMIT` characters."""
    status_code: int | None
    """The HTTP status the server answered with, when it answered."""
    wait_s: float
    """Seconds before the next attempt (a Retry-After honoured, or the backoff)."""


RetryListener = Callable[[RetryNotice], None]
"""Called on the event loop, in the task of the call, before the wait: it must return at once."""

_LISTENER: ContextVar[RetryListener | None] = ContextVar("agentfsm_retry_listener", default=None)


def retries_to(listener: RetryListener) -> Token[RetryListener | None]:
    """Hand the retries of the calls made from here on, in this context, to `listener`; pass the
    token to `stop_retries` when the call is over."""
    return _LISTENER.set(listener)


def stop_retries(token: Token[RetryListener | None]) -> None:
    """Undo the `retries_to` that returned `token`."""
    _LISTENER.reset(token)


def heard_by() -> RetryListener | None:
    """The listener of the call being made in this context, or None."""
    return _LISTENER.get()


def one_line(text: str, limit: int = ERROR_TEXT_LIMIT) -> str:
    """`text` on one line (runs of white space made one space), cut to `limit` characters with an
    ellipsis: an error's message can hold a server's whole HTML page."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
