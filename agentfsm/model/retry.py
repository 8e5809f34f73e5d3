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
`TokenLimitExceeded`); every other error fails at once. Three rules make
mistakes fail in seconds rather than after minutes of retries, each saying why:

- a refused or missing credential (401, 403, or the SDK's "missing API key"
  raised before anything is sent, which litellm reports as a 500 or a
  connection error) is never retried: no wait makes a wrong key right;
- a server that cannot be connected to (refused, unknown host, connect
  timeout) gets `UNREACHABLE_ATTEMPTS` tries, not `max_attempts`, while it
  has never answered this policy: a wrong URL or a server that is not
  started is far likelier than one restarting, and the message names the
  URL. Once it has answered, a lost connection is retried in full (the
  server restarting mid-run is then the likely story);
- `retry_timeout` bounds the whole call, from its first request: no retry
  starts, no wait ends, and no attempt goes on past it (an attempt still
  waiting for its first byte, or reading a stream that trickles or stalls, is
  cut at the deadline and ends the call with a `ProviderTimeoutError` saying
  so), and a Retry-After longer than what is left ends the retries with a
  message saying so (waiting would only end in the same error, later). The
  attempt is cut here, not by the HTTP client, because a client's timeout may
  be per read (litellm's is: a server sending a chunk a second never times
  out) and no client knows about the retries before it.

Each retry is logged (``llm_retry``, a warning) and told to whoever asked for the call, before
the wait (`agentfsm.model.retry_report`): a run turns it into an `LLMRetry` event.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from ..errors import LLMError, ProviderTimeoutError, TokenLimitExceeded
from ..log import event
from .retry_report import RetryNotice, heard_by, one_line

__all__ = [
    "UNREACHABLE_ATTEMPTS",
    "RetryPolicy",
    "answered_status",
    "describe",
    "is_context_window_error",
    "is_credential_error",
    "is_transient",
    "retry_after",
    "unreachable",
]

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
UNREACHABLE_ATTEMPTS = 2
"""Tries of a call whose server cannot be connected to and has never answered this policy."""
_CREDENTIAL_NAMES = ("AuthenticationError", "PermissionDeniedError")
# What the SDKs say when no key was given, before anything is sent (OpenAI's "Missing credentials",
# litellm's "Missing Gemini API key", "Missing Anthropic API Key", "api_key client option must be set").
_NO_KEY = re.compile(r"missing (credentials|\w+ api key|api[ _]key)|api_key client option must be set", re.I)
# The classes of the HTTP clients under litellm (httpx, aiohttp) that mean "no connection was made".
_CONNECT_NAMES = frozenset(
    {"ConnectError", "ConnectTimeout", "ClientConnectorError", "ConnectionTimeoutError"}
)


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


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and the errors it was raised from (``__cause__``, else ``__context__``)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def is_credential_error(exc: BaseException) -> bool:
    """The provider refused the credentials (401, 403), or the SDK found none to send."""
    if isinstance(exc, _litellm_classes(*_CREDENTIAL_NAMES)) or status_of(exc) in (401, 403):
        return True
    return any(_NO_KEY.search(str(err)) for err in _chain(exc))


def unreachable(exc: BaseException) -> tuple[str, str | None] | None:
    """``(reason, url)`` when no connection to the server could be made, else None.

    The reason is the socket's ("connection refused", "unknown host", "connect timed out");
    the URL is the one the HTTP client tried, without its query (Gemini's key travels there)
    or user info, when the client says it.
    """
    found = False
    reason = "cannot connect"
    url: str | None = None
    for err in _chain(exc):
        if type(err).__name__ in _CONNECT_NAMES:
            found = True
            url = url or _request_url(err)  # litellm's own errors carry a placeholder request
        elif isinstance(err, ConnectionRefusedError | socket.gaierror):
            found = True
        if isinstance(err, ConnectionRefusedError):
            reason = "connection refused"
        elif isinstance(err, socket.gaierror):
            reason = "unknown host"
        elif type(err).__name__ in ("ConnectTimeout", "ConnectionTimeoutError"):
            reason = "connect timed out"
    return (reason, url) if found else None


