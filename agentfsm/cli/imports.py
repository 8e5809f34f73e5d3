"""Your own code on the command line: the objects ``MODULE:NAME`` names (an agent's factory, a
function tool, an agent class), imported as the person asked.

Why one place: `run --agent`, `--tool`, `worker --agent-factory` and `replay --agent-class` all take
a name of the same form, and a mistake in any of them should read the same: one line naming the
flag, the target and what is wrong with it (the module is not there, it has no such name, its
import raised), exit status 2. The working directory is searched first, as `python -m` does:
``--agent agents:build`` finds ``./agents.py`` however `agentfsm` was installed.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from ..errors import ConfigError

__all__ = ["imported"]


def imported(target: str, flag: str, *, kind: str = "FUNCTION") -> Any:
    """The object `target` (``package.module:name``, the name dotted for an attribute of one) names,
    for the option `flag`; `ConfigError` in one line when it is not there. `kind`: what the flag
    takes, for the error (``FUNCTION``, ``CLASS``)."""
    module_name, sep, name = target.partition(":")
    if not (sep and module_name and name):
        raise ConfigError(f"{flag} {target!r}: give MODULE:{kind} (e.g. myagents:build)")
    here = os.getcwd()
    if here not in sys.path:  # as `python -m` does: the person's own modules, where they stand
        sys.path.insert(0, here)
    try:
        found: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise ConfigError(
                f"{flag} {target!r}: no module {module_name!r} here ({here}) or on the path; "
                f"give MODULE:{kind}"
            ) from None
        raise ConfigError(f"{flag} {target!r}: importing {module_name} failed: {_line(exc)}") from None
    except Exception as exc:  # the person's module raised while it was imported
        raise ConfigError(f"{flag} {target!r}: importing {module_name} failed: {_line(exc)}") from None
    for part in name.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise ConfigError(
                f"{flag} {target!r}: {module_name} has no {name!r}; give MODULE:{kind}"
            ) from None
    return found


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
