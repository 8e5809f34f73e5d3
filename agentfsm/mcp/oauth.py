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
  401, and answered with a whole new authorization instead of a refresh (`_Provider`).
- The authorization step itself. In a run nobody is there to sign in: `needs_login` stops the
  flow with an `MCPLoginError` naming ``agentfsm mcp login SERVER``. The login command hands in
  a `Login` (`agentfsm.mcp.login`) that shows the URL and waits for the redirect.

A client ID metadata document (CIMD) is used when `client_metadata_url` is set and the server
says it takes one; otherwise the client registers. Not offered: the client-credentials grant (no
person; the SDK's `ClientCredentialsOAuthProvider` is not configurable here), token revocation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import MCPLoginError
from .auth_store import AuthFile
from .settings import MCPAuthSettings, MCPServerSettings

if TYPE_CHECKING:
    from mcp.client.auth import OAuthClientProvider
    from mcp.client.auth.oauth2 import OAuthContext
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthToken

__all__ = ["FileTokenStorage", "Login", "login_hint", "oauth_provider"]


class Login(Protocol):
    """The person's side of an authorization: show them the URL, then wait for the redirect."""

    async def show(self, url: str) -> None:
        """Send the person to `url` (print it, open a browser); the redirect may come at once."""

    async def redirected(self) -> Mapping[str, str]:
        """The query of the redirect to the callback: ``code``, ``state`` (and ``iss``), or ``error``."""


def login_hint(server_id: str) -> str:
    """What to run to authorize agentfsm at the server `server_id`."""
    return f"run `agentfsm mcp login {server_id}` (add --config FILE if the server is configured there)"


class FileTokenStorage:
    """The SDK's `TokenStorage` for the server `server_id`: its tokens and its client in one file.

    A client configured in `auth` (``client_id``) is the client, and is never stored."""

    def __init__(self, file: AuthFile, auth: MCPAuthSettings, *, fresh: bool = False) -> None:
        self.file = file
        self.auth = auth
        self.fresh = fresh
        """Hand out no stored tokens (a login authorizes anew), but store the new ones."""
        self.context: OAuthContext | None = None
        """The provider's state, whose discovered metadata is stored with the tokens."""

    async def get_tokens(self) -> OAuthToken | None:
        from mcp.shared.auth import OAuthToken

        tokens = None if self.fresh else self.file.tokens()
        return None if tokens is None else OAuthToken.model_validate(tokens)

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
        }
        if found:
            fields["discovered"] = found
        self.file.update(**fields)
        self.fresh = False

    def restore(self, context: OAuthContext) -> None:
        """Give the provider what this file remembers beyond the SDK's `TokenStorage`: when the
        access token runs out, and the metadata discovered when the tokens were issued (the
        token endpoint a refresh goes to)."""
        from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata

        self.context = context
        if context.current_tokens is not None:
            context.token_expiry_time = self.file.expires_at()
        found = self.file.read().get("discovered") if self.file.tokens() is not None else None
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
                client_secret=self.auth.client_secret,
                redirect_uris=[self.auth.redirect_uri],  # type: ignore[list-item]  # pydantic parses it
                # RFC 6749 2.3.1: every authorization server takes HTTP Basic for a client's secret
                token_endpoint_auth_method="client_secret_basic" if self.auth.client_secret else "none",
            )
        client = self.file.client()
        return None if client is None else OAuthClientInformationFull.model_validate(client)

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        if self.auth.client_id is None:
            self.file.update(client=client_info.model_dump(mode="json", exclude_none=True))


def oauth_provider(
    server_id: str,
    settings: MCPServerSettings,
    *,
    login: Login | None = None,
    refused: Callable[[str], None] | None = None,
) -> OAuthClientProvider:
    """The ``httpx.Auth`` of the server `server_id`, whose `settings` have `auth`. Without `login`,
    an authorization that needs a person raises `MCPLoginError` (told to `refused` first: the
    SDK's transport reports it only as its connection closing); with it, the person is asked."""
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

    auth, url = settings.auth, settings.url
    assert auth is not None and url is not None  # checked by the caller
    storage = FileTokenStorage(AuthFile(server_id, url), auth, fresh=login is not None)
    metadata = OAuthClientMetadata(
        client_name=auth.client_name,
        redirect_uris=[auth.redirect_uri],  # type: ignore[list-item]  # pydantic parses it
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        scope=" ".join(auth.scopes) or None,
        token_endpoint_auth_method="client_secret_basic" if auth.client_secret else "none",
    )

    async def show(url: str) -> None:
        if login is None:
            why = f"MCP server {server_id!r} needs authorization and has no usable tokens"
            why = f"{why}: {login_hint(server_id)}"
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

    provider = _provider_class()(
        url,
        metadata,
        storage,
        redirect_handler=show,
        callback_handler=redirected,
        client_metadata_url=auth.client_metadata_url,
    )
    storage.context = provider.context
    return provider


def _provider_class() -> type[OAuthClientProvider]:
    from mcp.client.auth import OAuthClientProvider

    class _Provider(OAuthClientProvider):
        """The SDK's provider, told when a stored access token runs out (see the module's doc)."""

        async def _initialize(self) -> None:
            await super()._initialize()
            storage = self.context.storage
            if isinstance(storage, FileTokenStorage):
                storage.restore(self.context)

    return _Provider
