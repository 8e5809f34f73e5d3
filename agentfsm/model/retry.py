"""How the model adapters decide what to retry, how long to wait, and what to tell the user.

Kept apart from the adapters so the policy can be read (and unit-tested) on its
own. Nothing here imports litellm: an exception can only be one of litellm's
classes once litellm is loaded, so the classifier looks the classes up in
`sys.modules` and treats everything as non-transient before that. Any other
error is read by what it carries: a `status_code`, the answer's
`response_headers`, a `code`, or being a `ConnectionError` / `TimeoutError`
(what `OpenAICompatible`'s `ProviderError`s carry and are).

The policy (SPEC, "Defined behaviour"): rate limits, timeouts, connection
errors and 5xx are transient and retried with exponential backoff that
honours Retry-After; a context-window error is never retried (it becomes
`TokenLimitExceeded`); every other error fails at once.
"""

from __future__ import annotations

import logging
import random
import re
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from ..errors import LLMError, TokenLimitExceeded
from ..log import event

__all__ = ["RetryPolicy", "describe", "is_context_window_error", "is_transient", "retry_after"]

T = TypeVar("T")

# litellm's transient classes, by name. 503 (ServiceUnavailableError) is not a
# subclass of InternalServerError, and Timeout is not a subclass of
# APIConnectionError, so each is listed; any other status >= 500 (502
# BadGatewayError, say) is caught by the status check in `is_transient`.
_TRANSIENT_NAMES = (
    "RateLimitError",
    "Timeout",
    "APIConnectionError",
    "InternalServerError",
    "ServiceUnavailableError",
)
_HEADER_ATTRIBUTES = ("litellm_response_headers", "response_headers")
"""Where an error keeps the headers of the answer it came with: litellm's, a `ProviderError`'s."""
_CONTEXT_CODES = frozenset({"context_length_exceeded", "context_window_exceeded"})
_JITTER = 0.1
"""Exponential waits get up to 10% random extra, so many clients don't retry in lockstep."""


def _litellm_classes(*names: str) -> tuple[type[BaseException], ...]:
    litellm = sys.modules.get("litellm")
    if litellm is None:
        return ()
    found = (getattr(litellm, name, None) for name in names)
    return tuple(cls for cls in found if isinstance(cls, type) and issubclass(cls, BaseException))


def status_of(exc: BaseException) -> int | None:
    """The HTTP status attached to the error (by litellm, or a `ProviderError`), if any."""
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def is_context_window_error(exc: BaseException) -> bool:
    """The provider says the prompt does not fit the model's window.

    litellm raises `ContextWindowExceededError` only when the message text
    matches its patterns; an OpenAI-style 400 whose body code is
    ``context_length_exceeded`` (what llmock and several compatible servers
    send) arrives as a plain `BadRequestError`, so the code is checked too.
    """
    if isinstance(exc, _litellm_classes("ContextWindowExceededError")):
        return True
    code = getattr(exc, "code", None)
    body = getattr(exc, "body", None)
    if code is None and isinstance(body, dict):
        code = body.get("code")
    return status_of(exc) == 400 and isinstance(code, str) and code in _CONTEXT_CODES


def is_transient(exc: BaseException) -> bool:
    """Worth another attempt: rate limit, timeout, connection error or any 5xx."""
    if is_context_window_error(exc):
        return False
    if isinstance(exc, (*_litellm_classes(*_TRANSIENT_NAMES), ConnectionError, TimeoutError)):
        return True
    status = status_of(exc)  # 502 is litellm's BadGatewayError, a class of its own
    return status is not None and (status == 429 or status >= 500)


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms`` wins over ``retry-after``)."""
    own = (getattr(exc, name, None) for name in _HEADER_ATTRIBUTES)
    for headers in (*own, _response_headers(exc)):
        if headers is None:
            continue
        for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
            try:
                value = headers.get(name)
            except Exception:  # a headers object we don't understand: ignore it
                value = None
            if value is None:
                continue
            try:
                seconds = float(value) / scale
            except (TypeError, ValueError):
                continue  # an HTTP date: rare from LLM providers; fall back to backoff
            if seconds >= 0:
                return seconds
    return None


def _response_headers(exc: BaseException) -> Any:
    try:
        return exc.response.headers  # type: ignore[attr-defined]
    except Exception:  # no response, or litellm's placeholder that raises on access
        return None


def describe(exc: BaseException) -> str:
    """``"Type: HTTP status: message"``, without litellm's repeated class-name prefixes."""
    name = type(exc).__name__
    message = str(getattr(exc, "message", None) or exc).strip()
    message = re.sub(r"^litellm\.\w+:\s*", "", message)  # "litellm.RateLimitError: RateLimitError: ..."
    message = message.removeprefix(f"{name}:").strip()
    status = status_of(exc)
    # litellm also sets a status on errors no server sent (408 for its own timeout, 400 for
    # an unknown provider, 500 for a refused connection); only an answer has headers.
    answered = any(getattr(exc, name, None) is not None for name in _HEADER_ATTRIBUTES)
    if status is not None and answered:
        return f"{name}: HTTP {status}: {message}"
    return f"{name}: {message}"


