"""An OAuth authorization server and an MCP server it protects, both on 127.0.0.1, for the tests.

Built from the MCP SDK's own server pieces: `mcp.server.auth.routes.create_auth_routes` (metadata
at ``/.well-known/oauth-authorization-server``, ``/register``, ``/authorize``, ``/token``) over an
in-memory `Provider`, served on one port; and an `MCPServer` with `AuthSettings` naming that
authorization server, served on another, which publishes its protected-resource metadata and
answers a request without a valid bearer token with 401 and ``WWW-Authenticate: Bearer
resource_metadata=...``. The resource server checks tokens with the same provider.

The authorization endpoint consents at once: it redirects to the client's redirect URI with a
code, so a test plays the person's browser by following the printed URL. Access tokens live
`Provider.access_seconds`; `Provider.log` records what each endpoint was asked, in order.

The token endpoint also grants ``client_credentials`` (which the SDK's server pieces do not) to the
machine clients a test enters in `Provider.secrets` (authenticated with HTTP Basic) or
`Provider.public_keys` (a ``private_key_jwt`` assertion, RFC 7523: signed by the matching private
key, ``iss`` and ``sub`` the client id, ``aud`` the issuer). Such a grant issues no refresh token.

`protected_server()` runs both in a thread of their own (uvicorn) and stops them on exit. Also
runnable as a program: ``python tests/oauth_servers.py [SECONDS]`` prints the MCP endpoint and
serves for that long (an hour by default) or until interrupted.
"""

from __future__ import annotations

import base64
import contextlib
import secrets
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.routes import create_auth_routes
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl

SCOPE = "tools"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Provider:
    """An in-memory authorization server (`OAuthAuthorizationServerProvider`)."""

    access_seconds: int = 3600
    clients: dict[str, OAuthClientInformationFull] = field(default_factory=dict)
    codes: dict[str, AuthorizationCode] = field(default_factory=dict)
    access: dict[str, AccessToken] = field(default_factory=dict)
    refresh: dict[str, RefreshToken] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    challenges: list[str] = field(default_factory=list)
    secrets: dict[str, str] = field(default_factory=dict)
    """Machine clients of the client-credentials grant with a secret, by client id."""
    public_keys: dict[str, str] = field(default_factory=dict)
    """Machine clients of the client-credentials grant with a key (its public PEM), by client id."""
    assertions: list[dict[str, Any]] = field(default_factory=list)
    """The claims of each client assertion accepted."""

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.log.append("register")
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        self.log.append("authorize")
        self.challenges.append(params.code_challenge)
        code = secrets.token_urlsafe(16)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [SCOPE],
            expires_at=time.time() + 300,
            client_id=client.client_id or "",
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.log.append("token")
        del self.codes[authorization_code.code]
        return self._issue(client, authorization_code.scopes, authorization_code.resource)

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.log.append("refresh")
        del self.refresh[refresh_token.token]
        return self._issue(client, scopes or refresh_token.scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: Any) -> None:
        self.access.pop(getattr(token, "token", ""), None)

    def _issue(
        self, client: OAuthClientInformationFull, scopes: list[str], resource: str | None
    ) -> OAuthToken:
        client_id = client.client_id or ""
        access, refresh = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
        self.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(time.time()) + self.access_seconds + 1,  # never before the client's reckoning
            resource=resource,
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource
        )
        return OAuthToken(
            access_token=access, expires_in=self.access_seconds, scope=" ".join(scopes), refresh_token=refresh
        )

    def client_credentials(
        self, form: dict[str, str], authorization: str, issuer: str
    ) -> tuple[int, dict[str, Any]]:
        """The token endpoint's answer (status, JSON) to a ``client_credentials`` request."""
        self.log.append("client_credentials")
        client_id = self._machine(form, authorization, issuer)
        if client_id is None:
            return 401, {"error": "invalid_client"}
        access = secrets.token_urlsafe(16)
        scopes = form.get("scope", SCOPE).split()
        self.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(time.time()) + self.access_seconds + 1,
            resource=form.get("resource"),
        )
        body = {"access_token": access, "token_type": "Bearer", "expires_in": self.access_seconds}
        return 200, {**body, "scope": " ".join(scopes)}

    def _machine(self, form: dict[str, str], authorization: str, issuer: str) -> str | None:
        """The machine client the request authenticates as, or None."""
        import jwt

        if authorization.startswith("Basic "):
            pair = base64.b64decode(authorization.removeprefix("Basic ")).decode()
            client_id, _, secret = (urllib.parse.unquote(part) for part in pair.partition(":"))
            return client_id if self.secrets.get(client_id) == secret else None
        if form.get("client_assertion_type") != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer":
            return None
        assertion = form.get("client_assertion", "")
        client_id = jwt.decode(assertion, options={"verify_signature": False}).get("iss")
        key = self.public_keys.get(client_id or "")
        if key is None:
            return None
        try:
            claims = jwt.decode(
                assertion, key, algorithms=["RS256", "ES256"], audience=[issuer, f"{issuer}/"]
            )
        except jwt.InvalidTokenError:
            return None
        if claims.get("sub") != client_id:
            return None
        self.assertions.append(claims)
        return client_id

    # the resource server's `TokenVerifier`
    async def verify_token(self, token: str) -> AccessToken | None:
        return await self.load_access_token(token)


