"""`[mcp.servers.<id>]`: how to reach one MCP server, checked once when it is built.

A server is a command to start (``stdio``: the server speaks on its stdin and stdout) or a URL
(``http``: streamable HTTP; ``sse``: the legacy HTTP+SSE transport). The record is a stdlib
dataclass, so building one imports neither pydantic nor the MCP SDK; the command line's
configuration checks its tables through it too, so a file is held to the same rules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from ..errors import ConfigError

__all__ = [
    "DEFAULT_REDIRECT_PORT",
    "DEFAULT_REFRESH_EVERY",
    "DEFAULT_TIMEOUT",
    "SIGNING_ALGORITHMS",
    "Grant",
    "MCPAuthSettings",
    "MCPServerSettings",
    "TransportType",
]

TransportType = Literal["stdio", "http", "sse"]
"""``stdio``: a subprocess; ``http``: streamable HTTP; ``sse``: HTTP with server-sent events (legacy)."""

Grant = Literal["authorization_code", "client_credentials"]
"""How an OAuth client gets its tokens: a person's login, or its own credentials (no person)."""

SIGNING_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)
"""The JWT algorithms a private key may sign a client assertion with (asymmetric ones only)."""

_STRINGS = (
    "client_id",
    "client_secret",
    "client_secret_env",
    "private_key_file",
    "private_key_env",
    "issuer",
)
"""The auth keys that are strings when set."""

DEFAULT_TIMEOUT = 30.0
"""Seconds for connecting, and for each call: a server that says nothing for that long has
given its answer (for a call, a timeout observation for the model)."""

DEFAULT_REDIRECT_PORT = 33418
"""The 127.0.0.1 port `agentfsm mcp login` receives the authorization server's redirect on: a
registered client's redirect URI names it, so it stays the same from one login to the next."""

DEFAULT_REFRESH_EVERY = 5
"""Requests to the model after which a server's tool list is read again, announced or not."""


