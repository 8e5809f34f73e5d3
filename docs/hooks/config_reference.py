"""The configuration reference page, generated at each build from the settings models themselves.

`reference/config.md` is not a file in the repository: this hook walks
`agentfsm.cli.config.Settings`, section by section, and writes every key with
its type, default, environment variable and description, so the page cannot
drift from what `Settings.load` accepts. A description is the field's own
(``Field(description=...)``), else the docstring under it, in the model or in
the record the model is made from (the options records, `MCPServerSettings`).
A key with neither fails the build.
"""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import json
import re
import textwrap
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from agentfsm.agent.toolcall import ToolCallOptions
from agentfsm.cli.config import (
    DEFAULT_CONFIG_FILE,
    ENV_PREFIX,
    AgentSettings,
    LLMSettings,
    MCPServerTable,
    Settings,
)
from agentfsm.mcp.settings import MCPServerSettings
from agentfsm.model.options import LLMOptions

PAGE = "reference/config.md"

DOCUMENTED_BY: dict[type, type] = {
    AgentSettings: ToolCallOptions,
    LLMSettings: LLMOptions,
    MCPServerTable: MCPServerSettings,
}
"""Sections made from another declaration, whose docstrings document their keys."""

PER_AGENT = "per_agent"
"""`[llm]`'s field holding the ``[llm.<agent name>]`` tables (a table, not a key, in the file)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Key:
    """One key of one section, as the page shows it."""

    name: str
    type: str
    default: str
    variable: str
    """The environment variable that sets it (a table's name in angle brackets is yours)."""
    description: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Section:
    """One table of the file: its path (``search.brave``), what it is, and its keys."""

    path: tuple[str, ...]
    doc: str
    keys: tuple[Key, ...]

    @property
    def title(self) -> str:
        return f"[{'.'.join(self.path)}]"


class MissingDescriptionError(Exception):
    """A settings key without a description: the page would show a key nobody explained."""


def sections() -> list[Section]:
    """Every section of `Settings`, in the order the model declares them, each followed by its tables."""
    return list(_walk(Settings, ()))


def _walk(
    model: type[BaseModel], path: tuple[str, ...], *, overrides: type[BaseModel] | None = None
) -> Iterator[Section]:
    """`model`'s section at `path`, then its tables. `overrides`: the section whose keys this
    one's replace (`[llm]` for an `[llm.<agent name>]` table), which documents them."""
    keys: list[Key] = []
    tables: list[tuple[type[BaseModel], tuple[str, ...], type[BaseModel] | None]] = []
    for name, info in model.model_fields.items():
        inner = _model_of(info.annotation)
        if inner is not None:
            tables.append((inner, (*path, name), None))
            continue
        held = _dict_of_models(info.annotation)
        if held is not None:
            if name == PER_AGENT:
                tables.append((held, (*path, "<agent name>"), model))
            else:
                tables.append((held, (*path, name, "<id>"), None))
            continue
        keys.append(_key(model, name, info, path, overrides=overrides))
    if path:
        yield Section(path=path, doc=_class_doc(model), keys=tuple(keys))
    for inner, where, overridden in tables:
        yield from _walk(inner, where, overrides=overridden)


def _key(
    model: type[BaseModel],
    name: str,
    info: FieldInfo,
    path: tuple[str, ...],
    *,
    overrides: type[BaseModel] | None,
) -> Key:
    description = (
        info.description
        or _attribute_docs(model).get(name)
        or (_attribute_docs(overrides).get(name) if overrides is not None else None)
    )
    if not description:
        raise MissingDescriptionError(
            f"[{'.'.join(path)}] {name} ({model.__name__}.{name}) has no description: write a "
            "docstring under the field, or give it Field(description=...)"
        )
    return Key(
        name=name,
        type=_type_name(info.annotation) + _bounds(info),
        default=_default(info),
        variable=f"{ENV_PREFIX}{'__'.join((*path, name)).upper()}",
        description=_markdown(description),
    )


def _model_of(annotation: object) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _dict_of_models(annotation: object) -> type[BaseModel] | None:
    if typing.get_origin(annotation) is dict:
        _, value = typing.get_args(annotation)
        return _model_of(value)
    return None


# -- descriptions ------------------------------------------------------------------


def _attribute_docs(model: type) -> dict[str, str]:
    """The docstrings under the fields of `model`, its bases and what documents it, nearest first."""
    found: dict[str, str] = {}
    for cls in [*model.__mro__, *_documenting(model)]:
        for name, doc in _class_attribute_docs(cls).items():
            found.setdefault(name, doc)
    return found


def _documenting(model: type) -> list[type]:
    return [c for base, by in DOCUMENTED_BY.items() if issubclass(model, base) for c in by.__mro__]


@functools.cache
def _class_attribute_docs(cls: type) -> dict[str, str]:
    """``name: type = value`` followed by a string, in the class's own source (none: no source)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # made at run time (`create_model`), or a builtin
        return {}
    tree = ast.parse(source)
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for statement, after in itertools.pairwise(body):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[statement.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _class_doc(model: type) -> str:
    return _markdown(inspect.cleandoc(model.__doc__ or ""))


def _markdown(text: str) -> str:
    """A docstring as one Markdown paragraph: reST's double backticks made single."""
    return re.sub(r"``(.+?)``", r"`\1`", " ".join(text.split()))


# -- types and defaults ------------------------------------------------------------


def _type_name(annotation: object) -> str:
    """The type as a reader of a TOML file thinks of it."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        named = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(dict.fromkeys(named))
    if origin is typing.Literal:
        return " | ".join(json.dumps(a.value if isinstance(a, Enum) else a) for a in args)
    if origin in (tuple, list, frozenset, set):
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"table of {_type_name(args[1])}" if args else "table"
    if annotation is SecretStr:
        return "secret string"
    names = {str: "string", int: "integer", float: "number", bool: "boolean", typing.Any: "any"}
    if isinstance(annotation, type) or annotation is typing.Any:
        return names.get(annotation, getattr(annotation, "__name__", str(annotation)))
    return str(annotation)


def _bounds(info: FieldInfo) -> str:
    """The field's bounds, as pydantic checks them (``ge=1`` reads ``≥ 1``)."""
    signs = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
    found = [
        f"{sign} {getattr(bound, name)}"
        for bound in info.metadata
        for name, sign in signs.items()
        if getattr(bound, name, None) is not None
    ]
    return f" ({', '.join(found)})" if found else ""


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value: object = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return "required"
    else:
        value = info.default
    if value is None:
        return "unset"
    if isinstance(value, frozenset | set):
        value = sorted(value)
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, str) and "\n" in value:
        return "(a built-in prompt)"
    return f"`{json.dumps(value, default=str)}`"