@dataclass
class Servers:
    provider: Provider
    issuer: str
    url: str
    """The MCP endpoint, ``http://127.0.0.1:PORT/mcp``."""


def _apps(provider: Provider, as_port: int, mcp_port: int) -> tuple[Any, Any]:
    from mcp.server.mcpserver import MCPServer
    from starlette.applications import Starlette

    issuer = f"http://127.0.0.1:{as_port}"
    routes = create_auth_routes(
        provider=provider,  # type: ignore[arg-type]
        issuer_url=AnyHttpUrl(issuer),
        client_registration_options=ClientRegistrationOptions(
            enabled=True, valid_scopes=[SCOPE], default_scopes=[SCOPE]
        ),
    )
    for route in routes:
        if route.path == "/token":
            route.app = _with_client_credentials(route.app, provider, issuer)
    authorization = Starlette(routes=routes)
    server = MCPServer(
        "protected",
        token_verifier=provider,
        auth=AuthSettings(
            issuer_url=AnyHttpUrl(issuer),
            resource_server_url=AnyHttpUrl(f"http://127.0.0.1:{mcp_port}/mcp"),
            required_scopes=[SCOPE],
            validate_token_resource=True,
        ),
    )

    @server.tool()
    def echo(text: str) -> str:
        """Say `text` back."""
        return f"echo: {text}"

    return authorization, server.streamable_http_app()


def _with_client_credentials(sdk_token: Any, provider: Provider, issuer: str) -> Any:
    """The token endpoint: a ``client_credentials`` request is answered by `provider`, any other
    by the SDK's endpoint `sdk_token` (an ASGI app), which is handed the body read here."""
    from starlette.responses import JSONResponse

    async def token(scope: Any, receive: Any, send: Any) -> None:
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        form = dict(urllib.parse.parse_qsl(body.decode()))
        if form.get("grant_type") == "client_credentials":
            headers = dict(scope["headers"])
            authorization = headers.get(b"authorization", b"").decode()
            status, answer = provider.client_credentials(form, authorization, issuer)
            await JSONResponse(answer, status_code=status)(scope, receive, send)
            return

        replay = [{"type": "http.request", "body": body, "more_body": False}]

        async def replayed() -> Any:
            return replay.pop() if replay else await receive()

        await sdk_token(scope, replayed, send)

    return token


@contextlib.contextmanager
def protected_server(*, access_seconds: int = 3600) -> Iterator[Servers]:
    """Both servers, running in a thread on 127.0.0.1, until the block ends."""
    import asyncio

    import uvicorn

    provider = Provider(access_seconds=access_seconds)
    as_port, mcp_port = free_port(), free_port()
    authorization, resource = _apps(provider, as_port, mcp_port)
    servers = [
        uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
        for app, port in ((authorization, as_port), (resource, mcp_port))
    ]

    async def serve() -> None:
        await asyncio.gather(*(server.serve() for server in servers))

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not all(server.started for server in servers):
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the OAuth test servers did not start")
        time.sleep(0.02)
    try:
        yield Servers(provider, f"http://127.0.0.1:{as_port}", f"http://127.0.0.1:{mcp_port}/mcp")
    finally:
        for server in servers:
            server.should_exit = True
        thread.join(10)


if __name__ == "__main__":  # pragma: no cover - a program for manual checks
    with protected_server() as running:
        print(running.url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait(float(sys.argv[1]) if len(sys.argv) > 1 else 3600)
