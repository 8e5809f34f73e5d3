"""MCP servers behind OAuth: `auth` settings, the token file, the login and the runs after it.

Against an authorization server and a protected MCP server the tests run on 127.0.0.1
(tests/oauth_servers.py, from the SDK's own server pieces). The test plays the person's browser:
it follows the printed authorization URL, and the authorization server redirects it to the
login's callback on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from oauth_servers import SCOPE, Servers, free_port, protected_server

from agentfsm.cli.config import Settings
from agentfsm.errors import ConfigError, MCPLoginError, MCPServerError
from agentfsm.mcp.auth_store import AUTH_DIR_VARIABLE, AuthFile
from agentfsm.mcp.client import MCPConnection
from agentfsm.mcp.login import login
from agentfsm.mcp.settings import MCPAuthSettings, MCPServerSettings

pytestmark = pytest.mark.http

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def auth_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "mcp-auth"
    monkeypatch.setenv(AUTH_DIR_VARIABLE, str(folder))
    return folder


class Browser(io.StringIO):
    """The login's output, read by a person who opens the URL it prints: each URL is followed
    (redirects too) in a thread, as a browser would, and the pages it ends on are kept."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.pages: list[str] = []
        self._threads: list[threading.Thread] = []

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.startswith("http"):
                self.urls.append(line)
                thread = threading.Thread(target=self._visit, args=(line,))
                thread.start()
                self._threads.append(thread)
        return super().write(text)

    def _visit(self, url: str) -> None:
        with urllib.request.urlopen(url, timeout=10) as page:
            self.pages.append(page.read().decode())

    def join(self) -> None:
        for thread in self._threads:
            thread.join(10)


def _settings(url: str, **auth: object) -> MCPServerSettings:
    return MCPServerSettings(
        url=url, auth={"redirect_port": free_port(), **auth}, timeout=10, connect_timeout=10
    )


# -- settings ---------------------------------------------------------------------------------


def test_auth_oauth_takes_every_default_and_a_table_is_checked():
    settings = MCPServerSettings(url="http://127.0.0.1:1/mcp", auth="oauth")
    assert settings.auth == MCPAuthSettings()
    assert settings.auth.redirect_uri == "http://127.0.0.1:33418/callback"
    table = MCPServerSettings(
        url="http://127.0.0.1:1/mcp", auth={"scopes": ["a", "b"], "client_id": "c", "redirect_port": 9999}
    )
    assert table.auth == MCPAuthSettings(scopes=("a", "b"), client_id="c", redirect_port=9999)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"command": "srv", "auth": "oauth"}, "MCP server of type 'stdio' takes no `auth`"),
        ({"type": "sse", "url": "http://h/sse", "auth": "oauth"}, "`auth` needs streamable HTTP"),
        ({"url": "http://h/mcp", "auth": "yes"}, 'MCP server `auth` must be "oauth" or a table'),
        ({"url": "http://h/mcp", "auth": {"scope": "x"}}, "unknown key 'scope' for an MCP server's auth"),
        ({"url": "http://h/mcp", "auth": {"client_secret": "s"}}, "has a `client_secret` but no `client_id`"),
        ({"url": "http://h/mcp", "auth": {"redirect_port": 0}}, "`redirect_port` must be a port from 1"),
        ({"url": "http://h/mcp", "auth": {"scopes": ["a b"]}}, "`scopes` must be a list of scope names"),
        (
            {"url": "http://h/mcp", "auth": {"client_metadata_url": "http://h/c.json"}},
            "`client_metadata_url` must be an https:// URL with a path",
        ),
        (
            {"url": "http://h/mcp", "auth": "oauth", "headers": {"Authorization": "Bearer x"}},
            "both `auth` and an `Authorization` header",
        ),
    ],
)
def test_wrong_auth_settings_are_one_line_naming_the_fix(table: dict[str, object], message: str):
    with pytest.raises(ConfigError) as raised:
        MCPServerSettings.from_table(table)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_the_config_file_takes_an_auth_table_and_hides_its_secret(tmp_path: Path):
    config = tmp_path / "agentfsm.toml"
    config.write_text(
        '[mcp.servers.docs]\nurl = "http://127.0.0.1:9/mcp"\n'
        '[mcp.servers.docs.auth]\nclient_id = "me"\nclient_secret = "hunter2"\nscopes = ["read"]\n'
    )
    auth = Settings.load(config).mcp.server_settings()["docs"].auth
    assert auth == MCPAuthSettings(client_id="me", client_secret="hunter2", scopes=("read",))
    config.write_text(config.read_text() + "redirect_port = 0\n")
    with pytest.raises(ConfigError) as raised:
        Settings.load(config)
    assert "hunter2" not in str(raised.value)
    assert "`redirect_port` must be a port from 1 to 65535" in str(raised.value)


