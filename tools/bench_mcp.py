"""The MCP client on large stdio results: agentfsm's connection beside the SDK's own stdio client.

One real stdio server (`tests/mcp_raw_server.py`) answers `big(mb)` with a text of `mb` megabytes,
in one line. The baseline is the SDK's `Client` over its `stdio_client`, whose reader joins each
chunk to the line so far (time quadratic in the line's length); agentfsm's `MCPConnection` reads
stdout as bytes (`agentfsm.mcp.client`) and keeps at most `MAX_RESULT_CHARS` of the text. Both run
in this process, one after the other, on the same server script, so the ratio is like for like.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "tests" / "mcp_raw_server.py"


async def _sdk(mb: int) -> float:
    from mcp import StdioServerParameters
    from mcp.client import Client

    params = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
    async with Client(params, mode="auto", read_timeout_seconds=600.0) as client:
        started = time.perf_counter()
        result = await client.call_tool("big", {"mb": mb})
        took = time.perf_counter() - started
    assert len(result.content[0].text) == mb * 1024 * 1024  # type: ignore[union-attr]
    return took


async def _agentfsm(mb: int) -> tuple[float, int]:
    from agentfsm.mcp import MCPServerSettings
    from agentfsm.mcp.client import MCPConnection

    settings = MCPServerSettings(command=sys.executable, args=(str(SERVER),), timeout=600.0)
    connection = MCPConnection("bench", settings)
    await connection.connect()
    try:
        started = time.perf_counter()
        result = await connection.call("big", {"mb": mb})
        took = time.perf_counter() - started
    finally:
        await connection.aclose()
    assert result.error is None and result.output is not None, result.error
    return took, len(result.output)


async def mcp(quick: bool) -> dict[str, Any]:
    sizes = (5, 20) if quick else (5, 20, 50)
    rows: dict[str, dict[str, float]] = {}
    for mb in sizes:
        ours, kept = await _agentfsm(mb)
        rows[f"{mb} MB"] = {"sdk_s": await _sdk(mb), "agentfsm_s": ours, "kept_chars": kept}
    return {"results": rows}


def lines(m: dict[str, Any], out: list[str]) -> None:
    out.append("An MCP stdio result of one long line (s; the SDK's stdio client beside agentfsm's)")
    out.append(f"  {'size':<8}{'SDK':>9}{'agentfsm':>10}{'ratio':>8}{'chars kept':>12}")
    for size, row in m["results"].items():
        ratio = row["sdk_s"] / row["agentfsm_s"] if row["agentfsm_s"] else float("inf")
        out.append(
            f"  {size:<8}{row['sdk_s']:>9.2f}{row['agentfsm_s']:>10.2f}{ratio:>7.1f}x{row['kept_chars']:>12,}"
        )
