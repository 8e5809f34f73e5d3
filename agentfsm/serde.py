"""Pydantic serialisation for the engine's plain dataclasses, loaded on first use.

The run's data types (messages, run state, results) are stdlib dataclasses:
cheap to build on the per-step hot path, and `import agentfsm` does not pay
the ~300 ms pydantic takes to import and build schemas. Pydantic still
validates and serialises them, through a `TypeAdapter` built the first time a
type is dumped or loaded, with the familiar `model_*` method names.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Self

__all__ = ["Serializable"]


def _adapter(cls: type) -> Any:
    """The class's TypeAdapter, built once and kept on the class itself."""
    adapter = cls.__dict__.get("_agentfsm_adapter")
    if adapter is None:
        from pydantic import TypeAdapter

        adapter = TypeAdapter(cls)
        type.__setattr__(cls, "_agentfsm_adapter", adapter)
    return adapter


class Serializable:
    """Mixin for dataclasses: ``model_dump``, ``model_dump_json``, ``model_validate``, ``model_copy``."""

    __slots__ = ()

    def model_dump(self, *, mode: str = "python", exclude_none: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = _adapter(type(self)).dump_python(self, mode=mode, exclude_none=exclude_none)
        return data

    def model_dump_json(self, *, exclude_none: bool = False) -> str:
        raw: bytes = _adapter(type(self)).dump_json(self, exclude_none=exclude_none)
        return raw.decode()

    @classmethod
    def model_validate(cls, data: Any) -> Self:
        value: Self = _adapter(cls).validate_python(data)
        return value

    @classmethod
    def model_validate_json(cls, data: str | bytes) -> Self:
        value: Self = _adapter(cls).validate_json(data)
        return value

    def model_copy(self, *, update: dict[str, Any] | None = None) -> Self:
        """A shallow copy, with `update` applied (like pydantic's `model_copy`)."""
        return dataclasses.replace(self, **(update or {}))  # type: ignore[type-var]
