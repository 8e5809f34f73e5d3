"""What the model reads of an MCP tool result: text, structured content, one image, resources.

The result is read by its fields (`content`, `structured_content`, `is_error`) and each
content block by its ``type``, so this module needs no import of the SDK. Nothing the server
returned is dropped without a word: what cannot reach the model (audio, a second image,
binary resources) is described in the text.

The text is capped at `MAX_RESULT_CHARS`: what a server returns beyond it is counted in a
marker, not kept, so a result of 50 MB costs neither the run's memory nor its trace (nor a
model's context, which could not hold it anyway).
"""

from __future__ import annotations

import json
from typing import Any

from ..toolbox.tool import ToolResult

__all__ = ["MAX_RESULT_CHARS", "to_tool_result"]

MAX_RESULT_CHARS = 200_000
"""The most characters of an MCP tool result's text kept (the rest is counted in a marker)."""


def to_tool_result(result: Any) -> ToolResult:
    """A `ToolResult` from an SDK `CallToolResult`.

    Text blocks are the output, one per line. ``structured_content`` is shown as JSON text;
    not repeated are a text block holding the same JSON (which servers send for older
    clients) and a one-key wrapper of the text itself (``{"result": ...}``, the SDK's form for
    a tool returning a plain value). The first image is the result's image (it reaches a
    vision model as an image part after the tool message); the rest are named. ``is_error``
    makes the text the error.
    """
    lines: list[str] = []
    image: str | None = None
    structured = getattr(result, "structured_content", None)
    for block in getattr(result, "content", None) or ():
        kind = getattr(block, "type", None)
        if kind == "text":
            text = block.text
            if structured is not None and _same_json(text, structured):
                continue
            lines.append(text)
        elif kind == "image":
            if image is None:
                image = block.data
            else:
                lines.append(f"[image ({block.mime_type}) not shown: only the first image of a result is]")
        elif kind == "audio":
            lines.append(
                f"[audio ({block.mime_type}), {_size(block.data)} not shown: the model reads no audio]"
            )
        elif kind == "resource":
            lines.append(_embedded(block.resource))
        elif kind == "resource_link":
            lines.append(_link(block))
        else:
            lines.append(f"[a content block of type {kind!r} that agentfsm does not read]")
    if structured is not None and not _wraps(structured, lines):
        shown = json.dumps(structured, ensure_ascii=False, sort_keys=False)
        lines.append(f"structured content: {shown}" if lines else shown)
    text = _capped("\n".join(lines))
    if getattr(result, "is_error", False):
        return ToolResult(
            error=text or "the MCP tool reported an error without a message", base64_image=image
        )
    return ToolResult(output=text, base64_image=image)


def _capped(text: str) -> str:
    """`text`, cut at `MAX_RESULT_CHARS` with a marker saying how much was left out."""
    if len(text) <= MAX_RESULT_CHARS:
        return text
    omitted = len(text) - MAX_RESULT_CHARS
    return (
        f"{text[:MAX_RESULT_CHARS]}\n... [MCP result cut at {MAX_RESULT_CHARS} characters: "
        f"{omitted} more not kept]"
    )


def _wraps(structured: Any, lines: list[str]) -> bool:
    """Whether `structured` is the text already shown, wrapped: a server whose tool returns a
    value that is no object sends it as ``{"result": value}`` to meet its `outputSchema`."""
    if not lines or not isinstance(structured, dict) or len(structured) != 1:
        return False
    (value,) = structured.values()
    text = "\n".join(lines)
    return value == text or _same_json(text, value)


def _same_json(text: str, structured: Any) -> bool:
    try:
        return bool(json.loads(text) == structured)
    except (ValueError, RecursionError):
        return False


def _embedded(resource: Any) -> str:
    uri, mime = resource.uri, getattr(resource, "mime_type", None)
    head = f"[resource {uri}" + (f" ({mime})" if mime else "")
    text = getattr(resource, "text", None)
    if text is not None:
        return f"{head}]\n{text}"
    return f"{head}: {_size(getattr(resource, 'blob', '') or '')} of binary content, not shown]"


def _link(block: Any) -> str:
    parts = [f"[resource link {block.uri}", f"name {block.name!r}"]
    if getattr(block, "mime_type", None):
        parts.append(f"type {block.mime_type}")
    if getattr(block, "description", None):
        parts.append(f"description {block.description!r}")
    return ", ".join(parts) + "]"


def _size(data: str) -> str:
    """The decoded size of base64 `data`, for a description."""
    return f"{len(data) * 3 // 4} bytes"