@dataclass(frozen=True)
class RetryPolicy:
    """`max_attempts` tries in all; waits grow as ``base * 2**(n-1)``, capped at `backoff_max`."""

    max_attempts: int
    backoff_base: float
    backoff_max: float

    def wait_for(self, attempt: int, exc: BaseException | None) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based).

        A provider's Retry-After is honoured exactly up to `backoff_max`, and cut to it beyond:
        `backoff_max` is the caller's bound on how long a run sits idle between two tries, and
        a server does not get to extend it (one asking for an hour would stall the run that
        long). The retry's warning says when and by how much a wait was cut (`cut_note`), so
        a caller who would rather wait raises `backoff_max`.
        """
        asked = retry_after(exc) if exc is not None else None
        if asked is not None:
            return min(asked, self.backoff_max)
        wait = min(self.backoff_base * 2.0 ** (attempt - 1), self.backoff_max)
        return min(wait * (1 + random.uniform(0, _JITTER)), self.backoff_max)

    def cut_note(self, asked: float) -> str | None:
        """What the retry's warning says of a Retry-After of `asked` seconds cut to `backoff_max`;
        None when it was honoured."""
        if asked <= self.backoff_max:
            return None
        return (
            f"the provider asked to wait {_seconds(asked)} s; waited `backoff_max` "
            f"({_seconds(self.backoff_max)} s), {_seconds(asked - self.backoff_max)} s less; "
            "raise `backoff_max` to honour it"
        )

    async def run(self, call: Callable[[], Awaitable[T]], *, model: str) -> tuple[T, int]:
        """Await `call()` until it succeeds or fails for good; return the result and the attempts used.

        Raises `TokenLimitExceeded` for a context-window error (after that one
        attempt) and `LLMError` for anything else, chained from the provider's
        error and naming the model, the error and the attempts made, because
        that message is what the user reads in `RunResult.error`.
        Cancellation propagates untouched.
        """
        attempts = 0

        async def attempt() -> T:
            nonlocal attempts
            attempts += 1
            return await call()

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome is not None else None
            return self.wait_for(state.attempt_number, exc)

        def log_retry(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            sleep = state.next_action.sleep if state.next_action is not None else None
            asked = retry_after(exc) if exc is not None else None
            extra: dict[str, Any] = {}
            if asked is not None:
                extra["retry_after_s"] = asked
                cut = self.cut_note(asked)
                if cut is not None:
                    extra["retry_after_cut"] = cut
            event(
                "llm_retry",
                level=logging.WARNING,
                model=model,
                attempt=state.attempt_number,
                max_attempts=self.max_attempts,
                wait_s=round(sleep, 3) if sleep is not None else None,
                error=describe(exc) if exc is not None else None,
                **extra,
            )

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_attempts),
            wait=wait,
            retry=retry_if_exception(is_transient),
            before_sleep=log_retry,
            reraise=True,
        )
        try:
            result: T = await retrying(attempt)
        except Exception as exc:
            if is_context_window_error(exc):
                raise TokenLimitExceeded(
                    f"{model}: the provider says the request exceeds the model's context window "
                    f"({describe(exc)})"
                ) from exc
            tries = f"{attempts} attempt" if attempts == 1 else f"{attempts} attempts"
            raise LLMError(f"{model}: {describe(exc)} (after {tries})") from exc
        return result, attempts


def _seconds(value: float) -> str:
    """Seconds as a person writes them: ``120``, ``0.25``, ``119.99``."""
    return f"{round(value, 3):g}"