@dataclass(frozen=True, kw_only=True)
class MCPAuthSettings:
    """``[mcp.servers.<id>.auth]``: the server is behind OAuth 2.1, and agentfsm is its client.

    ``auth = "oauth"`` takes every default: the authorization-code grant, where
    `agentfsm mcp login SERVER` authorizes once (the person signs in at the printed URL) and runs
    then use the stored tokens and refresh them. ``grant = "client_credentials"`` is agentfsm
    acting for itself, machine to machine: a run gets its token with its own credentials (a
    secret, or a private key signing a JWT), with no person and no login."""

    grant: Grant = "authorization_code"
    """How the tokens are had: a person's login (``authorization_code``), or this client's own
    credentials (``client_credentials``: `client_id`, `issuer`, and a secret or a private key)."""
    client_name: str = "agentfsm"
    """The name the client registers under (dynamic registration), shown on the consent page."""
    scopes: tuple[str, ...] = ()
    """The scopes each authorization asks for (a login, or a client-credentials token); empty:
    the MCP specification's selection, the scopes of the server's 401 challenge, else those it
    advertises, else none. A 403 ``insufficient_scope`` asks again for those held and those it
    names, either way."""
    client_id: str | None = None
    """A client registered beforehand with the authorization server; None: register dynamically."""
    client_secret: str | None = field(default=None, repr=False)
    """The secret of `client_id` (a confidential client); None: a public client, or the secret
    is in `client_secret_env`."""
    client_secret_env: str | None = None
    """The environment variable holding the secret of `client_id`, read when connecting, so that
    the secret need not sit in a file."""
    private_key_file: str | None = None
    """``client_credentials``: a PEM file of the private key that signs this client's JWT
    assertion (``private_key_jwt``, RFC 7523) in place of a secret."""
    private_key_env: str | None = None
    """``client_credentials``: the environment variable holding that PEM key, read when connecting."""
    signing_algorithm: str = "RS256"
    """The JWT algorithm of the private key: one of `SIGNING_ALGORITHMS` (``ES256`` for a P-256 key)."""
    issuer: str | None = None
    """``client_credentials``: the issuer URL of the authorization server the credentials belong
    to (required): they are sent to that server only, whichever one the MCP server names."""
    redirect_port: int = DEFAULT_REDIRECT_PORT
    """The port of the redirect URI ``http://127.0.0.1:PORT/callback`` the login listens on."""
    client_metadata_url: str | None = None
    """An ``https://`` URL (with a path) of this client's metadata document, used as its client id
    where the authorization server takes such documents (CIMD); None: register dynamically."""

    def __post_init__(self) -> None:
        if isinstance(self.scopes, str):
            object.__setattr__(self, "scopes", tuple(self.scopes.split()))
        elif isinstance(self.scopes, list):
            object.__setattr__(self, "scopes", tuple(self.scopes))
        if self.grant not in get_args(Grant):
            raise ConfigError(
                f'MCP server auth `grant` must be "authorization_code" (a person logs in) or '
                f'"client_credentials" (agentfsm\'s own credentials), got {self.grant!r}'
            )
        if not isinstance(self.client_name, str) or not self.client_name.strip():
            raise ConfigError(
                f"MCP server auth `client_name` must be a non-empty string, got {self.client_name!r}"
            )
        if not all(isinstance(scope, str) and scope and " " not in scope for scope in self.scopes):
            raise ConfigError(
                f"MCP server auth `scopes` must be a list of scope names without spaces, got {self.scopes!r}"
            )
        for name in _STRINGS:
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                shown = "<hidden>" if name == "client_secret" else repr(value)
                raise ConfigError(f"MCP server auth `{name}` must be a non-empty string, got {shown}")
        if self.client_secret is not None and self.client_secret_env is not None:
            raise ConfigError(
                "MCP server auth has both `client_secret` and `client_secret_env`: keep one (the "
                "variable keeps the secret out of the file)"
            )
        if self.signing_algorithm not in SIGNING_ALGORITHMS:
            raise ConfigError(
                f"MCP server auth `signing_algorithm` must be one of {', '.join(SIGNING_ALGORITHMS)}, "
                f"got {self.signing_algorithm!r}"
            )
        if self.grant == "client_credentials":
            self._check_client_credentials()
        else:
            self._check_authorization_code()
        document = self.client_metadata_url
        if document is not None and (
            not isinstance(document, str)
            or not document.startswith("https://")
            or "/" not in document.removeprefix("https://").rstrip("/")
        ):
            raise ConfigError(
                "MCP server auth `client_metadata_url` must be an https:// URL with a path "
                f"(where the client's metadata document is served), got {document!r}"
            )
        port = self.redirect_port
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ConfigError(f"MCP server auth `redirect_port` must be a port from 1 to 65535, got {port!r}")

    def _check_authorization_code(self) -> None:
        """A person's login: the keys of the client-credentials grant are a mistake here, and a
        secret belongs to a configured client."""
        for name in ("private_key_file", "private_key_env", "issuer"):
            if getattr(self, name) is not None:
                raise ConfigError(
                    f"MCP server auth `{name}` is for the client-credentials grant: set "
                    f'grant = "client_credentials", or remove `{name}`'
                )
        if self.secret_given and self.client_id is None:
            raise ConfigError(
                "MCP server auth has a `client_secret` but no `client_id`: set the `client_id` it "
                "belongs to, or remove the secret to register dynamically"
            )

    def _check_client_credentials(self) -> None:
        """The client-credentials grant needs who the client is, where its credentials go, and
        exactly one credential."""
        grant = 'MCP server auth with grant = "client_credentials"'
        if self.client_id is None:
            raise ConfigError(f"{grant} needs the `client_id` the authorization server issued")
        if self.issuer is None or not self.issuer.startswith(("http://", "https://")):
            raise ConfigError(
                f"{grant} needs `issuer`, the http(s) issuer URL of the authorization server its "
                f"credentials belong to (they are sent there only), got {self.issuer!r}"
            )
        given = [name for name in ("private_key_file", "private_key_env") if getattr(self, name) is not None]
        if self.secret_given:
            given.insert(0, "client_secret" if self.client_secret is not None else "client_secret_env")
        if len(given) != 1:
            raise ConfigError(
                f"{grant} needs one credential, got {', '.join(f'`{name}`' for name in given) or 'none'}: "
                "set `client_secret_env` (or `client_secret`), or for a signed JWT `private_key_file` "
                "(or `private_key_env`)"
            )
        if self.client_metadata_url is not None:
            raise ConfigError(
                f"{grant} takes no `client_metadata_url` (its client is `client_id`): remove it"
            )

    @property
    def secret_given(self) -> bool:
        """Whether the client has a secret (in the settings, or in the environment)."""
        return self.client_secret is not None or self.client_secret_env is not None

    @property
    def redirect_uri(self) -> str:
        """Where the authorization server sends the person back to, with the code."""
        return f"http://127.0.0.1:{self.redirect_port}/callback"

    @classmethod
    def from_value(cls, value: Any) -> MCPAuthSettings:
        """The record from ``auth = "oauth"`` or an ``[mcp.servers.<id>.auth]`` table."""
        if isinstance(value, MCPAuthSettings):
            return value
        if value == "oauth":
            return cls()
        if not isinstance(value, Mapping):
            raise ConfigError(
                f'MCP server `auth` must be "oauth" or a table of OAuth settings, got {value!r}'
            )
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise ConfigError(
                f"unknown key {unknown[0]!r} for an MCP server's auth; allowed: {', '.join(known)}"
            )
        return cls(**value)


