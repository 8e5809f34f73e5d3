"""A loopback server that speaks four providers' wire formats, and refuses what they refuse.

litellm translates agentfsm's OpenAI-format requests into each provider's own API; a test
only shows that a history survives the trip when the server on the other end checks it the
way the provider does. Served on 127.0.0.1, one path prefix per provider (the URLs litellm
builds from `api_base`):

- ``/anthropic/v1/messages``: the Anthropic Messages API. Replies carry a ``thinking`` block
  with a signature before each ``tool_use``. With thinking on, a request whose last assistant
  turn calls tools without starting with a thinking block whose signature this server issued
  is refused as Anthropic refuses it (400 ``invalid_request_error``).
- ``/gemini/v1beta/models/{model}:generateContent``: Gemini's generateContent. Each
  ``functionCall`` part carries a ``thoughtSignature``; a model turn whose first function call
  comes back without the signature issued for it is refused as Gemini 3 refuses it
  (400 ``INVALID_ARGUMENT``).
- ``/deepseek/chat/completions``: DeepSeek's chat completions. ``deepseek-reasoner`` replies
  carry ``reasoning_content``; an assistant message with tool calls that comes back without it
  is refused (400 "The reasoning_content in the thinking mode must be passed back to the API.").
- ``/mistral/v1/chat/completions``: Mistral's chat completions. A ``user`` message right after
  a ``tool`` message is refused (400 "Unexpected role 'user' after role 'tool'"), and so is a
  request that ends with an assistant message.

What the model says is scripted per provider (`ProviderServer.script`): each turn is a tool
call (`Call`) or a final text. Every request body is recorded (`requests`), refused or not.
The error bodies are the providers' own, as they return them.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

__all__ = ["ANTHROPIC_THINKING_ERROR", "Call", "ProviderServer", "Received"]

ANTHROPIC_THINKING_ERROR = (
    "When `thinking` is enabled, a final `assistant` message must start with a thinking block "
    "(preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include "
    "thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult "
    "our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)
DEEPSEEK_REASONING_ERROR = "The reasoning_content in the thinking mode must be passed back to the API."
GEMINI_SIGNATURE_ERROR = (
    "Function call is missing a thought_signature in functionCall parts. This is required for tools to "
    "work correctly, and missing thought_signature may lead to degraded model performance. Additional "
    "data, function call `default_api:{name}` , position {position}. Please refer to "
    "https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
)


@dataclass(frozen=True)
class Call:
    """A scripted turn: the model calls `name` with `arguments`."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


Turn = Call | str


@dataclass
class Received:
    """One request as the server got it."""

    provider: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    status: int = 200
    """What the server answered (400 when it refused the request)."""
    reply: dict[str, Any] = field(default_factory=dict)
    """The body it answered with (the provider's reply, or its error)."""