_MACHINE = {"grant": "client_credentials", "client_id": "bot", "issuer": "https://auth.example.com"}


def test_the_client_credentials_grant_takes_one_credential_and_its_issuer():
    secret = MCPAuthSettings.from_value({**_MACHINE, "client_secret_env": "BOT_SECRET"})
    assert secret.grant == "client_credentials" and secret.secret_given
    key = MCPAuthSettings.from_value(
        {**_MACHINE, "private_key_file": "bot.pem", "signing_algorithm": "ES256"}
    )
    assert key.private_key_file == "bot.pem" and not key.secret_given
    assert "hunter2" not in repr(MCPAuthSettings(client_id="me", client_secret="hunter2"))


@pytest.mark.parametrize(
    ("auth", "message"),
    [
        (
            {"grant": "password"},
            '`grant` must be "authorization_code" (a person logs in) or "client_credentials"',
        ),
        (
            {**_MACHINE, "client_id": None, "client_secret_env": "S"},
            'grant = "client_credentials" needs the `client_id` the authorization server issued',
        ),
        (
            {**_MACHINE, "issuer": None, "client_secret_env": "S"},
            "needs `issuer`, the http(s) issuer URL of the authorization server its credentials belong to",
        ),
        (_MACHINE, "needs one credential, got none: set `client_secret_env` (or `client_secret`), or for a"),
        (
            {**_MACHINE, "client_secret_env": "S", "private_key_file": "k.pem"},
            "needs one credential, got `client_secret_env`, `private_key_file`",
        ),
        (
            {**_MACHINE, "client_secret_env": "S", "client_metadata_url": "https://h/c.json"},
            "takes no `client_metadata_url` (its client is `client_id`): remove it",
        ),
        (
            {"client_id": "c", "client_secret": "s", "client_secret_env": "S"},
            "both `client_secret` and `client_secret_env`: keep one",
        ),
        ({"client_secret_env": "S"}, "has a `client_secret` but no `client_id`"),
        (
            {"client_id": "c", "private_key_env": "K"},
            '`private_key_env` is for the client-credentials grant: set grant = "client_credentials"',
        ),
        (
            {**_MACHINE, "private_key_env": "K", "signing_algorithm": "HS256"},
            "`signing_algorithm` must be one of",
        ),
        ({"client_id": "c", "client_secret": ""}, "`client_secret` must be a non-empty string, got <hidden>"),
    ],
)
def test_wrong_client_credentials_settings_are_one_line_naming_the_key(auth: dict[str, object], message: str):
    with pytest.raises(ConfigError) as raised:
        MCPServerSettings(url="https://h/mcp", auth=auth)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


# -- the token file ---------------------------------------------------------------------------


