"""Options records: each option's name, type, default, bound and doc, written once.

An agent's options, and the LLM adapter's, are a frozen dataclass deriving from `Options`, one
field per option. The annotation gives the type, and through `Spec` the bound
(``Annotated[int, Spec(ge=1)]``); the field's default is the default; the docstring under the
field says what it does. Everything else is derived from that one declaration:

- the check when a record is built: a one-line `ConfigError` that names the option, what it
  must be and the value ("`max_steps` must be an integer >= 1, got 0");
- `to_json()`, what a trace's header and a checkpoint record (never a secret), and
  `from_json()`, how replay and resume rebuild the record from them;
- the command line's ``[agent]`` and ``[llm]`` sections: `agentfsm.cli.config` turns the
  fields into pydantic-settings models, so a file is held to the same bounds; and its flags, for
  the options whose `Spec` has a `flag` (``--max-steps``: `agentfsm.cli.parser`);
- the constructor of every agent: it takes each option of its record by keyword (`build`
  checks the names), and `constructor_signature` shows them, with their defaults, to `help()`
  and `inspect.signature`. Adding an option to a record touches nothing else.

Why stdlib dataclasses and not pydantic models: `import agentfsm` stays free of pydantic (a
tenth of a second to import), and so does building an agent; the few kinds of option there are
(numbers with bounds, flags, text, a choice, a set of names) need a few lines to check.

A subclass may give an option another default (Manus's `max_steps`), never another type or
bound: those are read from the class that declared the option first.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Self, Union, cast, get_args, get_origin, get_type_hints

from .errors import ConfigError, OptionsSetupError

__all__ = ["ConstructorSignature", "OptionField", "Options", "Spec", "constructor_signature", "option_fields"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Spec:
    """What an option needs besides its type: written as ``Annotated[type, Spec(...)]``."""

    ge: float | None = None
    """The least value allowed (numbers only)."""
    gt: float | None = None
    """The value that must be exceeded (numbers only)."""
    le: float | None = None
    """The greatest value allowed (numbers only)."""
    none: str | None = None
    """What None means, for the error message: ``"no limit"`` reads "(or None for no limit)"."""
    valid: Callable[[Any], bool] | None = None
    """A further test of a value of the right type; `expected` then says what passes."""
    expected: str | None = None
    """What a valid value is, said instead of the type ("a URL starting with http://...")."""
    secret: bool = False
    """Never shown (an error names only its type) and never traced; a config file holds a `SecretStr`."""
    traced: bool = True
    """Whether `to_json()`, and so a trace or a checkpoint, records the option."""
    file_none: int | None = None
    """The value that stands for None in a config file, TOML having no null (0: "off")."""
    flag: str | None = None
    """The help of the command line's flag that sets the option (``--max-steps`` for `max_steps`);
    None: no flag (a config file or the environment sets it)."""


_NO_SPEC = Spec()


@dataclass(frozen=True, slots=True)
class OptionField:
    """One option of a record, resolved: what the check, the JSON form and the config read."""

    name: str
    type: Any
    """The type without None: int, float, bool, str, a `Literal`, ``frozenset[str]`` or a dict."""
    optional: bool
    """Whether None is allowed."""
    default: Any
    """The default, or `dataclasses.MISSING` for a required option."""
    spec: Spec
    accepts: Callable[[Any], bool] = dataclasses.field(repr=False, compare=False)
    """The type, the bounds and `spec.valid` as one test (made once, when the record is resolved)."""

    @property
    def required(self) -> bool:
        return self.default is dataclasses.MISSING

    @property
    def recorded(self) -> bool:
        """Whether a trace records it: traced, and not a secret."""
        return self.spec.traced and not self.spec.secret

    def expectation(self) -> str:
        """What a valid value is, as the error says it: ``an integer >= 1 (or None for no limit)``."""
        spec = self.spec
        text = spec.expected or _kind(self.type)
        limits = ((">=", spec.ge), (">", spec.gt), ("<=", spec.le))
        bounds = [f"{op} {value:g}" for op, value in limits if value is not None]
        if bounds and spec.expected is None:
            text += " " + " and ".join(bounds)
        if self.optional:
            text += f" (or None for {spec.none})" if spec.none else " (or None)"
        return text

    def checked(self, value: Any) -> Any:
        """`value` if it is valid (a whole number given for a float, as a float; a list, tuple or
        set of names given for a set of names, as a frozenset); else `ConfigError`."""
        if value is None and self.optional:
            return None
        if isinstance(value, list | tuple | set) and get_origin(self.type) is frozenset:
            value = frozenset(value)
        if self.accepts(value):
            return float(value) if self.type is float else value
        shown = f"a {type(value).__name__}" if self.spec.secret else repr(value)
        raise ConfigError(f"`{self.name}` must be {self.expectation()}, got {shown}")

    def to_json(self, value: Any) -> Any:
        return sorted(value) if isinstance(value, frozenset) else value

    def from_json(self, value: Any) -> Any:
        """The option from its JSON form: a list becomes the set it was."""
        return frozenset(value) if get_origin(self.type) is frozenset and isinstance(value, list) else value


@dataclass(frozen=True, kw_only=True)
class Options:
    """Base of the options records; subclasses declare the fields (see the module's docstring)."""

    def __post_init__(self) -> None:
        for option in option_fields(type(self)):
            value = getattr(self, option.name)
            if value is option.default:
                continue  # checked once, when the class's options were resolved
            checked = option.checked(value)
            if checked is not value:
                object.__setattr__(self, option.name, checked)  # frozen: set once, while built

    def to_json(self) -> dict[str, Any]:
        """The recorded options as JSON values (sets as sorted lists): what a trace's header keeps."""
        return {f.name: f.to_json(getattr(self, f.name)) for f in option_fields(type(self)) if f.recorded}

    @classmethod
    def build(cls, values: Mapping[str, Any], *, start: Options | None = None, owner: str) -> Self:
        """The record of `start` (None: the defaults) with `values` over it, as the constructor of
        the class `owner` took them: a name that is no option is a `ConfigError` naming the option
        meant, a `start` of another record one naming the record to give."""
        if not _names(cls).issuperset(values):
            unknown = sorted(set(values) - _names(cls))
            known = [option.name for option in option_fields(cls)]
            close = difflib.get_close_matches(unknown[0], known, n=1)
            meant = f" (did you mean `{close[0]}`?)" if close else ""
            raise ConfigError(
                f"{owner} has no option `{unknown[0]}`{meant}; its options are those of "
                f"{cls.__qualname__}: {', '.join(known)}"
            )
        if start is None:
            return cast("Self", _record(cls, values))
        if not isinstance(start, cls):
            raise ConfigError(
                f"{owner} takes `options` as a {cls.__qualname__}, got a {type(start).__qualname__}: "
                f"build a {cls.__qualname__} (its defaults are {owner}'s), or pass the options by name"
            )
        return dataclasses.replace(start, **values) if values else start

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        """The record from `to_json()`'s form (other keys are ignored, absent options take defaults)."""
        return cls(**{f.name: f.from_json(data[f.name]) for f in option_fields(cls) if f.name in data})

    def to_dict(self) -> dict[str, Any]:
        """Every option by name, as the agent's constructor takes them."""
        return {f.name: getattr(self, f.name) for f in option_fields(type(self))}


def constructor_signature(cls: type, record: type[Options]) -> inspect.Signature:
    """The signature of `cls`'s constructor as introspection should show it: the parameters its
    `__init__` names (and, where that takes ``**kwargs``, those its base's `__init__` names, which
    it forwards them to; a ``**values`` of another name takes the options alone), then, when one
    of them takes keywords so, one keyword per option of `record`, with its type and default (a
    constructor that takes none of them, as a replay's agent, shows its own parameters only).
    Read as `cls.__signature__` (`ConstructorSignature`), for `help()`, `inspect.signature` and
    the tools that read them."""
    named: dict[str, inspect.Parameter] = {}
    takes_options = False
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        forwards = False
        for parameter in inspect.signature(init).parameters.values():
            if parameter.kind is inspect.Parameter.VAR_KEYWORD:
                forwards = parameter.name == "kwargs"
                takes_options = True
            elif parameter.name != "self" and parameter.kind is not inspect.Parameter.VAR_POSITIONAL:
                named.setdefault(parameter.name, parameter)
        if not forwards:
            break
    for option in option_fields(record) if takes_options else ():
        if option.name not in named:
            hint = option.type | None if option.optional else option.type
            named[option.name] = inspect.Parameter(
                option.name, inspect.Parameter.KEYWORD_ONLY, default=option.default, annotation=hint
            )
    return inspect.Signature(sorted(named.values(), key=lambda parameter: parameter.kind))


class ConstructorSignature:
    """A class attribute ``__signature__`` of a class whose constructor takes the options of its
    `options_class` by keyword: `constructor_signature` of the class it is read on, made when
    `inspect.signature` or `help()` asks."""

    def __get__(self, instance: object, owner: type) -> inspect.Signature:
        return constructor_signature(owner, owner.options_class)  # type: ignore[attr-defined]


def option_fields(cls: type[Options]) -> tuple[OptionField, ...]:
    """The options of the record class `cls`, in declaration order (resolved once per class)."""
    known = _RESOLVED.get(cls)
    if known is None:
        known = _RESOLVED[cls] = _resolve(cls)
    return known


_RESOLVED: dict[type[Options], tuple[OptionField, ...]] = {}


def _names(cls: type[Options]) -> frozenset[str]:
    """The names of `cls`'s options (a constructor checks the keywords it was given against them)."""
    known = _NAMES.get(cls)
    if known is None:
        known = _NAMES[cls] = frozenset(option.name for option in option_fields(cls))
    return known


_NAMES: dict[type[Options], frozenset[str]] = {}


def _record(cls: type[Options], values: Mapping[str, Any]) -> Options:
    """``cls(**values)``, shared: a record is immutable, so the agents built with the same options
    (an app making one per request) share the one built, and checked, for the first of them.

    A frozen dataclass of a dozen fields takes longer to build than the rest of an agent; the
    record is made once per class and set of values instead (each value compared with its type,
    so that ``True`` does not pass for ``1``), up to `_SHARED_MAX` of them kept. A value that
    cannot be a key (a dict, a list) builds a new record each time."""
    try:
        key = (cls, frozenset((name, type(value), value) for name, value in values.items()))
    except TypeError:
        return cls(**values)
    record = _SHARED.get(key)
    if record is None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        record = _SHARED[key] = cls(**values)
    return record


_SHARED: dict[tuple[type[Options], frozenset[tuple[str, type, Any]]], Options] = {}
_SHARED_MAX = 256


def _resolve(cls: type[Options]) -> tuple[OptionField, ...]:
    resolved = []
    hints = get_type_hints(cls, include_extras=True)
    for field in dataclasses.fields(cls):
        declared = _first_declaration(cls, field.name)
        hint = get_type_hints(declared, include_extras=True)[field.name]
        base, spec = _unannotated(hint)
        redeclared = hints[field.name]
        if redeclared not in (hint, base):
            raise OptionsSetupError(
                f"{cls.__qualname__}.{field.name} is declared {redeclared!r}, but {declared.__qualname__} "
                f"declared it {base!r}; a subclass may change an option's default only"
            )
        kind, optional = _without_none(base)
        accepts = _acceptor(cls, field.name, kind, spec)
        option = OptionField(field.name, kind, optional, field.default, spec, accepts)
        if not option.required and option.checked(option.default) is not option.default:
            raise OptionsSetupError(
                f"{cls.__qualname__}.{field.name}: the default {option.default!r} is not stored as "
                "the option's type; write it as one (a float default with a decimal point, say)"
            )
        resolved.append(option)
    return tuple(resolved)


def _first_declaration(cls: type, name: str) -> type:
    for klass in reversed(cls.__mro__):
        if name in inspect.get_annotations(klass):
            return klass
    raise AssertionError(f"{name!r} is no field of {cls.__qualname__}")


def _unannotated(hint: Any) -> tuple[Any, Spec]:
    if get_origin(hint) is Annotated:
        base, *metadata = get_args(hint)
        specs = [m for m in metadata if isinstance(m, Spec)]
        return base, specs[0] if specs else _NO_SPEC
    return hint, _NO_SPEC


def _without_none(hint: Any) -> tuple[Any, bool]:
    if get_origin(hint) in (Union, types.UnionType):
        members = [m for m in get_args(hint) if m is not type(None)]
        if len(members) == 1:
            return members[0], len(members) < len(get_args(hint))
    return hint, False


def _acceptor(cls: type, name: str, kind: Any, spec: Spec) -> Callable[[Any], bool]:
    """The test of a value of option `name`: its type, then its bounds and `spec.valid`."""
    is_kind = _type_test(kind)
    if is_kind is None or (kind not in (int, float) and (spec.ge, spec.gt, spec.le) != (None, None, None)):
        raise OptionsSetupError(
            f"{cls.__qualname__}.{name}: an option of type {kind!r} with {spec} is not supported"
        )
    ge, gt, le, valid = spec.ge, spec.gt, spec.le, spec.valid
    if (ge, gt, le, valid) == (None, None, None, None):
        return is_kind

    def accepts(value: Any) -> bool:
        return (
            is_kind(value)
            and (ge is None or value >= ge)
            and (gt is None or value > gt)
            and (le is None or value <= le)
            and (valid is None or valid(value))
        )

    return accepts


def _type_test(kind: Any) -> Callable[[Any], bool] | None:
    """Whether a value is of `kind` (a bool is never a number here, though Python says it is)."""
    if kind is bool:
        return lambda value: isinstance(value, bool)
    if kind is int:
        return lambda value: isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return lambda value: (
            isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        )
    if kind is str:
        return lambda value: isinstance(value, str)
    origin = get_origin(kind)
    if origin is Literal:
        choices, kinds = frozenset(get_args(kind)), frozenset(map(type, get_args(kind)))
        return lambda value: type(value) in kinds and value in choices  # True is no 1 here
    if origin is frozenset and get_args(kind) == (str,):
        return lambda value: isinstance(value, frozenset) and all(isinstance(item, str) for item in value)
    if origin is dict and get_args(kind)[:1] == (str,):
        return lambda value: isinstance(value, dict) and all(isinstance(key, str) for key in value)
    return None


def _kind(kind: Any) -> str:
    if kind is int:
        return "an integer"
    if kind is float:
        return "a number"
    if kind is bool:
        return "True or False"
    if kind is str:
        return "a string"
    origin = get_origin(kind)
    if origin is Literal:
        return "one of " + ", ".join(repr(choice) for choice in get_args(kind))
    if origin is frozenset:
        return "a frozenset of strings"
    return "a dict with string keys"
