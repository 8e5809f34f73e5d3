"""The form a question's schema describes: its fields, their choices and defaults, and checking an answer.

Why this is a module of its own, beside `agentfsm.questions`: a `Question`'s schema is a flat
JSON schema of named primitive fields (the shape MCP elicitation allows: a string, a number
or integer, a boolean, a single choice, or a multiple choice of strings), and more than one
place reads it the same way. The MCP client fills in the defaults of the fields a person left
out (SEP-1034: the server receives them, as if typed), and the terminal shows the choices and
defaults, reads a typed line as the field's value (a multiple choice as a comma-separated
list) and checks it before it is sent, so a bad answer is asked again instead of refused by
the server. The schema is read as a server sends it; what it does not say is not checked.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import WrongValueError

__all__ = ["FormField", "form_fields", "with_defaults"]

_TRUE = {"y", "yes", "true", "1", "on"}
_FALSE = {"n", "no", "false", "0", "off"}
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:\d{2})?$")
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:\S+$")


@dataclass(frozen=True, slots=True)
class FormField:
    """One named field of a question's schema, as a person is asked it."""

    name: str
    spec: Mapping[str, Any]
    """The field's own schema, as the server sent it."""
    required: bool

    @property
    def title(self) -> str:
        return str(self.spec.get("title") or self.name)

    @property
    def kind(self) -> str:
        """The JSON schema type: ``string``, ``integer``, ``number``, ``boolean`` or ``array``."""
        kind = self.spec.get("type")
        if isinstance(kind, str):
            return kind
        return "array" if "items" in self.spec else "string"

    @property
    def multiple(self) -> bool:
        """A multiple choice: the answer is a list of the choices' values."""
        return self.kind == "array"

    @property
    def has_default(self) -> bool:
        return "default" in self.spec

    @property
    def default(self) -> Any:
        return self.spec.get("default")

    @property
    def choices(self) -> tuple[tuple[Any, str], ...]:
        """The values the field takes, each with the label to show (its ``title`` when the
        schema gives one): from ``enum`` (with the legacy ``enumNames``) or ``oneOf`` / ``anyOf``
        of ``const`` values, of the field or, for a multiple choice, of its ``items``."""
        spec = self.spec.get("items") if self.multiple else self.spec
        if not isinstance(spec, Mapping):
            return ()
        if isinstance(spec.get("enum"), list):
            values = list(spec["enum"])
            names = spec.get("enumNames")
            labels = names if isinstance(names, list) and len(names) == len(values) else values
            return tuple((value, str(label)) for value, label in zip(values, labels, strict=True))
        for key in ("oneOf", "anyOf"):
            options = spec.get(key)
            if isinstance(options, list):
                return tuple(
                    (option["const"], str(option.get("title", option["const"])))
                    for option in options
                    if isinstance(option, Mapping) and "const" in option
                )
        return ()

    def read(self, text: str) -> Any:
        """The value typed as `text` (a choice by its number, value or label; a multiple
        choice as a comma-separated list of them): `WrongValueError` saying why it is none, or
        why it does not fit the field (`problem`)."""
        if self.multiple:
            parts = [part.strip() for part in text.split(",") if part.strip()]
            value: Any = [self._choice(part) for part in parts] if self.choices else parts
        elif self.choices:
            value = self._choice(text)
        else:
            value = self._typed(text)
        problem = self.problem(value)
        if problem is not None:
            raise WrongValueError(problem)
        return value

    def _choice(self, text: str) -> Any:
        choices = self.choices
        if text.isdigit() and 1 <= int(text) <= len(choices):
            return choices[int(text) - 1][0]
        for value, label in choices:
            if text in (str(value), label):
                return value
        folded = [value for value, label in choices if text.lower() in (str(value).lower(), label.lower())]
        if len(folded) == 1:
            return folded[0]
        shown = ", ".join(f"{number} {label}" for number, (_, label) in enumerate(choices, 1))
        raise WrongValueError(f"{text!r} is not one of the choices of {self.title}: {shown}")

    def _typed(self, text: str) -> Any:
        kind = self.kind
        try:
            if kind == "integer":
                return int(text)
            if kind == "number":
                return float(text)
        except ValueError:
            raise WrongValueError(f"{text!r} is not a{'n' if kind == 'integer' else ''} {kind}") from None
        if kind == "boolean":
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise WrongValueError(f"{text!r} is not a boolean: answer y or n")
        return text

    def problem(self, value: Any) -> str | None:
        """Why `value` does not fit the field (its type, choices, bounds, length, format), or None."""
        kind, spec = self.kind, self.spec
        if self.multiple:
            if not isinstance(value, list):
                return f"{self.title} takes a list, not {value!r}"
            allowed = [choice for choice, _ in self.choices]
            wrong = [item for item in value if allowed and item not in allowed]
            if wrong:
                return f"{wrong[0]!r} is not one of the choices of {self.title}: {allowed!r}"
            return _bounds(self.title, len(value), spec.get("minItems"), spec.get("maxItems"), "choices")
        if kind == "boolean":
            return None if isinstance(value, bool) else f"{self.title} takes true or false, not {value!r}"
        if kind in ("integer", "number"):
            if isinstance(value, bool) or not isinstance(value, int | float):
                return f"{self.title} takes a {kind}, not {value!r}"
            if kind == "integer" and not (isinstance(value, int) or value.is_integer()):
                return f"{self.title} takes a whole number, not {value!r}"
            if isinstance(value, float) and not math.isfinite(value):
                return f"{self.title} takes a finite number, not {value!r}"
            return _range(self.title, value, spec.get("minimum"), spec.get("maximum"))
        if not isinstance(value, str):
            return f"{self.title} takes text, not {value!r}"
        allowed = [choice for choice, _ in self.choices]
        if allowed and value not in allowed:
            return f"{value!r} is not one of the choices of {self.title}: {allowed!r}"
        return _bounds(
            self.title, len(value), spec.get("minLength"), spec.get("maxLength"), "characters"
        ) or (_format(self.title, value, spec.get("format")))


