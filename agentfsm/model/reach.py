"""`connect_once`: can a TCP connection to the server at `api_base` be opened at all?

Why before the first request: litellm's import takes seconds (4 s on a quiet machine, over 20
on a loaded one), and only then does the first request find out that nobody listens at
`api_base`, which the socket says in a millisecond. An adapter asks this once, before its
first request and before loading anything, through its retry policy: a refused connection,
an unknown host or a connect timeout is then retried as little as a server that has never
answered is (`UNREACHABLE_ATTEMPTS`), and the error names the URL. The connection is
closed at once; nothing is sent.

Skipped when a proxy would carry the request (``HTTPS_PROXY`` and friends): the server's
own address then says nothing about whether the request gets through.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.request
from urllib.parse import urlsplit

from ..errors import ConnectTimeout

__all__ = ["connect_once", "probe_target"]


def probe_target(url: str) -> tuple[str, int] | None:
    """``(host, port)`` to connect to for `url`, or None when a proxy would be used or the URL
    names no host."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return None
    proxies = urllib.request.getproxies()
    if (proxies.get(parts.scheme) or proxies.get("all")) and not urllib.request.proxy_bypass(host):
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a port that is not a number: the request will say so
        return None
    return host, port


async def connect_once(host: str, port: int, timeout: float) -> None:
    """Open and close one TCP connection; raise what the socket says (`ConnectionRefusedError`,
    `socket.gaierror`, or `ConnectTimeout` after `timeout` seconds)."""
    try:
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(host, port)
    except TimeoutError:
        raise ConnectTimeout(f"connect to {host}:{port} timed out after {timeout:g} s") from None
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