def _request_url(err: BaseException) -> str | None:
    try:
        url = err.request.url  # type: ignore[attr-defined]  # httpx's errors carry their request
    except Exception:
        return None
    text = str(url)
    if not text.startswith(("http://", "https://")):
        return None
    scheme, _, rest = text.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}://{host.rpartition('@')[2]}{slash}{path.split('?')[0].split('#')[0]}"


def is_transient(exc: BaseException) -> bool:
    """Worth another attempt: rate limit, timeout, connection error or any 5xx."""
    if is_context_window_error(exc) or is_credential_error(exc):
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


def answered_status(exc: BaseException) -> int | None:
    """The HTTP status a server answered with, or None when no server answered: litellm also
    sets a status on errors no server sent (408 for its own timeout, 400 for an unknown
    provider, 500 for a refused connection or a stream cut mid-way); only an answer has headers."""
    status = status_of(exc)
    if status is None or not any(getattr(exc, name, None) is not None for name in _HEADER_ATTRIBUTES):
        return None
    return status


def describe(exc: BaseException) -> str:
    """``"Type: HTTP status: message"``, without litellm's repeated class-name prefixes."""
    name = type(exc).__name__
    message = str(getattr(exc, "message", None) or exc).strip()
    message = re.sub(r"^litellm\.\w+:\s*", "", message)  # "litellm.RateLimitError: RateLimitError: ..."
    message = message.removeprefix(f"{name}:").strip()
    status = answered_status(exc)
    if status is not None:
        return f"{name}: HTTP {status}: {message}"
    return f"{name}: {message}"


