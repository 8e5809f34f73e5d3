"""OAuth for a streamable-HTTP MCP server: the MCP SDK's `OAuthClientProvider`, with agentfsm's
token file and its two ways of meeting the authorization step.

The SDK does the protocol, as an ``httpx.Auth`` on the connection's HTTP client: on a 401 it reads
the protected-resource metadata (the ``WWW-Authenticate`` header's ``resource_metadata``, then the
well-known URLs), the authorization server's metadata (RFC 8414, then OpenID discovery), registers
a client dynamically (RFC 7591) unless one is configured (``client_id``), runs the authorization
code flow with PKCE (S256) and a ``state`` it checks, sends the ``resource`` indicator (RFC 8707),
refreshes an expired access token with the refresh token, and on a 403 with
``error="insufficient_scope"`` asks again for the union of the scopes held and challenged.

What agentfsm adds:

- `FileTokenStorage`, the SDK's `TokenStorage` over `agentfsm.mcp.auth_store.AuthFile` (one 0600
  file per server), which also records when the access token runs out: the SDK keeps that time
  in memory only, so a token loaded in a later process would be sent as valid, refused with a
  401, and answered with a whole new authorization instead of a refresh
  (`FileTokenStorage.get_tokens` hands it back, with the metadata discovered).
- The authorization step itself. In a run nobody is there to sign in: the flow stops with an
  `MCPLoginError` naming ``agentfsm mcp login SERVER``. The login command hands in
  a `Login` (`agentfsm.mcp.login`) that shows the URL and waits for the redirect.

A client ID metadata document (CIMD) is used when `client_metadata_url` is set and the server
says it takes one; otherwise the client registers.

With ``grant = "client_credentials"`` there is no person at all: the SDK's
`ClientCredentialsOAuthProvider` (the secret, sent with HTTP Basic) or `PrivateKeyJWTOAuthProvider`
(a JWT assertion signed with the private key, RFC 7523, whose audience is the authorization
server's issuer) gets a token on the 401 and again when it runs out; the tokens go in the same
file. The configured `issuer` is where the credentials may go: metadata of any other authorization
server stops the flow. The secret and the key are read when the provider is made, from the
environment or a file, so that they need not sit in the configuration. Not offered: token
revocation.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)

from ..errors import ConfigError, MCPLoginError
from .auth_store import AuthFile
from .settings import MCPAuthSettings, MCPServerSettings

if TYPE_CHECKING:
    from mcp.client.auth.oauth2 import OAuthContext
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthToken

__all__ = ["FileTokenStorage", "Login", "login_hint", "oauth_provider"]


class Login(Protocol):
    """The person's side of an authorization: show them the URL, then wait for the redirect."""

    async def show(self, url: str) -> None:
        """Send the person to `url` (print it, open a browser); the redirect may come at once."""

    async def redirected(self) -> Mapping[str, str]:
        """The query of the redirect to the callback: ``code``, ``state`` (and ``iss``), or ``error``."""


def login_hint(server_id: str, auth: MCPAuthSettings) -> str:
    """What to do to authorize agentfsm at the server `server_id` anew: log in, or (the
    client-credentials grant, which has no login) check the credentials."""
    if auth.grant == "client_credentials":
        return (
            f"check the `client_id`, its secret or private key, and the `issuer` in the auth of "
            f"MCP server {server_id!r}"
        )
    return (
        f"run `agentfsm mcp login {server_id}` (with the --config FILE or --mcp-server "
        f"{server_id}=URL that gives the server)"
    )