# -- the page ----------------------------------------------------------------------


def render() -> str:
    """The page's markdown: how the file is found and layered, then each section's keys."""
    out = [
        "# Configuration\n",
        "Generated from the settings models (`agentfsm.cli.config.Settings`) at each build of this "
        "site: every key the file and the environment may set. How the layers combine is in "
        "[the configuration guide](../guides/configuration.md).\n",
        f"The file is `{DEFAULT_CONFIG_FILE}` in the working directory, or the one `--config` names. "
        f"A key's variable is `{ENV_PREFIX}<SECTION>__<KEY>` (tables nest with `__` too); "
        "it overrides the file, and a flag overrides both.\n",
    ]
    for section in sections():
        out.append(f"## `{section.title}`\n")
        if section.doc:
            out.append(f"{section.doc}\n")
        if "<" in section.title:
            out.append("The name in angle brackets is yours: one table for each name you choose.\n")
        if not section.keys:
            out.append("It holds only the tables below.\n")
        for key in section.keys:
            out.append(
                f"- **`{key.name}`** · {key.type} · default {key.default} · `{key.variable}`  \n"
                f"  {key.description}"
            )
        out.append("")
    return "\n".join(out)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated page to the site's files."""
    files.append(File.generated(config, PAGE, content=render()))
    return files