def form_fields(schema: Mapping[str, Any]) -> tuple[FormField, ...]:
    """The fields of a question's schema (an object of named properties), in its order."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return ()
    required = set(schema.get("required") or ())
    return tuple(
        FormField(name, spec if isinstance(spec, Mapping) else {}, name in required)
        for name, spec in properties.items()
    )


def with_defaults(schema: Mapping[str, Any], content: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """`content` with the default of each field of `schema` it leaves out (SEP-1034: a field
    the person did not answer takes the default the server gave). None stays None for a
    schema with no defaults (a URL question's answer carries no content)."""
    defaults = {field.name: field.default for field in form_fields(schema) if field.has_default}
    if content is None and not defaults:
        return None
    return {**defaults, **(content or {})}


def _range(title: str, value: float, low: Any, high: Any) -> str | None:
    if isinstance(low, int | float) and value < low:
        return f"{title} is at least {low:g} (got {value:g})"
    if isinstance(high, int | float) and value > high:
        return f"{title} is at most {high:g} (got {value:g})"
    return None


def _bounds(title: str, count: int, low: Any, high: Any, unit: str) -> str | None:
    if isinstance(low, int) and count < low:
        return f"{title} takes at least {low} {unit} (got {count})"
    if isinstance(high, int) and count > high:
        return f"{title} takes at most {high} {unit} (got {count})"
    return None


def _format(title: str, value: str, kind: Any) -> str | None:
    pattern = {"email": _EMAIL, "date": _DATE, "date-time": _DATE_TIME, "uri": _URI}.get(str(kind))
    if pattern is None or pattern.match(value):
        return None
    example = {"email": "name@example.org", "date": "2026-12-03", "date-time": "2026-12-03T14:00:00Z"}
    article = "an" if str(kind)[:1] in "aeiou" else "a"
    like = example.get(str(kind), "https://example.org/")
    return f"{title} takes {article} {kind} (like {like}), not {value!r}"