def _tokens(value: Any) -> int:
    return max(1, len(json.dumps(value)) // 4)


class ProviderServer:
    """The server; `start()` binds a free port on 127.0.0.1, `stop()` closes it."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.turns: dict[str, deque[Turn]] = defaultdict(deque)
        self.issued: dict[str, set[str]] = defaultdict(set)
        """Signatures (Anthropic, Gemini) and reasoning texts (DeepSeek) handed out, per provider."""
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -- set-up ------------------------------------------------------------------

    def script(self, provider: str, turns: list[Turn]) -> None:
        self.turns[provider].extend(turns)

    def base(self, provider: str) -> str:
        """The `api_base` to give litellm for `provider`."""
        suffix = "/v1beta" if provider == "gemini" else ""
        return f"http://127.0.0.1:{self.port}/{provider}{suffix}"

    def received(self, provider: str) -> list[Received]:
        return [r for r in self.requests if r.provider == provider]

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/anthropic/v1/messages", self._anthropic)
        app.router.add_post("/gemini/v1beta/models/{model_and_method}", self._gemini)
        app.router.add_post("/deepseek/chat/completions", self._deepseek)
        app.router.add_post("/mistral/v1/chat/completions", self._mistral)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- helpers -----------------------------------------------------------------

    async def _receive(self, provider: str, request: web.Request) -> Received:
        received = Received(provider, request.path_qs, dict(request.headers), await request.json())
        self.requests.append(received)
        return received

    def _next_turn(self, received: Received) -> Turn:
        turns = self.turns[received.provider]
        if not turns:
            received.status = 500
            raise web.HTTPInternalServerError(text=f"the test scripted no more turns for {received.provider}")
        return turns.popleft()

    def _signature(self, provider: str, seed: str) -> str:
        raw = hashlib.sha256(f"{provider}:{seed}:{next(self._ids)}".encode()).digest()
        signature = base64.b64encode(raw * 3).decode()
        self.issued[provider].add(signature)
        return signature

    @staticmethod
    def _answer(received: Received, body: dict[str, Any], status: int = 200) -> web.Response:
        received.status, received.reply = status, body
        return web.json_response(body, status=status)

    def _refuse(self, received: Received, body: dict[str, Any], status: int = 400) -> web.Response:
        return self._answer(received, body, status)

    # -- Anthropic Messages API ---------------------------------------------------

    async def _anthropic(self, request: web.Request) -> web.Response:
        received = await self._receive("anthropic", request)
        body = received.body
        if "x-api-key" not in {key.lower() for key in received.headers}:
            error = {"type": "authentication_error", "message": "x-api-key header is required"}
            return self._refuse(received, {"type": "error", "error": error}, 401)
        thinking = (body.get("thinking") or {}).get("type") == "enabled"
        if thinking and (problem := self._anthropic_thinking_problem(body["messages"])):
            error = {"type": "invalid_request_error", "message": problem}
            return self._refuse(received, {"type": "error", "error": error, "request_id": "req_011"})
        turn = self._next_turn(received)
        content: list[dict[str, Any]] = []
        if thinking:
            text = f"The user wants {turn.name}." if isinstance(turn, Call) else "I can answer now."
            content.append(
                {"type": "thinking", "thinking": text, "signature": self._signature("anthropic", text)}
            )
        if isinstance(turn, Call):
            content.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_01{next(self._ids):022d}",
                    "name": turn.name,
                    "input": turn.arguments,
                }
            )
        else:
            content.append({"type": "text", "text": turn})
        return self._answer(
            received,
            {
                "id": f"msg_01{next(self._ids):022d}",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": content,
                "stop_reason": "tool_use" if isinstance(turn, Call) else "end_turn",
                "stop_sequence": None,
                "usage": {
                    "input_tokens": _tokens(body["messages"]),
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                    "output_tokens": _tokens(content),
                    "service_tier": "standard",
                },
            },
        )

    def _anthropic_thinking_problem(self, messages: list[dict[str, Any]]) -> str | None:
        """Why Anthropic refuses this history with thinking on, or None."""
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if message["role"] != "assistant":
                continue
            blocks = message["content"] if isinstance(message["content"], list) else [{"type": "text"}]
            if not any(block.get("type") == "tool_use" for block in blocks):
                return None  # the final assistant turn is no tool-use turn: nothing is required
            first = blocks[0]
            if first.get("type") not in ("thinking", "redacted_thinking"):
                return (
                    f"messages.{index}.content.0.type: Expected `thinking` or `redacted_thinking`, "
                    f"but found `{first.get('type')}`. {ANTHROPIC_THINKING_ERROR}"
                )
            if first.get("type") == "thinking" and first.get("signature") not in self.issued["anthropic"]:
                return f"messages.{index}.content.0: Invalid `signature` in `thinking` block"
            return None
        return None

    # -- Gemini generateContent ---------------------------------------------------

    async def _gemini(self, request: web.Request) -> web.Response:
        received = await self._receive("gemini", request)
        model, _, method = request.match_info["model_and_method"].partition(":")
        if method != "generateContent":
            raise web.HTTPNotFound()
        if "x-goog-api-key" not in {k.lower() for k in received.headers} and "key" not in request.query:
            error = {
                "code": 403,
                "message": "Method doesn't allow unregistered callers (callers without established "
                "identity). Please use API Key or other form of API consumer identity to call this API.",
                "status": "PERMISSION_DENIED",
            }
            return self._refuse(received, {"error": error}, 403)
        for content in received.body.get("contents", []):
            if content.get("role") != "model":
                continue
            # Gemini reads its JSON as protobuf does: camelCase and snake_case names alike
            calls = [
                (i, part)
                for i, part in enumerate(content.get("parts", []))
                if "functionCall" in part or "function_call" in part
            ]
            if not calls:
                continue
            position, part = calls[0]
            signature = part.get("thoughtSignature", part.get("thought_signature"))
            if signature not in self.issued["gemini"]:
                name = (part.get("functionCall") or part["function_call"])["name"]
                message = GEMINI_SIGNATURE_ERROR.format(name=name, position=position + 1)
                error = {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}
                return self._refuse(received, {"error": error})
        turn = self._next_turn(received)
        if isinstance(turn, Call):
            parts: list[dict[str, Any]] = [
                {
                    "functionCall": {"name": turn.name, "args": turn.arguments},
                    "thoughtSignature": self._signature("gemini", turn.name),
                }
            ]
        else:
            parts = [{"text": turn}]
        prompt = _tokens(received.body.get("contents"))
        answer = _tokens(parts)
        return self._answer(
            received,
            {
                "candidates": [
                    {"content": {"parts": parts, "role": "model"}, "finishReason": "STOP", "index": 0}
                ],
                "usageMetadata": {
                    "promptTokenCount": prompt,
                    "candidatesTokenCount": answer,
                    "totalTokenCount": prompt + answer + 7,
                    "thoughtsTokenCount": 7,
                    "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
                },
                "modelVersion": model,
                "responseId": f"resp{next(self._ids):08d}",
            },
        )

    # -- DeepSeek and Mistral chat completions ------------------------------------

    async def _deepseek(self, request: web.Request) -> web.Response:
        received = await self._receive("deepseek", request)
        body = received.body
        reasoner = body["model"] == "deepseek-reasoner"
        if reasoner:
            for message in body["messages"]:
                if (
                    message["role"] == "assistant"
                    and message.get("tool_calls")
                    and (message.get("reasoning_content") is None)
                ):
                    error = {
                        "message": DEEPSEEK_REASONING_ERROR,
                        "type": "invalid_request_error",
                        "param": None,
                        "code": "invalid_request_error",
                    }
                    return self._refuse(received, {"error": error})
        turn = self._next_turn(received)
        message = self._chat_message(turn, call_id=f"call_00_{next(self._ids):024d}")
        if reasoner:
            reasoning = f"Step {next(self._ids)}: the user wants " + (
                turn.name if isinstance(turn, Call) else "an answer"
            )
            self.issued["deepseek"].add(reasoning)
            message["reasoning_content"] = reasoning
        usage = self._chat_usage(body, message)
        usage |= {
            "prompt_tokens_details": {"cached_tokens": 0},
            "prompt_cache_hit_tokens": 0,
            "prompt_cache_miss_tokens": usage["prompt_tokens"],
        }
        if reasoner:
            usage["completion_tokens_details"] = {"reasoning_tokens": _tokens(message["reasoning_content"])}
        return self._chat_reply(
            received, body, message, turn, usage, fingerprint="fp_ffc7281d48_prod0820_fp8_kvcache"
        )

    async def _mistral(self, request: web.Request) -> web.Response:
        received = await self._receive("mistral", request)
        body = received.body
        roles = [m["role"] for m in body["messages"]]
        for before, after in itertools.pairwise(roles):
            if before == "tool" and after == "user":
                return self._refuse(
                    received, _mistral_order_error("Unexpected role 'user' after role 'tool'")
                )
        if roles and roles[-1] == "assistant" and not body["messages"][-1].get("prefix"):
            problem = (
                "Expected last role User or Tool (or Assistant with prefix True) for serving "
                "but got assistant"
            )
            return self._refuse(received, _mistral_order_error(problem))
        turn = self._next_turn(received)
        message = self._chat_message(turn, call_id=f"{next(self._ids):09d}")
        message["prefix"] = False
        return self._chat_reply(
            received, body, message, turn, self._chat_usage(body, message), fingerprint=None
        )

    @staticmethod
    def _chat_message(turn: Turn, *, call_id: str) -> dict[str, Any]:
        if isinstance(turn, str):
            return {"role": "assistant", "content": turn}
        call = {
            "index": 0,
            "id": call_id,
            "type": "function",
            "function": {"name": turn.name, "arguments": json.dumps(turn.arguments)},
        }
        return {"role": "assistant", "content": "", "tool_calls": [call]}

    @staticmethod
    def _chat_usage(body: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
        prompt, answer = _tokens(body["messages"]), _tokens(message)
        return {"prompt_tokens": prompt, "completion_tokens": answer, "total_tokens": prompt + answer}

    def _chat_reply(
        self,
        received: Received,
        body: dict[str, Any],
        message: dict[str, Any],
        turn: Turn,
        usage: dict[str, Any],
        *,
        fingerprint: str | None,
    ) -> web.Response:
        reply: dict[str, Any] = {
            "id": f"{next(self._ids):032x}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": "tool_calls" if isinstance(turn, Call) else "stop",
                }
            ],
            "usage": usage,
        }
        if fingerprint is not None:
            reply["system_fingerprint"] = fingerprint
        return self._answer(received, reply)


def _mistral_order_error(message: str) -> dict[str, Any]:
    return {
        "object": "error",
        "message": message,
        "type": "invalid_request_message_order",
        "param": None,
        "code": "3230",
    }
