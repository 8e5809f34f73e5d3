"""A search request retried as the model's calls are, by the same policy (`RetryPolicy`), in its own words.

What is worth another try is what `is_transient` says of a model call: a rate limit (429), a
server error (5xx), a timeout, a connection refused or dropped, read from the `SearchError`'s
status and class. The waits are the policy's: exponential from `BACKOFF_BASE`, a 429's
``Retry-After`` honoured up to `[search] backoff_max` and cut to it beyond; and so are the ends:
`max_attempts` tries, two for a service that has never answered (a wrong address, or one not
started, is likelier than one restarting). Anything else (a 4xx, an answer that is not the
service's) fails at once.

Each retry is a ``search_retry`` warning in the log: the backend, the attempt, the wait and the
error, whose message never holds a key (`request.py`). The last error is raised again, saying
how many attempts were made and the fix.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ...errors import SearchError
from ...log import event
from ...model.retry import RetryPolicy, is_transient, retry_after, unreachable

__all__ = ["BACKOFF_BASE", "retried", "search_policy"]

T = TypeVar("T")

BACKOFF_BASE = 0.5
"""Seconds before the second try; each further one waits twice as long (up to `backoff_max`)."""


def search_policy(*, max_attempts: int = 3, backoff_max: float = 10.0) -> RetryPolicy:
    """A backend's policy (one each: it remembers whether its service ever answered)."""
    return RetryPolicy(max_attempts=max_attempts, backoff_base=BACKOFF_BASE, backoff_max=backoff_max)


async def retried(call: Callable[[], Awaitable[T]], *, backend: str, policy: RetryPolicy) -> T:
    """`call()` until it succeeds or fails for good; a `SearchError` then, with the attempts made
    and the fix. Cancellation passes through untouched."""
    attempt = 0
    while True:
        attempt += 1
        try:
            result = await call()
        except SearchError as exc:
            if unreachable(exc) is None:
                policy.answered = True
            wait = policy.wait_for(attempt, exc)
            if is_transient(exc):
                ended = policy.stop_reason(attempt, exc, 0.0, wait)
            else:
                ended = "after 1 attempt" if attempt == 1 else f"after {attempt} attempts"
            if ended is not None:
                fix = f"; {exc.fix}" if exc.fix else ""
                raise SearchError(
                    f"{exc.message} ({ended}){fix}",
                    backend=backend,
                    fix=exc.fix,
                    status_code=exc.status_code,
                    response_headers=exc.response_headers,
                ) from exc
            extra: dict[str, Any] = {}
            asked = retry_after(exc)
            if asked is not None:
                extra["retry_after_s"] = asked
            event(
                "search_retry",
                level=logging.WARNING,
                backend=backend,
                attempt=attempt,
                max_attempts=policy.max_attempts,
                wait_s=round(wait, 3),
                error=exc.message,
                **extra,
            )
            await asyncio.sleep(wait)
        else:
            policy.answered = True
            return result
