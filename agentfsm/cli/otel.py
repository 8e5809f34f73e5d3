"""`--otel` and ``[telemetry]``: the command line's runs exported as OpenTelemetry spans.

Where the spans go, and how, is OpenTelemetry's own configuration (the standard ``OTEL_*``
environment variables), not agentfsm's: the command line only turns the export on and says
whether message content is written (see `agentfsm.telemetry`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from ..errors import ConfigError
from .config import TelemetrySettings

__all__ = ["exporting"]


def exporting(settings: TelemetrySettings, flag: bool) -> AbstractContextManager[object]:
    """Around a command's run: its spans exported over OTLP/HTTP when `flag` (``--otel``) or
    ``[telemetry] enabled`` asks for it, else nothing. Raises `ConfigError` (bad usage) when
    the `otel` extra is missing, before anything runs."""
    if not (flag or settings.enabled):
        return nullcontext()
    try:
        from ..telemetry.spans import exported_over_otlp
    except ImportError:
        asked = "--otel" if flag else "[telemetry] enabled"
        raise ConfigError(f"{asked} needs OpenTelemetry: pip install 'agentfsm[otel]'") from None
    return exported_over_otlp(include_content=settings.include_content)
