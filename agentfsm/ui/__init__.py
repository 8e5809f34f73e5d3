"""The inspector: runs in the browser (`agentfsm ui`, or `serve` from an app).

`serve` is imported on first use (aiohttp's server and the page's modules load only then).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_attributes

if TYPE_CHECKING:
    from .serving import serve

__all__ = ["serve"]

__getattr__ = lazy_attributes(__name__, {"serve": "serving"})
