"""`terminate`: the model's way to say the task is done.

The tool itself does almost nothing; its name is in the agent's
`special_tool_names`, and the `OBSERVING -> FINISHED [terminated]` edge ends
the run after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .tool import Tool

__all__ = ["Terminate"]

_DESCRIPTION = (
    "Terminate the interaction when the request is met OR if the assistant cannot proceed further "
    "with the task.\nWhen you have finished all the tasks, call this tool to end the work."
)


class Terminate(Tool):
    """The tool the model calls to end the run; the `terminated` guard reads that it ran."""

    name = "terminate"
    idempotent = True  # no effect: a resumed run may call it again
    description = _DESCRIPTION
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "status": {
                "type": "string",
                "description": "The finish status of the interaction.",
                "enum": ["success", "failure"],
            }
        },
        "required": ["status"],
    }

    async def execute(self, status: str) -> str:
        return f"The interaction has been completed with status: {status}"
