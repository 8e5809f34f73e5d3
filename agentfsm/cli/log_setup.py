"""Log output for the `agentfsm` command only: stderr, console or JSON lines.

The library never configures logging (`log.py` only wraps the stdlib
`agentfsm` logger and pre-formats its events with
`ProcessorFormatter.wrap_for_formatter`). The command adds one stdlib handler
whose `structlog.stdlib.ProcessorFormatter` renders those events, and records
of other libraries (LiteLLM) alike, on stderr. `structlog.configure` is never
called, so an application embedding the engine keeps whatever structlog setup
it has. `configured()` undoes everything on exit, which keeps `main()` safe to
call in-process (tests, embedding).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Literal, TextIO

import structlog
from structlog.typing import EventDict, Processor

__all__ = ["LITELLM_LOGGERS", "LogFormat", "configured", "level_of"]

LogFormat = Literal["console", "json"]

LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")
_TOLD_BY_AGENTFSM = ("mcp.client.auth.oauth2",)
"""Loggers whose errors agentfsm tells itself, in one line: the MCP SDK's OAuth client logs each
failed authorization with a traceback before raising it to the connection, which says what to run."""
"""Loggers LiteLLM writes to; only their warnings and errors are shown."""


def level_of(quiet: int, verbose: int, default: int = logging.INFO) -> int:
    """The `agentfsm` logger's level for `-q` / `-v` given `quiet` and `verbose` times: each `-q`
    one level up from `default` (WARNING, then ERROR), each `-v` one down (DEBUG at most)."""
    return max(logging.DEBUG, min(logging.CRITICAL, default + 10 * (quiet - verbose)))


def _formatter(log_format: LogFormat, stream: TextIO, secrets: list[str]) -> logging.Formatter:
    processors: list[Processor] = [
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.stdlib.ProcessorFormatter.remove_processors_meta,
        _Mask(secrets),
    ]
    if log_format == "json":
        processors += [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        processors.append(structlog.dev.ConsoleRenderer(colors=_isatty(stream), sort_keys=False))
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_log_level],  # the library's events already carry it
        processors=processors,
    )


_SHORT_SECRET = 8
"""A secret shorter than this is masked only where it stands alone, not inside a longer word: an
API key ``k`` (as local servers take) would otherwise turn every ``k`` of every line into stars."""


class _Mask:
    """Replace each secret in the event's text fields with ``**********``."""

    def __init__(self, secrets: list[str]) -> None:
        self.secrets = [_pattern(secret) for secret in sorted(set(secrets), key=len, reverse=True)]

    def __call__(self, logger: object, name: str, event_dict: EventDict) -> EventDict:
        if not self.secrets:
            return event_dict
        return {
            key: self._mask(value) if isinstance(value, str) else value for key, value in event_dict.items()
        }

    def _mask(self, text: str) -> str:
        for secret in self.secrets:
            text = secret.sub("**********", text)
        return text


def _pattern(secret: str) -> re.Pattern[str]:
    """Where `secret` is masked: anywhere, or where it stands alone when it is short."""
    escaped = re.escape(secret)
    if len(secret) < _SHORT_SECRET:
        escaped = rf"(?<![A-Za-z0-9]){escaped}(?![A-Za-z0-9])"
    return re.compile(escaped)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@contextmanager
def configured(
    log_format: LogFormat = "console",
    stream: TextIO | None = None,
    secrets: Iterable[str] = (),
    level: int = logging.INFO,
) -> Iterator[logging.Handler]:
    """Route the `agentfsm` logger (at `level`, INFO by default) and LiteLLM's (WARNING) to `stream`
    (stderr, or the live view's console) while active.

    The handler sits on the root logger, at WARNING, so other libraries'
    warnings show too, in the same format; `agentfsm` alone is set to `level`:
    INFO is one line per transition, `-q` raises it, `-v` lowers it. `secrets`
    (the API key) are masked in every line. Levels and handlers are restored on exit. (LiteLLM's own handler,
    which writes to stdout, is detached by `agentfsm.model.llm.load_litellm`, so its
    records reach this handler like any library's.)
    """
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(_formatter(log_format, handler.stream, [s for s in secrets if s]))
    root, library = logging.getLogger(), logging.getLogger("agentfsm")
    litellm = [logging.getLogger(name) for name in LITELLM_LOGGERS]
    told = [logging.getLogger(name) for name in _TOLD_BY_AGENTFSM]
    saved = [(logger, logger.level) for logger in (root, library, *litellm, *told)]
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    library.setLevel(level)
    for logger in litellm:
        logger.setLevel(logging.WARNING)
    for logger in told:
        logger.setLevel(logging.CRITICAL)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        for logger, level in saved:
            logger.setLevel(level)
        handler.flush()