def test_the_token_file_is_the_users_alone_written_whole_and_bound_to_its_url(auth_dir: Path):
    file = AuthFile("docs", "http://127.0.0.1:1/mcp")
    file.update(tokens={"access_token": "a"})
    file.update(client={"client_id": "c"})
    assert file.path == auth_dir / "docs.json"
    assert stat.S_IMODE(file.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(auth_dir.stat().st_mode) == 0o700
    assert file.tokens() == {"access_token": "a"} and file.client() == {"client_id": "c"}
    assert [p.name for p in auth_dir.iterdir()] == ["docs.json"]  # no temporary file left
    moved = AuthFile("docs", "http://127.0.0.1:2/mcp")
    assert moved.tokens() is None and moved.client() is None
    with pytest.raises(ConfigError, match="cannot name a token file"):
        AuthFile("../x", "http://h/mcp")


# -- the flow ---------------------------------------------------------------------------------


async def test_a_run_without_a_login_stops_in_one_line_naming_the_login_command():
    with protected_server() as servers:
        connection = MCPConnection("docs", _settings(servers.url))
        with pytest.raises(MCPLoginError) as raised:
            await connection.connect()
        await connection.aclose()
    assert str(raised.value).startswith(
        "MCP server 'docs' needs authorization and has no usable tokens: run `agentfsm mcp login docs`"
    )
    assert "authorize" not in servers.provider.log  # nobody was sent to the authorization server


async def test_login_discovers_registers_runs_pkce_stores_0600_and_a_call_succeeds(auth_dir: Path):
    with protected_server() as servers:
        settings = _settings(servers.url)
        browser = Browser()
        path = await login("docs", settings, out=browser, timeout=20)
        browser.join()
        assert servers.provider.log == ["register", "authorize", "token"]
        # the authorization URL: the discovered authorization server's endpoint, PKCE S256, state, resource
        url = urllib.parse.urlsplit(browser.urls[0])
        query = dict(urllib.parse.parse_qsl(url.query))
        assert f"{url.scheme}://{url.netloc}" == servers.issuer
        assert url.path == "/authorize"
        assert query["code_challenge_method"] == "S256"
        assert query["code_challenge"] == servers.provider.challenges[0]
        assert query["state"] and query["scope"] == SCOPE and query["resource"] == servers.url
        assert query["redirect_uri"] == settings.auth.redirect_uri  # type: ignore[union-attr]
        assert "agentfsm is authorized" in browser.pages[0]
        with pytest.raises(ConnectionRefusedError):  # the one-shot callback server has stopped
            socket.create_connection(("127.0.0.1", settings.auth.redirect_port), timeout=2)  # type: ignore[union-attr]
        # stored: 0600, with the registered client and the metadata discovered
        assert path == auth_dir / "docs.json"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        file = AuthFile("docs", servers.url)
        tokens = file.tokens()
        assert tokens is not None and tokens["access_token"] in servers.provider.access
        assert file.client() is not None and file.client()["client_id"] in servers.provider.clients  # type: ignore[index]
        discovered = file.read()["discovered"]
        assert discovered["resource"]["resource"] == servers.url
        assert discovered["server"]["issuer"].rstrip("/") == servers.issuer
        # a run: no person needed, the stored token works
        connection = MCPConnection("docs", settings)
        await connection.connect()
        try:
            assert [tool.name for tool in connection.tools] == ["echo"]
            result = await connection.call("echo", {"text": "hi"})
            assert result.error is None and result.output == "echo: hi"
        finally:
            await connection.aclose()
        assert servers.provider.log == ["register", "authorize", "token"]


async def test_an_expired_access_token_is_refreshed_in_a_session_and_in_a_later_one():
    with protected_server(access_seconds=1) as servers:
        settings = _settings(servers.url)
        browser = Browser()
        await login("docs", settings, out=browser, timeout=20)
        browser.join()
        connection = MCPConnection("docs", settings)
        await connection.connect()
        try:
            await asyncio.sleep(1.5)
            result = await connection.call("echo", {"text": "later"})
            assert result.output == "echo: later"
            assert servers.provider.log[-1] == "refresh"
        finally:
            await connection.aclose()
        await asyncio.sleep(1.5)
        refreshed = len(servers.provider.log)
        again = MCPConnection("docs", settings)  # a new process would read the same file
        await again.connect()
        try:
            assert (await again.call("echo", {"text": "next"})).output == "echo: next"
        finally:
            await again.aclose()
        assert servers.provider.log[refreshed:] == ["refresh"]
        assert "authorize" not in servers.provider.log[3:]


async def test_a_refused_refresh_names_the_login_command():
    with protected_server(access_seconds=1) as servers:
        settings = _settings(servers.url)
        browser = Browser()
        await login("docs", settings, out=browser, timeout=20)
        browser.join()
        servers.provider.refresh.clear()  # the authorization server forgot the grant
        await asyncio.sleep(1.5)
        connection = MCPConnection("docs", settings)
        with pytest.raises(MCPLoginError, match=r"run `agentfsm mcp login docs`"):
            await connection.connect()
        await connection.aclose()


async def test_a_401_without_auth_says_to_configure_auth():
    with protected_server() as servers:
        connection = MCPConnection("docs", MCPServerSettings(url=servers.url, timeout=5, connect_timeout=5))
        with pytest.raises(MCPServerError) as raised:
            await connection.connect()
        await connection.aclose()
    message = str(raised.value)
    assert "the server wants authorization (HTTP 401" in message
    assert (
        'set auth = "oauth" in `[mcp.servers.docs]` (--mcp-oauth docs for a --mcp-server) and run '
        "`agentfsm mcp login docs`"
    ) in message


# -- the client-credentials grant -------------------------------------------------------------


def _machine(servers: Servers, **auth: object) -> MCPServerSettings:
    settings = {"grant": "client_credentials", "client_id": "bot", "issuer": servers.issuer, **auth}
    return MCPServerSettings(url=servers.url, auth=settings, timeout=10, connect_timeout=10)


def _key_pair(algorithm: str) -> tuple[str, str]:
    """A new private key for `algorithm` (ES256 or RS256), and its public key, as PEM."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey = (
        ec.generate_private_key(ec.SECP256R1())
        if algorithm == "ES256"
        else rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private.decode(), public.decode()


async def _echo(connection: MCPConnection, text: str) -> str | None:
    await connection.connect()
    try:
        return (await connection.call("echo", {"text": text})).output
    finally:
        await connection.aclose()


async def test_a_secret_from_the_environment_gets_a_token_stored_0600_and_used_by_a_later_run(
    auth_dir: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("DOCS_BOT_SECRET", "s3cret")
    with protected_server() as servers:
        servers.provider.secrets["bot"] = "s3cret"
        settings = _machine(servers, client_secret_env="DOCS_BOT_SECRET")
        assert await _echo(MCPConnection("docs", settings), "hi") == "echo: hi"
        assert servers.provider.log == ["client_credentials"]  # no registration, no person
        path = auth_dir / "docs.json"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        tokens = AuthFile("docs", servers.url).tokens()
        assert tokens is not None and tokens["access_token"] in servers.provider.access
        assert "refresh_token" not in tokens and "s3cret" not in path.read_text()
        assert await _echo(MCPConnection("docs", settings), "again") == "echo: again"
        assert servers.provider.log == ["client_credentials"]  # the stored token served the next run


async def test_a_token_that_runs_out_is_replaced_with_the_credentials_not_a_login(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setenv("DOCS_BOT_SECRET", "s3cret")
    with protected_server(access_seconds=1) as servers:
        servers.provider.secrets["bot"] = "s3cret"
        connection = MCPConnection("docs", _machine(servers, client_secret_env="DOCS_BOT_SECRET"))
        await connection.connect()
        try:
            await asyncio.sleep(1.5)
            assert (await connection.call("echo", {"text": "later"})).output == "echo: later"
        finally:
            await connection.aclose()
        assert servers.provider.log == ["client_credentials", "client_credentials"]


async def test_the_configured_scopes_are_what_the_token_is_asked_for(
    auth_dir: Path, monkeypatch: pytest.MonkeyPatch
):
    """The SDK puts the server's selection (its advertised ``tools``) in place of the client's scopes
    at the 401; the configured ones are still what the authorization asks for."""
    monkeypatch.setenv("BOT_SECRET", "s3cret")
    with protected_server() as servers:
        servers.provider.secrets["bot"] = "s3cret"
        settings = _machine(servers, client_secret_env="BOT_SECRET", scopes=["tools", "notes:read"])
        assert await _echo(MCPConnection("docs", settings), "a") == "echo: a"
        (token,) = servers.provider.access.values()
        assert token.scopes == ["tools", "notes:read"]
        unset = _machine(servers, client_id="bot", client_secret_env="BOT_SECRET")
        AuthFile("docs", servers.url).path.unlink()
        assert await _echo(MCPConnection("docs", unset), "b") == "echo: b"
        assert [t.scopes for t in servers.provider.access.values()][-1] == ["tools"]  # the selection


async def test_tokens_issued_to_another_configured_client_are_not_used(
    auth_dir: Path, monkeypatch: pytest.MonkeyPatch
):
    """The configuration's ``client_id`` changed: the next run gets that client's token, it does not
    send the last client's until it runs out."""
    monkeypatch.setenv("BOT_SECRET", "s3cret")
    monkeypatch.setenv("OTHER_SECRET", "0ther")
    with protected_server() as servers:
        servers.provider.secrets |= {"bot": "s3cret", "other": "0ther"}
        assert (
            await _echo(MCPConnection("docs", _machine(servers, client_secret_env="BOT_SECRET")), "a")
            == "echo: a"
        )
        assert AuthFile("docs", servers.url).read()["issued_to"] == "bot"
        other = _machine(servers, client_id="other", client_secret_env="OTHER_SECRET")
        assert await _echo(MCPConnection("docs", other), "b") == "echo: b"
        assert servers.provider.log == ["client_credentials", "client_credentials"]
        assert AuthFile("docs", servers.url).read()["issued_to"] == "other"
        assert await _echo(MCPConnection("docs", other), "c") == "echo: c"
        assert servers.provider.log == ["client_credentials", "client_credentials"]  # its own, kept


@pytest.mark.parametrize(("algorithm", "where"), [("RS256", "file"), ("ES256", "env")])
async def test_a_private_key_signs_the_assertion_for_the_authorization_server(
    algorithm: str, where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    private, public = _key_pair(algorithm)
    if where == "file":
        (tmp_path / "bot.pem").write_text(private)
        credential = {"private_key_file": str(tmp_path / "bot.pem")}
    else:
        monkeypatch.setenv("DOCS_BOT_KEY", private)
        credential = {"private_key_env": "DOCS_BOT_KEY"}
    with protected_server() as servers:
        servers.provider.public_keys["bot"] = public
        settings = _machine(servers, signing_algorithm=algorithm, **credential)
        assert await _echo(MCPConnection("docs", settings), "signed") == "echo: signed"
    (claims,) = servers.provider.assertions
    assert claims["iss"] == claims["sub"] == "bot"
    assert claims["aud"].rstrip("/") == servers.issuer  # the authorization server's issuer


async def test_refused_credentials_say_what_to_check_and_no_login(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("DOCS_BOT_SECRET", "wrong")
    with protected_server() as servers:
        servers.provider.secrets["bot"] = "s3cret"
        connection = MCPConnection("docs", _machine(servers, client_secret_env="DOCS_BOT_SECRET"))
        with pytest.raises(MCPLoginError) as raised:
            await connection.connect()
        await connection.aclose()
    message = str(raised.value)
    assert message.startswith("authorizing agentfsm at MCP server 'docs' failed (OAuthTokenError: Token")
    assert message.endswith(
        "check the `client_id`, its secret or private key, and the `issuer` in the auth of MCP server 'docs'"
    )
    assert "\n" not in message and "mcp login" not in message


async def test_credentials_never_go_to_an_authorization_server_of_another_issuer(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setenv("DOCS_BOT_SECRET", "s3cret")
    with protected_server() as servers:
        servers.provider.secrets["bot"] = "s3cret"
        settings = _machine(servers, client_secret_env="DOCS_BOT_SECRET", issuer="https://auth.example.com")
        connection = MCPConnection("docs", settings)
        with pytest.raises(MCPLoginError) as raised:
            await connection.connect()
        await connection.aclose()
    assert "https://auth.example.com" in str(raised.value)
    assert servers.provider.log == []  # the token endpoint never saw the secret


async def test_a_secret_or_key_that_cannot_be_read_is_a_config_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv("DOCS_BOT_SECRET", raising=False)
    private, _ = _key_pair("ES256")
    monkeypatch.setenv("DOCS_BOT_KEY", private)
    cases = [
        (
            {"client_secret_env": "DOCS_BOT_SECRET"},
            "MCP server 'docs' reads its client secret from the environment variable DOCS_BOT_SECRET "
            "(`client_secret_env`), which is not set: set it to the secret",
        ),
        (
            {"private_key_file": str(tmp_path / "none.pem")},
            f"MCP server 'docs' cannot read its private key {str(tmp_path / 'none.pem')!r} "
            "(`private_key_file`): No such file or directory",
        ),
        (
            {"private_key_env": "DOCS_BOT_KEY"},  # an EC key, with the default RS256
            "MCP server 'docs': the EC (secp256r1) key in the environment variable DOCS_BOT_KEY "
            "(`private_key_env`) cannot sign RS256: set `signing_algorithm` to the key's",
        ),
    ]
    with protected_server() as servers:
        for credential, message in cases:
            connection = MCPConnection("docs", _machine(servers, **credential))
            with pytest.raises(ConfigError) as raised:
                await connection.connect()
            await connection.aclose()
            assert str(raised.value).startswith(message)
        assert servers.provider.log == []


# -- the command ------------------------------------------------------------------------------


def test_agentfsm_mcp_login_as_a_subprocess(tmp_path: Path, auth_dir: Path):
    with protected_server() as servers:
        config = tmp_path / "agentfsm.toml"
        auth = f"[mcp.servers.docs.auth]\nredirect_port = {free_port()}\n"
        config.write_text(f'[mcp.servers.docs]\nurl = "{servers.url}"\n{auth}')
        env = {**os.environ, AUTH_DIR_VARIABLE: str(auth_dir), "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-m", "agentfsm", "mcp", "login", "docs", "--config", str(config)]
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path
        )
        try:
            assert process.stdout is not None
            first = process.stdout.readline()
            assert first == "Open this URL to authorize agentfsm:\n"
            url = process.stdout.readline().strip()
            with urllib.request.urlopen(url, timeout=10) as page:  # the browser, redirected to the callback
                assert "agentfsm is authorized" in page.read().decode()
            out, err = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert process.returncode == 0, err
        assert out.strip() == f"Logged in to MCP server 'docs'; its tokens are in {auth_dir / 'docs.json'}"
        assert stat.S_IMODE((auth_dir / "docs.json").stat().st_mode) == 0o600

        config.write_text(f'[mcp.servers.docs]\nurl = "{servers.url}"\n')
        failed = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=30)
    assert failed.returncode == 2
    assert failed.stderr == (
        "agentfsm: error: MCP server 'docs' has no `auth`: add auth = \"oauth\" to [mcp.servers.docs]\n"
    )


def test_agentfsm_run_on_a_server_it_has_no_login_for_stops_in_one_line(
    clean_env: Path, llmock: Any, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    from agentfsm.cli import commands

    monkeypatch.setenv(AUTH_DIR_VARIABLE, str(clean_env / "mcp-auth"))
    with protected_server() as servers:
        config = clean_env / "agentfsm.toml"
        config.write_text(f'[mcp.servers.docs]\nurl = "{servers.url}"\nauth = "oauth"\n')
        model = ["--model", "openai/test-model", "--api-base", llmock.base_url("openai"), "--api-key", "k"]
        status = commands.main(["run", "hi", "--agent", "mcp", *model, "--config", str(config)])
    err = capfd.readouterr().err
    assert status == 1, err
    assert err.splitlines()[-1] == (
        "agentfsm: error: MCPLoginError: MCP server 'docs' needs authorization and has no usable tokens: "
        "run `agentfsm mcp login docs` (with the --config FILE or --mcp-server docs=URL that gives the "
        "server)"
    )
    assert "Traceback" not in err and "OAuth flow error" not in err
    assert llmock.requests == []  # the model was never asked


def _run(llmock: Any, *extra: str) -> list[str]:
    model = ["--model", "openai/test-model", "--api-base", llmock.base_url("openai"), "--api-key", "k"]
    return ["run", "say hi", "--agent", "mcp", *model, "--json", *extra]


def test_a_command_line_server_behind_oauth_needs_no_config_file(
    clean_env: Path, llmock: Any, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    """`mcp login NAME --mcp-server NAME=URL`, then `run --mcp-server NAME=URL --mcp-oauth NAME`."""
    from agentfsm.cli import commands
    from agentfsm.mcp.settings import DEFAULT_REDIRECT_PORT

    monkeypatch.setenv(AUTH_DIR_VARIABLE, str(clean_env / "mcp-auth"))
    with protected_server() as servers:
        browser = Browser()
        with contextlib.redirect_stdout(browser):  # the person reads the login's output
            status = commands.main(["mcp", "login", "docs", "--mcp-server", f"docs={servers.url}"])
        browser.join()
        assert status == 0, capfd.readouterr().err
        assert f"redirect_uri=http%3A%2F%2F127.0.0.1%3A{DEFAULT_REDIRECT_PORT}%2Fcallback" in browser.urls[0]
        assert browser.getvalue().endswith(
            f"Logged in to MCP server 'docs'; its tokens are in {clean_env / 'mcp-auth' / 'docs.json'}\n"
        )
        assert servers.provider.log == ["register", "authorize", "token"]

        llmock.call_tool("mcp_docs_echo", {"text": "hi"})
        llmock.call_tool("terminate", {"status": "success"})
        status = commands.main(_run(llmock, "--mcp-server", f"docs={servers.url}", "--mcp-oauth", "docs"))
    out, err = capfd.readouterr()
    assert status == 0, err
    assert json.loads(out)["stop_reason"] == "terminated"
    assert "echo: hi" in json.dumps(llmock.requests[-1].body)
    assert servers.provider.log == ["register", "authorize", "token"]  # the stored token served the run


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--mcp-oauth", "docs"],
            "--mcp-oauth docs names no --mcp-server: give the server as --mcp-server docs=https://HOST/mcp",
        ),
        (
            ["--mcp-server", "docs=docs-server --stdio", "--mcp-oauth", "docs"],
            "MCP server 'docs' is behind OAuth, which needs an http(s) URL, but --mcp-server gives it the "
            "command 'docs-server --stdio': give its streamable-HTTP URL",
        ),
    ],
)
def test_a_wrong_mcp_oauth_is_a_usage_error_in_one_line(
    clean_env: Path, llmock: Any, capfd: pytest.CaptureFixture[str], flags: list[str], message: str
):
    from agentfsm.cli import commands

    assert commands.main(_run(llmock, *flags)) == 2
    err = capfd.readouterr().err
    assert err.startswith(f"agentfsm: error: {message}") and err.count("\n") == 1
    assert llmock.requests == []


def test_mcp_login_says_a_client_credentials_server_has_none_and_names_a_missing_server(
    clean_env: Path, capfd: pytest.CaptureFixture[str]
):
    from agentfsm.cli import commands

    config = clean_env / "agentfsm.toml"
    config.write_text(
        '[mcp.servers.bot]\nurl = "https://h/mcp"\n[mcp.servers.bot.auth]\ngrant = "client_credentials"\n'
        'client_id = "bot"\nclient_secret_env = "BOT_SECRET"\nissuer = "https://auth.example.com"\n'
    )
    assert commands.main(["mcp", "login", "bot"]) == 2
    assert capfd.readouterr().err == (
        "agentfsm: error: MCP server 'bot' uses grant = \"client_credentials\": agentfsm gets its tokens "
        "with its own credentials, without a person, so there is no login; runs authorize themselves\n"
    )
    assert commands.main(["mcp", "login", "docs"]) == 2
    assert capfd.readouterr().err.endswith("pass --config FILE, or give --mcp-server docs=URL\n")
    assert commands.main(["mcp", "login", "docs", "--mcp-server", "docs=docs-server"]) == 2
    assert "MCP server 'docs' is behind OAuth, which needs an http(s) URL" in capfd.readouterr().err


async def test_a_login_nobody_comes_back_from_says_so_in_one_line(auth_dir: Path):
    with protected_server() as servers, pytest.raises(MCPLoginError) as raised:
        await login("docs", _settings(servers.url), out=io.StringIO(), timeout=0.5)
    assert "no redirect came back to 127.0.0.1:" in str(raised.value)
    assert str(raised.value).endswith(
        "within 0.5 s: open the printed URL in a browser on this machine, and run the login again"
    )
    assert not (auth_dir / "docs.json").exists() or AuthFile("docs", servers.url).tokens() is None


def test_the_guides_auth_configuration_loads(tmp_path: Path):
    guide = (Path(__file__).resolve().parent.parent / "docs" / "guides" / "mcp.md").read_text(
        encoding="utf-8"
    )
    section = guide[guide.index("## Servers behind OAuth") :]
    block = section[section.index("```toml\n") + len("```toml\n") : section.index("```\n\n```sh")]
    config = tmp_path / "agentfsm.toml"
    config.write_text(block)
    servers = Settings.load(config).mcp.server_settings()
    assert servers["docs"].auth == MCPAuthSettings()
    assert servers["notes"].auth is not None and servers["notes"].auth.scopes == ("notes:read",)
    assert servers["notes"].auth.client_secret_env == "NOTES_SECRET"
    machine = servers["reports"].auth
    assert machine is not None and machine.grant == "client_credentials" and machine.secret_given
