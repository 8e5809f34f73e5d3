"""Pydantic serialisation for the engine's plain dataclasses, loaded on first use.

The run's data types (messages, run state, results) are stdlib dataclasses:
cheap to build on every step, and `import agentfsm` does not pay for
importing pydantic and building its schemas. Pydantic still
validates and serialises them, through a `TypeAdapter` built the first time a
type is dumped or loaded, with the familiar `model_*` method names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Self, TypeVar

__all__ = ["Serializable", "slot_builder"]

_T = TypeVar("_T")


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

    def model_dump_json(self, *, exclude_none: bool = False, exclude: set[str] | None = None) -> str:
        raw: bytes = _adapter(type(self)).dump_json(self, exclude_none=exclude_none, exclude=exclude)
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


def slot_builder(cls: type[_T]) -> Callable[..., _T]:
    """A constructor for the frozen, slotted dataclass `cls`, for hot paths.

    ``build(...)`` takes every field (by position in declaration order, or by
    name; no defaults) and sets each slot directly, skipping ``__init__`` and
    ``__post_init__``: callers pass values already of the fields' types. The
    frozen ``__init__`` sets each field through ``object.__setattr__``, at
    about twice the cost. The code is generated, as `dataclasses` generates
    ``__init__``, so each field is one direct call.
    """
    names = [field.name for field in dataclasses.fields(cls)]  # type: ignore[arg-type]
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    for name in names:
        namespace[f"_set_{name}"] = cls.__dict__[name].__set__
    lines = [f"def build({', '.join(names)}):", "    obj = _new(_cls)"]
    lines += [f"    _set_{name}(obj, {name})" for name in names]
    lines.append("    return obj")
    exec("\n".join(lines), namespace)  # field names of our own dataclasses, nothing from outside
    build: Callable[..., _T] = namespace["build"]
    build.__qualname__ = f"slot_builder({cls.__name__})"
    return build
