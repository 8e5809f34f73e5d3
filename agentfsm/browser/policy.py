"""The Content-Security-Policy the route adds to every answer it hands Chromium.

Playwright routes a page's requests, a dedicated worker's fetches and the page's own
WebSockets, but not a WebSocket (or WebTransport session) a worker opens: such a socket
leaves the network service with only Chromium's resolver in front of it, and an address
needs no resolving. A ``connect-src`` that lists exactly the allowed hosts makes Chromium
itself refuse any other connection a script asks for, in the page, its frames and every
worker: a dedicated worker takes the policy of its script's answer (which passes the route
too), and a ``blob:``, ``data:`` or ``srcdoc`` one inherits its creator's.

Policies combine: the page's own (a header, or a ``<meta>`` tag) is enforced alongside this
one, so the page can narrow what it may reach but never widen it.
"""

from __future__ import annotations

from collections.abc import Mapping

from .settings import BrowserSettings

__all__ = ["POLICY_HEADER", "content_policy", "with_policy"]

POLICY_HEADER = "content-security-policy"

_SCHEMES = ("http", "https", "ws", "wss")
_NONE = "'none'"


def content_policy(settings: BrowserSettings, *, document: bool) -> str | None:
    """The policy for an answer under `settings`' allowlist (None when every host is allowed).

    ``connect-src`` lists each allowed host under every scheme a script may connect with, on any
    port (a ``*.example.com`` entry is the same wildcard in CSP's own syntax). CSP has no form for
    an IPv6 address (Chromium ignores ``http://[::1]:*``), so an allowed IPv6 address is left out:
    pages and their subresources still load from it, but scripts cannot connect to it (a name
    mapped to it with `resolve` can be listed).

    ``worker-src`` keeps every worker under a policy: Playwright routes the script of a worker
    a page starts from a URL (so its answer carries this policy too), but not that of a worker
    another worker starts from a URL, which would run with none. So a worker (an answer that is
    not a `document`) may start only ``blob:`` and ``data:`` workers, which inherit its policy;
    and a page may start workers from allowed URLs and ``data:`` ones (whose origin is opaque,
    so they cannot start a URL worker), but no ``blob:`` worker, which would share the page's
    origin and could.
    """
    if settings.any_host:
        return None
    written = [host for host in settings.allowed_hosts if ":" not in host]
    connect = [f"{scheme}://{host}:*" for host in written for scheme in _SCHEMES]
    scripts = [f"{scheme}://{host}:*" for host in written for scheme in ("http", "https")]
    workers = [*scripts, "data:"] if document else ["blob:", "data:"]
    return f"connect-src {' '.join(connect) or _NONE}; worker-src {' '.join(workers)}"


def with_policy(headers: Mapping[str, str], policy: str | None) -> dict[str, str]:
    """`headers` with `policy` enforced besides any policy they carry (a comma joins two policies,
    and Chromium enforces both: the stricter wins for each directive)."""
    out = {k: v for k, v in headers.items() if k.lower() != POLICY_HEADER}
    if policy is None:
        out.update({k: v for k, v in headers.items() if k.lower() == POLICY_HEADER})
        return out
    own = [v for k, v in headers.items() if k.lower() == POLICY_HEADER and v.strip()]
    out[POLICY_HEADER] = ", ".join([*own, policy])
    return out
