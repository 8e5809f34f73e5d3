"""OpenTelemetry spans of runs, per the GenAI semantic conventions (the `otel` extra).

`instrument()` (also `agentfsm.instrument`) traces every run started after it: see
`agentfsm.telemetry.spans`, the only module that imports opentelemetry, which is loaded on
first use so that `import agentfsm` (and this package) never loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_attributes

if TYPE_CHECKING:
    from .spans import Instrumentation, instrument

__all__ = ["Instrumentation", "instrument"]

__getattr__ = lazy_attributes(__name__, {"Instrumentation": "spans", "instrument": "spans"})
