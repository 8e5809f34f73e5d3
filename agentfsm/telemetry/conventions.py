"""The GenAI semantic conventions' names and values, as agentfsm fills them in.

Kept apart from the module that talks to OpenTelemetry so that what a span says (which
attribute, which provider name, how a message is written down) can be read and tested
without the SDK. The names follow the OpenTelemetry GenAI conventions of late 2026 (the
`semantic-conventions-genai` v0.1.0 release): a workflow is an ``invoke_agent``-shaped
internal span whose operation is ``invoke_workflow`` and whose agent name is the flow's;
a planning phase is a ``plan`` span, parent of the model calls that make the plan.

Message content (requests, replies, tool arguments and results) is written only when the
instrumentation was asked for it (`include_content`): it is the user's data.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from ..messages import Message, Role
from ..model.base import LLMResponse

__all__ = [
    "AGENT_NAME",
    "ERROR_TYPE",
    "HTTP_STATUS_CODE",
    "INPUT_MESSAGES",
    "OPERATION",
    "OUTPUT_MESSAGES",
    "PROVIDER",
    "REQUEST_MAX_TOKENS",
    "REQUEST_MODEL",
    "REQUEST_TEMPERATURE",
    "RESPONSE_FINISH_REASONS",
    "RESPONSE_MODEL",
    "SERVER_ADDRESS",
    "SERVER_PORT",
    "SYSTEM_INSTRUCTIONS",
    "TOOL_CALL_ARGUMENTS",
    "TOOL_CALL_ID",
    "TOOL_CALL_RESULT",
    "TOOL_DESCRIPTION",
    "TOOL_NAME",
    "TOOL_TYPE",
    "USAGE_INPUT_TOKENS",
    "USAGE_OUTPUT_TOKENS",
    "input_messages",
    "model_attributes",
    "output_messages",
    "system_instructions",
]

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
AGENT_NAME = "gen_ai.agent.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_DESCRIPTION = "gen_ai.tool.description"
TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT = "gen_ai.tool.call.result"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
ERROR_TYPE = "error.type"
HTTP_STATUS_CODE = "http.response.status_code"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"

# litellm's provider prefixes with a well-known `gen_ai.provider.name`; any other prefix is
# written as it is (the conventions allow a custom value).
_PROVIDERS = {
    "openai": "openai",
    "text-completion-openai": "openai",
    "anthropic": "anthropic",
    "azure": "azure.ai.openai",
    "azure_ai": "azure.ai.inference",
    "bedrock": "aws.bedrock",
    "bedrock_converse": "aws.bedrock",
    "cohere": "cohere",
    "cohere_chat": "cohere",
    "deepseek": "deepseek",
    "gemini": "gcp.gemini",
    "vertex_ai": "gcp.vertex_ai",
    "groq": "groq",
    "watsonx": "ibm.watsonx.ai",
    "mistral": "mistral_ai",
    "perplexity": "perplexity",
    "xai": "x_ai",
    "moonshot": "moonshot_ai",
}


def model_attributes(llm: object) -> dict[str, Any]:
    """What a span says of the model an agent or a flow asks: provider, model name, the request's
    temperature and token limit, the server. Read from the model's options (any `ChatModel` may
    have some): ``openai/gpt-4o-mini`` is provider ``openai``, model ``gpt-4o-mini``."""
    model = getattr(llm, "model", None)
    if not isinstance(model, str) or not model:
        return {PROVIDER: "unknown"}
    prefix, _, name = model.partition("/")
    if not name:  # a bare name: litellm infers the provider; OpenAI's models are the usual ones
        prefix, name = "openai", model
    attributes: dict[str, Any] = {PROVIDER: _PROVIDERS.get(prefix, prefix), REQUEST_MODEL: name}
    for key, option in ((REQUEST_TEMPERATURE, "temperature"), (REQUEST_MAX_TOKENS, "max_tokens")):
        value = getattr(llm, option, None)
        if isinstance(value, int | float) and not isinstance(value, bool):
            attributes[key] = value
    base = getattr(llm, "api_base", None)
    if isinstance(base, str) and base:
        parts = urlsplit(base)
        if parts.hostname:
            attributes[SERVER_ADDRESS] = parts.hostname
            attributes[SERVER_PORT] = parts.port or (443 if parts.scheme == "https" else 80)
    return attributes


def _parts(message: Message) -> list[dict[str, Any]]:
    if message.role is Role.TOOL:
        return [{"type": "tool_call_response", "id": message.tool_call_id, "response": message.content}]
    parts: list[dict[str, Any]] = []
    if message.content:
        parts.append({"type": "text", "content": message.content})
    for call in message.tool_calls:
        parts.append(
            {"type": "tool_call", "id": call.id, "name": call.name, "arguments": _loaded(call.arguments)}
        )
    return parts


def _loaded(arguments: str) -> Any:
    """A call's arguments as JSON (the conventions' form), or the model's text if they are not JSON."""
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def input_messages(messages: Sequence[Message]) -> str:
    """`gen_ai.input.messages`: the chat history sent, in the conventions' JSON form."""
    return json.dumps([{"role": m.role.value, "parts": _parts(m)} for m in messages], ensure_ascii=False)


def system_instructions(system: Sequence[Message]) -> str:
    """`gen_ai.system_instructions`: the system messages sent apart from the history."""
    return json.dumps([{"type": "text", "content": m.content or ""} for m in system], ensure_ascii=False)


def output_messages(reply: LLMResponse) -> str:
    """`gen_ai.output.messages`: the model's reply, one choice."""
    message = Message(role=Role.ASSISTANT, content=reply.content, tool_calls=reply.tool_calls)
    choice = {"role": "assistant", "parts": _parts(message), "finish_reason": reply.finish_reason or "stop"}
    return json.dumps([choice], ensure_ascii=False)
