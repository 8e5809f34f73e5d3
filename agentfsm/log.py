"""The library's logger: structlog wrapped around the stdlib `agentfsm` logger.

The library never configures logging and never writes to stdout: events go
to `logging.getLogger("agentfsm")`, which has only a `NullHandler` until the
application (or the CLI, see `cli_logging.py`) adds one. structlog itself is
imported on the first event that is actually enabled, so a silent run pays
nothing for it.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

__all__ = ["STDLIB_LOGGER", "enabled", "event"]

STDLIB_LOGGER = logging.getLogger("agentfsm")
STDLIB_LOGGER.addHandler(logging.NullHandler())


@functools.cache
def _logger() -> Any:
    import structlog

    return structlog.wrap_logger(
        STDLIB_LOGGER,
        wrapper_class=structlog.stdlib.BoundLogger,
        processors=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
    )


def enabled(level: int = logging.INFO) -> bool:
    """Whether an event at `level` would go anywhere (check before building costly fields)."""
    return STDLIB_LOGGER.isEnabledFor(level)


def event(name: str, level: int = logging.INFO, **fields: Any) -> None:
    """Emit one structured event, if anyone listens at `level`."""
    if STDLIB_LOGGER.isEnabledFor(level):
        _logger().log(level, name, **fields)