class FileTokenStorage:
    """The SDK's `TokenStorage` for the server `server_id`: its tokens and its client in one file.

    A client configured in `auth` (``client_id``) is the client, and is never stored."""

    def __init__(
        self, file: AuthFile, auth: MCPAuthSettings, *, fresh: bool = False, secret: str | None = None
    ) -> None:
        self.file = file
        self.auth = auth
        self.secret = secret
        """The secret of the configured client (`client_secret`, or its variable's), read when connecting."""
        self.fresh = fresh
        """Hand out no stored tokens (a login authorizes anew), but store the new ones."""
        self.context: OAuthContext | None = None
        """The provider's state, whose discovered metadata is stored with the tokens."""

    async def get_tokens(self) -> OAuthToken | None:
        """The stored tokens. Every provider of the SDK asks once, when it starts: so that is
        when its context is given what the file holds beyond the tokens (`_restore`)."""
        from mcp.shared.auth import OAuthToken

        tokens = None if self.fresh else self.file.tokens()
        if tokens is None or self.file.read().get("issued_to", self.auth.client_id) != self.auth.client_id:
            return None  # none, or a configured client's that is not this one: this client gets its own
        if self.context is not None:
            self._restore(self.context)
        return OAuthToken.model_validate(tokens)

    async def set_tokens(self, tokens: OAuthToken) -> None:
        expires = None if tokens.expires_in is None else time.time() + tokens.expires_in
        found: dict[str, Any] = {}
        context = self.context
        if context is not None and context.oauth_metadata is not None:
            found["server"] = context.oauth_metadata.model_dump(mode="json", exclude_none=True)
            found["auth_server_url"] = context.auth_server_url
            if context.protected_resource_metadata is not None:
                found["resource"] = context.protected_resource_metadata.model_dump(
                    mode="json", exclude_none=True
                )
        fields: dict[str, Any] = {
            "tokens": tokens.model_dump(mode="json", exclude_none=True),
            "expires_at": expires,
            "issued_to": self.auth.client_id,  # None: the client registered for this URL
        }
        if found:
            fields["discovered"] = found
        self.file.update(**fields)
        self.fresh = False

    def _restore(self, context: OAuthContext) -> None:
        """Give the provider what this file remembers beyond the SDK's `TokenStorage`, with the
        stored tokens: when the access token runs out, and the metadata discovered when the
        tokens were issued (the token endpoint a refresh goes to)."""
        from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata

        context.token_expiry_time = self.file.expires_at()
        found = self.file.read().get("discovered")
        if not isinstance(found, dict) or context.oauth_metadata is not None:
            return
        try:
            context.oauth_metadata = OAuthMetadata.model_validate(found.get("server"))
            if found.get("resource") is not None:
                context.protected_resource_metadata = ProtectedResourceMetadata.model_validate(
                    found["resource"]
                )
        except ValueError:  # a record written by another version: discovery runs again
            context.oauth_metadata = context.protected_resource_metadata = None
            return
        url = found.get("auth_server_url")
        context.auth_server_url = url if isinstance(url, str) else None

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        from mcp.shared.auth import OAuthClientInformationFull

        if self.auth.client_id is not None:
            return OAuthClientInformationFull(
                client_id=self.auth.client_id,
                client_secret=self.secret,
                redirect_uris=[self.auth.redirect_uri],  # type: ignore[list-item]  # pydantic parses it
                # RFC 6749 2.3.1: every authorization server takes HTTP Basic for a client's secret
                token_endpoint_auth_method="client_secret_basic" if self.auth.secret_given else "none",
            )
        client = self.file.client()
        return None if client is None else OAuthClientInformationFull.model_validate(client)

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        if self.auth.client_id is None:
            self.file.update(client=client_info.model_dump(mode="json", exclude_none=True))


class _AsksForItsScopes(OAuthClientProvider):
    """The SDK's provider, asking for the configured scopes (`configured_scope`) in each authorization.

    The SDK replaces the client's scopes at a 401 with the specification's selection (the
    challenge's scopes, else those advertised); where the configuration names scopes, those are
    what the person (or the client's credentials) is asked to grant. A step-up keeps the SDK's
    union of the scopes held and those a 403 ``insufficient_scope`` names: it happens while the
    token is still valid, so that the escalation asks for more, not for the configured ones again.
    """

    configured_scope: str | None = None

    async def _perform_authorization(self) -> Any:
        if self.configured_scope is not None and not self.context.is_token_valid():
            self.context.client_metadata.scope = self.configured_scope
        return await super()._perform_authorization()


class _Login(_AsksForItsScopes):
    """The authorization-code flow (a person's login), asking for the configured scopes."""


class _Secret(_AsksForItsScopes, ClientCredentialsOAuthProvider):
    """The client-credentials grant with the client's secret, asking for the configured scopes."""


class _Signed(_AsksForItsScopes, PrivateKeyJWTOAuthProvider):
    """The client-credentials grant with a signed assertion, asking for the configured scopes."""


