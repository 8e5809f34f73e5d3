"""Why an MCP connection or call failed, told in one line a person can act on.

The connection (`agentfsm.mcp.client`) decides what a failure does: the server is gone, the
session is reconnected, or one call gets an error result. What it says is read here, apart from
the connection's life, because the MCP SDK hides the cause three ways: anyio wraps it in
exception groups (`describe` looks inside), an HTTP refusal whose body is no JSON-RPC error
comes back only as "Server returned an error response" (`refusal_behind` gives back the status
the connection's response hook kept, `authorization_wanted` turns a 401 or 403 into the setting
that carries a token), and an OAuth flow fails with the SDK's own errors (`login_problem` says
how to log in). `is_disconnect` tells a connection that ended from a refusal of one call.

Like the client, this module imports the SDK (and its httpx2 and anyio) only inside the
functions that read its errors, so importing it costs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import MCPLoginError

if TYPE_CHECKING:
    from .settings import MCPServerSettings

__all__ = [
    "Refusal",
    "authorization_wanted",
    "describe",
    "explain",
    "is_disconnect",
    "login_problem",
    "refusal_behind",
    "refused_requests",
]

_STAND_IN = "Server returned an error response"
"""The SDK's error for an HTTP refusal whose body is no JSON-RPC error: the status is lost."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """An HTTP status a streamable-HTTP server answered a POST with, and whether the request
    carried a session id."""

    status: int
    session: bool


def refusal_behind(problem: BaseException, refused: Refusal | None) -> Refusal | None:
    """`refused`, the last refusal the connection saw, when `problem` is the SDK's stand-in for
    an HTTP refusal it could not read ("Server returned an error response"), else None."""
    if _STAND_IN not in str(problem) and not any(_STAND_IN in str(inner) for inner in _leaves(problem)):
        return None
    return refused


def authorization_wanted(
    server_id: str, settings: MCPServerSettings, refused: Refusal | None, problem: BaseException
) -> str | None:
    """What to say when `problem` is the server `server_id` asking for credentials (HTTP 401, or
    403 for ones it does not accept), `refused` being the refusal behind it (`refusal_behind`):
    which setting carries them. None for any other problem."""
    status = refused.status if refused is not None else None
    text = str(problem)
    if status is None and settings.type == "sse":  # the SSE client raises httpx's own error
        status = 401 if "401 Unauthorized" in text else 403 if "403 Forbidden" in text else None
    if status not in (401, 403):
        return None
    table = f"[mcp.servers.{server_id}]"
    where = f"`{table} headers` (MCPServerSettings.headers)"
    if settings.auth is not None:
        from .oauth import login_hint

        return (
            f"the server refused the OAuth token agentfsm holds (HTTP {status} from "
            f"{settings.url}); {login_hint(server_id, settings.auth)}, or check "
            f"the `scopes` of `{table} auth`"
        )
    if status == 401:
        return (
            f"the server wants authorization (HTTP 401 from {settings.url}); if it uses OAuth, "
            f'set auth = "oauth" in `{table}` (--mcp-oauth {server_id} for a --mcp-server) and '
            f"run `agentfsm mcp login {server_id}`, else give it a token in {where}, "
            f'e.g. headers = {{ Authorization = "Bearer <token>" }}'
        )
    return (
        f"the server refused the credentials it was given (HTTP 403 from {settings.url}); "
        f"check the token in {where}"
    )


def explain(problem: BaseException, refused: Refusal | None) -> str:
    """`describe`, with the HTTP status of `refused`, the refusal behind `problem`
    (`refusal_behind`), which the SDK reports only as "Server returned an error response"."""
    text = describe(problem)
    if refused is None:
        return text
    return f"{text} (HTTP {refused.status})"


def refused_requests(server_id: str, name: str, methods: Sequence[str]) -> str:
    """The error of the call `name` whose server asked for `methods` (sampling or roots)."""
    return (
        f"MCP server {server_id!r} asked for {', '.join(methods)} during `{name}`; agentfsm takes no "
        "part in sampling or roots (deprecated in 2026-07-28), so the call was refused"
    )


def is_disconnect(exc: BaseException) -> bool:
    """Whether `exc` says the connection itself ended (not a refusal of one call, nor a result
    that does not parse): the SDK's "Connection closed" (a stdio server's process ended) or
    "SSE stream ended" (an HTTP server went away mid-answer), or the transport's own error."""
    import anyio
    import httpx2

    text = str(exc)
    if "Connection closed" in text or "stream ended" in text:
        return True
    transport = (OSError, httpx2.TransportError, anyio.ClosedResourceError, anyio.BrokenResourceError)
    return isinstance(exc, (*transport, anyio.EndOfStream))


def login_problem(server_id: str, settings: MCPServerSettings, exc: BaseException) -> str | None:
    """One line for an OAuth flow that failed inside the SDK (a registration or a token
    exchange refused, metadata that does not match), with what to do; None for other problems."""
    from mcp.client.auth import OAuthFlowError

    for leaf in _leaves(exc):
        if isinstance(leaf, MCPLoginError):
            return str(leaf)
        if isinstance(leaf, OAuthFlowError) and settings.auth is not None:
            from .oauth import login_hint

            failed = f"authorizing agentfsm at MCP server {server_id!r} failed ({describe(leaf)})"
            return f"{failed}: {login_hint(server_id, settings.auth)}"
    return None


def describe(exc: BaseException) -> str:
    """One line for `exc`, looking inside the exception groups anyio raises."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside the exception groups anyio raises (`exc` itself when none)."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]
