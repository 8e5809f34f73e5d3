"""A small server on 127.0.0.1 answering in the shapes of several providers' APIs, recording requests.

llmock speaks only the OpenAI wire; the settings tests need to see what litellm sends to
Anthropic, Gemini, Azure and Ollama (a temperature, an ``api-version``, Ollama's model lookup),
so this answers each provider's path with a minimal real reply and keeps every request.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

_OPENAI = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "stub",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}
_ANTHROPIC = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 5, "output_tokens": 1},
}
_GEMINI = {
    "candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP"}],
    "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 1, "totalTokenCount": 6},
}
_OLLAMA_CHAT = {
    "model": "stub",
    "created_at": "2026-01-01T00:00:00Z",
    "message": {"role": "assistant", "content": "ok"},
    "done": True,
    "done_reason": "stop",
    "prompt_eval_count": 5,
    "eval_count": 1,
}
_OLLAMA_SHOW = {"template": "{{ .Tools }}", "model_info": {"llama.context_length": 8192}}


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class ProviderStub:
    """Serves until `close()`; `show_delay` holds Ollama's ``/api/show`` answer back that long."""

    show_delay: float = 0.0
    requests: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                stub.requests.append(
                    Seen(
                        "POST",
                        parts.path,
                        parse_qs(parts.query),
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                    )
                )
                self._answer(stub.reply_for(parts.path))

            def _answer(self, reply: dict[str, Any] | None) -> None:
                data = json.dumps(reply if reply is not None else {"error": "no such path"}).encode()
                self.send_response(200 if reply is not None else 404)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def reply_for(self, path: str) -> dict[str, Any] | None:
        if path.endswith("/api/show"):
            time.sleep(self.show_delay)
            return _OLLAMA_SHOW
        if path.endswith("/api/chat"):
            return _OLLAMA_CHAT
        if path.endswith("/messages"):
            return _ANTHROPIC
        if path.endswith(":generateContent"):
            return _GEMINI
        if path.endswith("/chat/completions"):
            return _OPENAI
        return None

    def paths(self) -> list[str]:
        return [seen.path for seen in self.requests]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