@dataclass(frozen=True, kw_only=True)
class MCPServerSettings:
    """One MCP server. `type` may be left out: a `command` means ``stdio``, a `url` ``http``."""

    type: TransportType | None = None
    """The transport; None: ``stdio`` when `command` is set, ``http`` when `url` is."""
    command: str | None = None
    """``stdio``: the program to start (looked up on PATH)."""
    args: tuple[str, ...] = ()
    """``stdio``: its arguments."""
    env: Mapping[str, str] = field(default_factory=dict)
    """``stdio``: variables added to the SDK's minimal default environment (PATH, HOME, ...):
    the server does not inherit the agent's whole environment, its keys included."""
    url: str | None = None
    """``http`` / ``sse``: the endpoint, ``http://`` or ``https://`` (``.../mcp``, ``.../sse``)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """``http`` / ``sse``: sent with every request (an ``Authorization`` header, say)."""
    timeout: float = DEFAULT_TIMEOUT
    """Seconds for each tool call (> 0)."""
    connect_timeout: float = DEFAULT_TIMEOUT
    """Seconds for starting or reaching the server and listing its tools (> 0): a stdio
    server's first start (an interpreter, a package cache) may take longer than a call."""
    refresh_every: int = DEFAULT_REFRESH_EVERY
    """Read the tool list again after this many requests to the model (0: never), for servers
    that announce no change; not while a 2026-07-28 list's ``ttlMs`` says it is fresh. A change
    the server announces, or the end of that TTL, has the list read before the next request."""
    instructions: bool = False
    """Put the server's `instructions` (what it says of itself when connected) into the agent's
    system prompt, under a heading naming the server. Off by default: it is the server's text."""
    auth: MCPAuthSettings | None = None
    """``http``: the server is behind OAuth (``auth = "oauth"``, or a table of `MCPAuthSettings`);
    None: only `headers` are sent."""

    def __post_init__(self) -> None:
        kind = self.type
        if kind is None:
            kind = "stdio" if self.command is not None else "http" if self.url is not None else None
            if kind is None:
                raise ConfigError(
                    "an MCP server needs a `command` (a server started over stdio) or a `url` "
                    "(streamable HTTP); set one of them"
                )
            object.__setattr__(self, "type", kind)
        if kind not in get_args(TransportType):
            raise ConfigError(f"MCP server `type` must be 'stdio', 'http' or 'sse', got {kind!r}")
        if isinstance(self.args, list):
            object.__setattr__(self, "args", tuple(self.args))
        if not all(isinstance(arg, str) for arg in self.args):
            raise ConfigError(f"MCP server `args` must be strings, got {self.args!r}")
        for name in ("env", "headers"):
            table = getattr(self, name)
            if not isinstance(table, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in table.items()
            ):
                raise ConfigError(f"MCP server `{name}` must be a table of strings, got {table!r}")
        for name in ("timeout", "connect_timeout"):
            seconds = getattr(self, name)
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
                raise ConfigError(f"MCP server `{name}` must be a number of seconds > 0, got {seconds!r}")
        every = self.refresh_every
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ConfigError(
                f"MCP server `refresh_every` must be a whole number >= 0 (0: never), got {every!r}"
            )
        if self.auth is not None:
            object.__setattr__(self, "auth", MCPAuthSettings.from_value(self.auth))
        if not isinstance(self.instructions, bool):
            raise ConfigError(f"MCP server `instructions` must be true or false, got {self.instructions!r}")
        if kind == "stdio":
            if not isinstance(self.command, str) or not self.command:
                raise ConfigError(
                    f"MCP server of type 'stdio' needs a `command` to start, got {self.command!r}"
                )
            self._refuse("url", "headers", "auth", kind=kind)
        else:
            if not isinstance(self.url, str) or not self.url.startswith(("http://", "https://")):
                raise ConfigError(
                    f"MCP server of type {kind!r} needs a `url` starting with http:// or https://, "
                    f"got {self.url!r}"
                )
            self._refuse("command", "args", "env", kind=kind)
            if self.auth is not None and kind != "http":
                raise ConfigError(
                    f"MCP server `auth` needs streamable HTTP (type 'http'), got type {kind!r}: "
                    "remove `auth`, or reach the server over streamable HTTP"
                )
            if self.auth is not None and any(key.lower() == "authorization" for key in self.headers):
                raise ConfigError(
                    "MCP server has both `auth` and an `Authorization` header: OAuth sends its own "
                    "token; remove the header"
                )

    def _refuse(self, *names: str, kind: str) -> None:
        """Keys of the other transport are a mistake, not something to ignore silently."""
        for name in names:
            if getattr(self, name):
                raise ConfigError(
                    f"MCP server of type {kind!r} takes no `{name}` (got {getattr(self, name)!r}): "
                    "remove it, or set the `type` that uses it"
                )

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> MCPServerSettings:
        """The record from a config table, whose unknown keys are an error naming the known ones."""
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(table) - set(known))
        if unknown:
            raise ConfigError(f"unknown key {unknown[0]!r} for an MCP server; allowed: {', '.join(known)}")
        return cls(**table)

    @classmethod
    def parse(
        cls, target: str, *, timeout: float = DEFAULT_TIMEOUT, auth: MCPAuthSettings | None = None
    ) -> MCPServerSettings:
        """A server from one string: a URL (streamable HTTP, behind OAuth with `auth`), else a
        command line (stdio)."""
        if target.startswith(("http://", "https://")):
            return cls(url=target, timeout=timeout, auth=auth)
        import shlex

        words = shlex.split(target)
        if not words:
            raise ConfigError("an MCP server needs a command or a URL, got an empty string")
        return cls(command=words[0], args=tuple(words[1:]), timeout=timeout, auth=auth)