def oauth_provider(
    server_id: str,
    settings: MCPServerSettings,
    *,
    login: Login | None = None,
    refused: Callable[[str], None] | None = None,
) -> OAuthClientProvider:
    """The ``httpx.Auth`` of the server `server_id`, whose `settings` have `auth`. Without `login`,
    an authorization that needs a person raises `MCPLoginError` (told to `refused` first: the
    SDK's transport reports it only as its connection closing); with it, the person is asked.
    A secret or a key that cannot be read is a `ConfigError`."""
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

    auth, url = settings.auth, settings.url
    assert auth is not None and url is not None  # checked by the caller
    secret = _secret(server_id, auth)
    if auth.grant == "client_credentials":
        return _client_credentials(server_id, url, auth, secret)
    storage = FileTokenStorage(AuthFile(server_id, url), auth, fresh=login is not None, secret=secret)
    metadata = OAuthClientMetadata(
        client_name=auth.client_name,
        redirect_uris=[auth.redirect_uri],  # type: ignore[list-item]  # pydantic parses it
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        scope=" ".join(auth.scopes) or None,
        token_endpoint_auth_method="client_secret_basic" if auth.secret_given else "none",
    )

    async def show(url: str) -> None:
        if login is None:
            why = f"MCP server {server_id!r} needs authorization and has no usable tokens"
            why = f"{why}: {login_hint(server_id, auth)}"
            if refused is not None:
                refused(why)
            raise MCPLoginError(why)
        await login.show(url)

    async def redirected() -> AuthorizationCodeResult:
        assert login is not None  # `show` raised without it
        query = await login.redirected()
        if "code" not in query:
            error = query.get("error", "no code in the redirect")
            described = query.get("error_description")
            raise MCPLoginError(
                f"the authorization server of MCP server {server_id!r} refused the login: {error}"
                + (f" ({described})" if described else "")
            )
        return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))

    provider = _Login(
        url,
        metadata,
        storage,
        redirect_handler=show,
        callback_handler=redirected,
        client_metadata_url=auth.client_metadata_url,
    )
    provider.configured_scope = metadata.scope
    storage.context = provider.context
    return provider


def _client_credentials(
    server_id: str, url: str, auth: MCPAuthSettings, secret: str | None
) -> OAuthClientProvider:
    """The SDK's provider of the client-credentials grant: with the secret, or with JWT
    assertions signed by the private key."""
    client_id, issuer = auth.client_id, auth.issuer
    assert client_id is not None and issuer is not None  # checked by the settings
    storage = FileTokenStorage(AuthFile(server_id, url), auth)
    scope = " ".join(auth.scopes) or None
    provider: _AsksForItsScopes
    if secret is not None:
        provider = _Secret(url, storage, client_id, secret, scope=scope, issuer=issuer)
    else:
        signer = SignedJWTParameters(
            issuer=client_id,
            subject=client_id,
            signing_key=_private_key(server_id, auth),
            signing_algorithm=auth.signing_algorithm,
        )
        provider = _Signed(
            url, storage, client_id, signer.create_assertion_provider(), scope=scope, issuer=issuer
        )
    provider.configured_scope = scope
    storage.context = provider.context
    return provider


def _secret(server_id: str, auth: MCPAuthSettings) -> str | None:
    """The client's secret: `client_secret`, or the value of the variable `client_secret_env`."""
    if auth.client_secret_env is None:
        return auth.client_secret
    secret = os.environ.get(auth.client_secret_env)
    if not secret:
        raise ConfigError(
            f"MCP server {server_id!r} reads its client secret from the environment variable "
            f"{auth.client_secret_env} (`client_secret_env`), which is not set: set it to the secret"
        )
    return secret


def _private_key(server_id: str, auth: MCPAuthSettings) -> str:
    """The PEM text of the private key (`private_key_file`, or the variable `private_key_env`),
    checked to be a private key that signs with `signing_algorithm`."""
    import jwt
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    if auth.private_key_env is not None:
        where = f"the environment variable {auth.private_key_env} (`private_key_env`)"
        pem = os.environ.get(auth.private_key_env, "")
        if not pem.strip():
            raise ConfigError(
                f"MCP server {server_id!r} reads its private key from {where}, which is not set: "
                "set it to the PEM text of the key"
            )
    else:
        assert auth.private_key_file is not None  # one of the two, checked by the settings
        path = Path(auth.private_key_file).expanduser()
        where = f"{str(path)!r} (`private_key_file`)"
        try:
            pem = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ConfigError(
                f"MCP server {server_id!r} cannot read its private key {where}: {reason}"
            ) from None
    try:
        key = load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError):
        raise ConfigError(
            f"MCP server {server_id!r} found no unencrypted PEM private key in {where}: give the "
            "client's private key (-----BEGIN PRIVATE KEY-----), not its public key or certificate"
        ) from None
    try:
        jwt.get_algorithm_by_name(auth.signing_algorithm).prepare_key(pem)
    except jwt.InvalidKeyError:
        kind = type(key).__name__.removesuffix("PrivateKey")
        curve = getattr(getattr(key, "curve", None), "name", None)
        raise ConfigError(
            f"MCP server {server_id!r}: the {kind}{f' ({curve})' if curve else ''} key in {where} "
            f"cannot sign {auth.signing_algorithm}: set `signing_algorithm` to the key's (ES256 for a "
            "P-256 key, RS256 for an RSA key)"
        ) from None
    return pem