@dataclass
class RetryPolicy:
    """`max_attempts` tries in all; waits grow as ``base * 2**(n-1)``, capped at `backoff_max`;
    `retry_timeout` seconds in all (None: no bound). One policy per adapter: it remembers whether
    its server ever answered (see the module's docstring)."""

    max_attempts: int
    backoff_base: float
    backoff_max: float
    retry_timeout: float | None = None
    answered: bool = field(default=False, init=False, compare=False)
    """Whether any attempt through this policy reached the server (a reply, or an HTTP error)."""

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

    def stop_reason(self, attempt: int, exc: BaseException, elapsed: float, wait: float) -> str | None:
        """Why no further attempt follows failed attempt `attempt`, `elapsed` seconds into the
        call, with a wait of `wait` seconds ahead; None to go on. The reason ends the error."""
        tries = f"{attempt} attempt" if attempt == 1 else f"{attempt} attempts"
        if attempt >= self.max_attempts:
            return f"after {tries}"
        if not self.answered and unreachable(exc) is not None and attempt >= UNREACHABLE_ATTEMPTS:
            return f"after {tries}; the server has never answered: check the URL and that it is running"
        if self.retry_timeout is not None and elapsed + wait >= self.retry_timeout:
            left = max(self.retry_timeout - elapsed, 0.0)
            asked = retry_after(exc)
            if asked is not None and min(asked, self.backoff_max) > left:
                return (
                    f"after {tries}; the provider asked to wait {_seconds(asked)} s, more than the "
                    f"{_seconds(left)} s left of `retry_timeout` ({_seconds(self.retry_timeout)} s): "
                    "raise `retry_timeout` to wait"
                )
            return f"after {tries}; `retry_timeout` ({_seconds(self.retry_timeout)} s) spent"
        return None

    async def run(
        self, call: Callable[[], Awaitable[T]], *, model: str, url: str | None = None
    ) -> tuple[T, int]:
        """Await `call()` until it succeeds or fails for good; return the result and the attempts used.

        Raises `TokenLimitExceeded` for a context-window error (after that one
        attempt) and `LLMError` for anything else, chained from the provider's
        error and naming the model, the error and the attempts made (and, for
        a server that cannot be reached, the URL: the client's, else `url`),
        because that message is what the user reads in `RunResult.error`.
        Cancellation propagates untouched.

        The first attempt is made before tenacity is set up, and a success (nearly every call)
        returns from there: tenacity's per-call machinery costs about a quarter of a request's
        CPU on a fast connection. A failure is handed to tenacity as the outcome of its first
        attempt, so what is retried, the waits, the warnings and the messages are the same.
        """
        attempts = 0
        ended = ""
        started = time.monotonic()
        made: list[Exception] = []  # the first attempt's error, for tenacity to take as its own

        async def attempt() -> T:
            nonlocal attempts
            if made:
                raise made.pop()
            attempts += 1
            try:
                result = await self._within_deadline(call, started, url)
            except Exception as exc:
                if unreachable(exc) is None:
                    self.answered = True
                raise
            self.answered = True
            return result

        try:
            return await attempt(), 1
        except Exception as exc:
            made.append(exc)

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome is not None else None
            return self.wait_for(state.attempt_number, exc)

        def stop(state: RetryCallState) -> bool:
            nonlocal ended
            exc = state.outcome.exception() if state.outcome is not None else None
            if exc is None:
                return True
            elapsed = time.monotonic() - started  # from the first attempt, made before tenacity's
            ended = self.stop_reason(state.attempt_number, exc, elapsed, state.upcoming_sleep) or ""
            return bool(ended)

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
            said = describe(exc) if exc is not None else None
            event(
                "llm_retry",
                level=logging.WARNING,
                model=model,
                attempt=state.attempt_number,
                max_attempts=self.max_attempts,
                wait_s=round(sleep, 3) if sleep is not None else None,
                error=said,
                **extra,
            )
            listener = heard_by()
            if listener is not None and exc is not None:  # whoever asked for the call hears of it
                listener(
                    RetryNotice(
                        attempt=state.attempt_number,
                        error_type=type(exc).__name__,
                        error=one_line(said or type(exc).__name__),
                        status_code=answered_status(exc),
                        wait_s=sleep if sleep is not None else 0.0,
                    )
                )

        retrying = AsyncRetrying(
            stop=stop,
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
            if not ended:  # not retried at all
                ended = "after 1 attempt" if attempts == 1 else f"after {attempts} attempts"
            raise LLMError(_failure(model, exc, ended, url)) from exc
        return result, attempts

    async def _within_deadline(self, call: Callable[[], Awaitable[T]], started: float, url: str | None) -> T:
        """`call()`, cut when `retry_timeout` (counted from `started`) runs out; the cut is a
        `ProviderTimeoutError` naming the bound, which `stop_reason` then ends the retries on."""
        if self.retry_timeout is None:
            return await call()
        left = self.retry_timeout - (time.monotonic() - started)
        scope = asyncio.timeout(max(left, 0.0))
        try:
            async with scope:
                return await call()
        except TimeoutError as exc:
            if not scope.expired():
                raise  # the client's own timeout
            where = url or "the provider"
            raise ProviderTimeoutError(
                f"timeout: no complete reply from {where} within what was left of `retry_timeout` "
                f"({_seconds(self.retry_timeout)} s)",
                url=url or "",
            ) from exc


def _failure(model: str, exc: BaseException, ended: str, url: str | None) -> str:
    """The one line an `LLMError` says: what failed, the fix where there is one, and when it ended."""
    lost = unreachable(exc)
    if lost is not None:
        reason, tried = lost
        where = tried or url or "the provider's default URL"
        return f"{model}: cannot connect to {where} ({reason}) {ended}"
    if is_credential_error(exc):
        return (
            f"{model}: {describe(exc)}; check the API key (`api_key`, --api-key, or the provider's "
            f"variable) ({ended}; credentials are never retried)"
        )
    return f"{model}: {describe(exc)} ({ended})"


def _seconds(value: float) -> str:
    """Seconds as a person writes them: ``120``, ``0.25``, ``119.99``."""
    return f"{round(value, 3):g}"
