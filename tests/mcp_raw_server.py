"""A stdio MCP server written by hand, byte by byte, that misbehaves on request.

Run as ``python tests/mcp_raw_server.py [--bad-schema]``. It speaks the 2025 handshake only
(``server/discover`` is refused, as a legacy server does) and writes its answers as raw bytes,
so a test can make it send what the SDK's own server never would. Its tools:

- ``echo(text)``: ``echo: <text>``;
- ``garble(text)``: first a line of bytes that are not UTF-8, then the answer ``garbled: <text>``;
- ``latin1(text)``: the answer itself encoded in Latin-1 (not UTF-8): ``café: <text>``;
- ``stray(text)``: first a line of plain text (a stray print), then ``stray: <text>``;
- ``malformed()``: an answer whose ``result`` is a string, not an object (no valid JSON-RPC);
- ``die()``: the process exits in the middle of the call;
- ``big(mb)``: a text of `mb` megabytes of ``x``;
- ``flood(mb)``: `mb` megabytes of ``x`` with no newline, then nothing (the process stays).

``--bad-schema`` adds two tools whose ``inputSchema`` is not an object schema: ``listy`` (of
type ``array``) and ``stringy`` (a string instead of a schema).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

_TEXT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
_TOOLS: list[dict[str, Any]] = [
    {"name": "echo", "description": "Return the text.", "inputSchema": _TEXT},
    {"name": "garble", "description": "A line that is not UTF-8, then the text.", "inputSchema": _TEXT},
    {"name": "latin1", "description": "The answer in Latin-1.", "inputSchema": _TEXT},
    {"name": "stray", "description": "A stray print, then the text.", "inputSchema": _TEXT},
    {"name": "malformed", "description": "A result that is no object.", "inputSchema": {"type": "object"}},
    {"name": "die", "description": "Exit mid-call.", "inputSchema": {"type": "object"}},
    {
        "name": "flood",
        "description": "Megabytes without a newline, then silence.",
        "inputSchema": {"type": "object", "properties": {"mb": {"type": "integer"}}, "required": ["mb"]},
    },
    {
        "name": "big",
        "description": "A text of `mb` megabytes.",
        "inputSchema": {"type": "object", "properties": {"mb": {"type": "integer"}}, "required": ["mb"]},
    },
]
_BAD = [
    {"name": "listy", "description": "Its schema is an array's.", "inputSchema": {"type": "array"}},
    {"name": "stringy", "description": "Its schema is a string.", "inputSchema": "no schema"},
]


def _write(data: bytes) -> None:
    sys.stdout.buffer.write(data + b"\n")
    sys.stdout.buffer.flush()


def _answer(request_id: Any, result: dict[str, Any], encoding: str = "utf-8") -> None:
    line = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}, ensure_ascii=False)
    _write(line.encode(encoding))


def _text(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


def _call(request_id: Any, name: str, arguments: dict[str, Any]) -> None:
    text = str(arguments.get("text", ""))
    if name == "echo":
        _answer(request_id, _text(f"echo: {text}"))
    elif name == "garble":
        _write(b"\xff\xfe\x80 not UTF-8 \xc3\x28")
        _answer(request_id, _text(f"garbled: {text}"))
    elif name == "latin1":
        _answer(request_id, _text(f"café: {text}"), encoding="latin-1")
    elif name == "stray":
        _write(b"debug: a stray print on stdout")
        _answer(request_id, _text(f"stray: {text}"))
    elif name == "malformed":
        _write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": "not an object"}).encode())
    elif name == "die":
        os._exit(3)
    elif name == "flood":
        for _ in range(int(arguments["mb"])):
            sys.stdout.buffer.write(b"x" * 1024 * 1024)
        sys.stdout.buffer.flush()
        time.sleep(3600)
    elif name == "big":
        _answer(request_id, _text("x" * (int(arguments["mb"]) * 1024 * 1024)))
    else:
        _error(request_id, -32602, f"unknown tool {name!r}")


def _error(request_id: Any, code: int, message: str) -> None:
    _write(
        json.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}).encode()
    )


def main() -> None:
    tools = _TOOLS + (_BAD if "--bad-schema" in sys.argv[1:] else [])
    for raw in sys.stdin.buffer:
        message = json.loads(raw)
        if "id" not in message:  # a notification
            continue
        request_id, method = message["id"], message.get("method")
        params = message.get("params") or {}
        if method == "initialize":
            _answer(
                request_id,
                {
                    "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "agentfsm-raw", "version": "1.0"},
                },
            )
        elif method == "tools/list":
            _answer(request_id, {"tools": tools})
        elif method == "tools/call":
            _call(request_id, params["name"], params.get("arguments") or {})
        elif method == "ping":
            _answer(request_id, {})
        else:
            _error(request_id, -32601, f"method not found: {method}")


if __name__ == "__main__":
    main()
