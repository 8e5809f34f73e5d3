"""The agent's own tools (what the model can call), one module each.

`python_execute`, `bash` and `str_replace_editor` touch the system, so they
run in a sandbox they get from a provider (the agent's `SandboxSession`) on
first use; `ask_human` reaches a person through a callback; `terminate` ends
the run.
"""

from .ask_human import AskFn, AskHuman, ask_on_terminal
from .bash import Bash
from .editor import StrReplaceEditor
from .python_execute import PythonExecute
from .sandboxed import SandboxProvider
from .terminate import Terminate

__all__ = [
    "AskFn",
    "AskHuman",
    "Bash",
    "PythonExecute",
    "SandboxProvider",
    "StrReplaceEditor",
    "Terminate",
    "ask_on_terminal",
]
