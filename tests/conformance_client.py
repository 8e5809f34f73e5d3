"""The MCP client under test for the official conformance suite's client scenarios.

``python tests/conformance_client.py SERVER_URL``, as `@modelcontextprotocol/conformance client
--command` runs it: the scenario is in ``MCP_CONFORMANCE_SCENARIO``, its data (a pre-registered
client's id and secret; for the client-credentials scenarios the machine client's id and its
secret, or its PEM private key and the key's algorithm) in ``MCP_CONFORMANCE_CONTEXT``. The server
is reached as a configured ``[mcp.servers.conformance]`` with ``auth`` is: `MCPConnection` and the
SDK's OAuth. Being headless, the login's person is played here: the authorization URL is fetched,
and the redirect it answers with is followed to the login's callback on 127.0.0.1. A machine
client has no person; its `issuer`, which its operator would know, is read from the server's
protected-resource metadata, and its key is handed over in an environment variable
(`private_key_env`). Then the tools are listed and each is called with no arguments. Exit 0 when
that worked, 1 (and the reason on stderr) when not.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from agentfsm.mcp.auth_store import AUTH_DIR_VARIABLE
from agentfsm.mcp.client import MCPConnection
from agentfsm.mcp.login import TerminalLogin
from agentfsm.mcp.settings import MCPServerSettings


class Headless(TerminalLogin):
    """The person: follows the authorization URL to the callback."""

    async def show(self, url: str) -> None:
        await super().show(url)
        asyncio.get_running_loop().run_in_executor(None, _visit, url)

    async def redirected(self) -> Mapping[str, str]:
        return await asyncio.wait_for(super().redirected(), 20)


def _visit(url: str) -> None:
    try:
        with urllib.request.urlopen(url, timeout=10) as page:
            page.read()
    except Exception as exc:  # the callback's answer is not needed: the redirect reached it or not
        print(f"following the authorization URL: {exc}", file=sys.stderr)


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _machine(url: str, context: dict[str, Any]) -> dict[str, Any]:
    """The auth of the client-credentials grant, from the scenario's context."""
    origin = urllib.parse.urlsplit(url)
    path = f"/.well-known/oauth-protected-resource{origin.path}"
    with urllib.request.urlopen(f"{origin.scheme}://{origin.netloc}{path}", timeout=10) as page:
        issuer = json.loads(page.read())["authorization_servers"][0]
    auth = {"grant": "client_credentials", "client_id": context["client_id"], "issuer": issuer}
    if context.get("client_secret"):
        return {**auth, "client_secret": context["client_secret"]}
    os.environ["CONFORMANCE_PRIVATE_KEY"] = context["private_key_pem"]
    algorithm = context.get("signing_algorithm", "RS256")
    return {**auth, "private_key_env": "CONFORMANCE_PRIVATE_KEY", "signing_algorithm": algorithm}


async def main(url: str) -> int:
    context: dict[str, Any] = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    auth: dict[str, Any] = {"redirect_port": _port()}
    if scenario == "auth/basic-cimd":  # the document the suite serves
        auth["client_metadata_url"] = "https://conformance-test.local/client-metadata.json"
    if scenario.startswith("auth/client-credentials-"):
        auth = _machine(url, context)
    elif context.get("client_id"):
        auth["client_id"] = context["client_id"]
        if context.get("client_secret"):
            auth["client_secret"] = context["client_secret"]
    settings = MCPServerSettings(url=url, auth=auth, timeout=15, connect_timeout=25)
    person = Headless(auth.get("redirect_port", 0), out=sys.stderr)
    connection = MCPConnection("conformance", settings, login=person)
    try:
        await connection.connect()
        for tool in connection.tools:
            result = await connection.call(tool.name, {})
            print(f"{tool.name}: {result.error or result.output}")
    finally:
        await connection.aclose()
        await person.close()
    return 0


if __name__ == "__main__":
    os.environ.setdefault(AUTH_DIR_VARIABLE, tempfile.mkdtemp(prefix="mcp-auth-"))
    sys.exit(asyncio.run(main(sys.argv[-1])))
