"""The agent's own tools (what the model can call), one module each.

`python_execute`, `bash` and `str_replace_editor` touch the system, so they
run in a sandbox they get from a provider (the agent's `SandboxSession`) on
first use; `ask_human` reaches a person through a callback; `terminate` ends
the run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_attributes
from .terminate import Terminate

if TYPE_CHECKING:
    from .ask_human import AskFn, AskHuman
    from .bash import Bash
    from .editor import StrReplaceEditor
    from .python_execute import PythonExecute
    from .sandboxed import SandboxProvider

_LAZY = {
    "AskFn": "ask_human",
    "AskHuman": "ask_human",
    "Bash": "bash",
    "StrReplaceEditor": "editor",
    "PythonExecute": "python_execute",
    "SandboxProvider": "sandboxed",
}
"""The system tools load on first use: `Terminate` alone is what every agent needs."""

__all__ = [
    "AskFn",
    "AskHuman",
    "Bash",
    "PythonExecute",
    "SandboxProvider",
    "StrReplaceEditor",
    "Terminate",
]


__getattr__ = lazy_attributes(__name__, _LAZY)
