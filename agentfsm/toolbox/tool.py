"""Tools: what the model may call, with arguments checked before anything runs.

A `Tool` declares a name, a description and a JSON-schema for its
parameters, and implements `execute`. `@tool` builds one from a typed
function. Arguments are validated against the schema before `execute` runs,
so a tool body never sees arguments the model made up.

A tool may also take the app's own objects (a database, a client, the user's
session): its `deps_type`, which each run supplies (`run(..., deps=...)`).
`@tool(deps_type=Shop)` fills in every parameter annotated ``Shop`` and leaves
it out of the schema, so the model never sees it nor can make it up.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, get_type_hints, overload

from ..errors import ArgumentError, KeyNotFoundError, ToolSetupError, WrongTypeError
from ..model.base import Usage
from ..questions import Answer, InputRequired
from ..serde import Serializable
from .call_context import current_call

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

__all__ = ["ArgumentError", "FunctionTool", "Tool", "ToolCollection", "ToolResult", "tool"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult(Serializable):
    """What a tool returns: output or error, optionally an image and a system note."""

    output: Any = None
    error: str | None = None
    base64_image: str | None = None
    system: str | None = None
    """A note for the model that is not the tool's output (e.g. "session restarted")."""
    input_required: InputRequired | None = None
    """The call cannot finish without a person's answers: the run pauses in AWAITING_INPUT, and
    the tool's `resume` gets the answers (see `agentfsm.agent.awaiting_input`)."""
    usage: Usage | None = None
    """What the tool spent asking a model itself (`extract_content` does): the run's usage
    counts it, and so does its token budget."""

    def __bool__(self) -> bool:
        return any((self.output, self.error, self.base64_image, self.system, self.input_required))

    def __str__(self) -> str:
        if self.error:
            return f"Error: {self.error}"
        text = "" if self.output is None else str(self.output)
        if self.system:
            text = f"{text}\n<system>{self.system}</system>" if text else f"<system>{self.system}</system>"
        return text


class Tool:
    """A callable the model can request by name.

    Subclasses set `name`, `description` and `parameters` (a JSON-schema
    object) as class attributes, or pass them to `__init__`, and implement
    `execute`. Return a `ToolResult`, or any value (it becomes the output).
    """

    name: str = ""
    description: str = ""
    parameters: Mapping[str, Any] = {"type": "object", "properties": {}}
    """The JSON schema of the arguments. Read-only: a class's schema is shared by its instances."""
    needs_approval: bool = False
    """A person approves each call before it runs (see `agentfsm.agent.approval`)."""
    idempotent: ClassVar[bool] = False
    """Safe to run twice. A resumed run re-runs such a call when a kill interrupted it, where
    it would otherwise report the call as interrupted (see `ToolRunner.run_once`)."""
    asks_for_input: ClassVar[bool] = False
    """Its calls may return `ToolResult(input_required=...)`: an agent holding it has the
    AWAITING_INPUT state, and the tool implements `resume` (and `abandon`, if it holds anything)."""
    tool_type: ClassVar[str] = "function"
    """What tracing calls it (`gen_ai.tool.type`): ``function``, run by the application; an MCP
    server's tool is an ``extension``, run by the service it calls."""
    deps_type: type | None = None
    """The class of the run's dependencies this tool takes (`run(..., deps=...)`), read in
    `execute` as `current_call().deps`; the agent refuses a run given deps of another class."""

    def __init__(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: Mapping[str, Any] | None = None,
        needs_approval: bool | None = None,
    ) -> None:
        if name is not None:
            self.name = name
        if needs_approval is not None:
            self.needs_approval = needs_approval
        if description is not None:
            self.description = description
        if parameters is not None:
            self.parameters = parameters
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise ToolSetupError(
                f"{type(self).__name__} needs a `name` of letters, digits, '_' or '-', got {self.name!r}"
            )
        if self.parameters.get("type") != "object":
            raise ToolSetupError(
                f"tool {self.name!r}: `parameters` must be a JSON schema of type 'object', "
                f"got {self.parameters.get('type')!r}"
            )
        self._validator: Any = None

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        """Run one call with its validated arguments (always passed by keyword).

        A subclass declares the arguments it takes (`async def execute(self, command: str)`); the
        base takes anything, so that such a typed override is a valid one to the type checker."""
        raise NotImplementedError(f"{type(self).__name__} must implement `async def execute(self, **kwargs)`")

    async def resume(self, asked: InputRequired, answers: Mapping[str, Answer], **kwargs: Any) -> Any:
        """Go on with a call that returned `asked`, now that each of its questions has an answer
        (by question key); `kwargs` are the call's arguments. A tool that asks implements this."""
        raise NotImplementedError(f"{type(self).__name__} asked for input but does not implement `resume`")

    def abandon(self, asked: InputRequired) -> None:
        """The run will not answer `asked` (it ended, or the call asked too often): let go of what
        waits for the answers. Nothing, unless the tool holds something open while it asks."""

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Check `arguments` against `parameters`; raise `ArgumentError` naming the problem."""
        if self._validator is None:
            self._validator = _checked_validator_class(json.dumps(self.parameters, sort_keys=True))(
                self.parameters
            )
        error = next(iter(sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.path))), None)
        if error is not None:
            where = ".".join(str(part) for part in error.absolute_path)
            raise ArgumentError(f"{where}: {error.message}" if where else error.message)
        return arguments

    async def __call__(self, **kwargs: Any) -> ToolResult:
        """Validate, execute, and normalise the result to a `ToolResult`."""
        arguments = self.validate(kwargs)
        result = await self.execute(**arguments)
        return result if isinstance(result, ToolResult) else ToolResult(output=result)

    async def answered(
        self, asked: InputRequired, answers: Mapping[str, Answer], **kwargs: Any
    ) -> ToolResult:
        """`__call__` for a call that asked for input: validate, `resume` with the answers, normalise."""
        arguments = self.validate(kwargs)
        result = await self.resume(asked, answers, **arguments)
        return result if isinstance(result, ToolResult) else ToolResult(output=result)

    def to_param(self) -> dict[str, Any]:
        """The OpenAI function-tool declaration sent to the model."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


@functools.lru_cache(maxsize=1024)
def _checked_validator_class(schema: str) -> Any:
    """The jsonschema validator class for the schema `schema` (its JSON), the schema checked against
    its metaschema once: the check takes about 0.4 ms, and agents build their tools (`terminate`,
    `ask_human`, ...) afresh for each run, all with the same few schemas."""
    from jsonschema.validators import validator_for  # slow to import: loaded on first use

    parameters = json.loads(schema)
    cls = validator_for(parameters)
    cls.check_schema(parameters)
    return cls


class FunctionTool(Tool):
    """A tool made from a typed Python function (sync or async); see `@tool`."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        needs_approval: bool = False,
        deps_type: type | None = None,
    ) -> None:
        self.fn = fn
        self._is_async = inspect.iscoroutinefunction(fn)
        self.deps_type = deps_type
        self._model, self._deps_params = _arguments_model(fn, deps_type)
        schema = self._model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        super().__init__(
            name=name or fn.__name__,
            description=description if description is not None else inspect.cleandoc(fn.__doc__ or ""),
            parameters=schema,
            needs_approval=needs_approval,
        )

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            model = self._model.model_validate(arguments)
        except _validation_error() as exc:  # asked for only when validation raised
            raise ArgumentError(validation_problems(exc)) from None
        return dict(model.__dict__)

    async def execute(self, **kwargs: Any) -> Any:
        if self._deps_params:
            kwargs.update(dict.fromkeys(self._deps_params, self._deps()))
        if self._is_async:
            return await self.fn(**kwargs)
        result = self.fn(**kwargs)
        return (await result) if inspect.isawaitable(result) else result

    def _deps(self) -> Any:
        """The run's dependencies, checked against `deps_type` (the agent checked them at the run's
        start; this catches a call made outside a run, or a run given none)."""
        call = current_call()
        deps = call.deps if call is not None else None
        assert self.deps_type is not None
        if not isinstance(deps, self.deps_type):
            raise WrongTypeError(
                f"tool {self.name!r} takes the run's dependencies, a {self.deps_type.__qualname__}, and got "
                f"{deps!r}; pass them to the run: `run(..., deps=...)`"
            )
        return deps


def _validation_error() -> type[ValidationError]:
    """pydantic's `ValidationError`. `import agentfsm` does not load pydantic; a tool made from a
    function built its pydantic model, so pydantic is loaded by the time this is asked. An import
    statement costs about 1% of a one-call run, so a call whose arguments are valid makes none."""
    from pydantic import ValidationError

    return ValidationError


def validation_problems(exc: ValidationError) -> str:
    """pydantic's errors in one line, each as ``where: what``: the text a model reads to correct them."""
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}" for err in exc.errors()
    )


def _arguments_model(
    fn: Callable[..., Any], deps_type: type | None
) -> tuple[type[BaseModel], tuple[str, ...]]:
    """The model of `fn`'s arguments as the model sends them, and the names of the parameters
    annotated `deps_type` (filled in from the run's dependencies, so not in the model)."""
    from pydantic import ConfigDict, create_model

    if deps_type is not None and not isinstance(deps_type, type):
        raise ToolSetupError(f"@tool {fn.__name__!r}: `deps_type` must be a class, got {deps_type!r}")
    hints = get_type_hints(fn)
    fields: dict[str, Any] = {}
    deps: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolSetupError(f"@tool {fn.__name__!r}: *args/**kwargs cannot be described to a model")
        if param.name not in hints:
            raise ToolSetupError(
                f"@tool {fn.__name__!r}: parameter {param.name!r} needs a type hint (it becomes the schema)"
            )
        if deps_type is not None and hints[param.name] is deps_type:
            deps.append(param.name)
            continue
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hints[param.name], default)
    if deps_type is not None and not deps:
        raise ToolSetupError(
            f"@tool {fn.__name__!r}: deps_type={deps_type.__qualname__} but no parameter is annotated "
            f"`{deps_type.__qualname__}`; annotate the one that takes the run's dependencies"
        )
    config = ConfigDict(extra="forbid")
    return create_model(f"{fn.__name__}_arguments", __config__=config, **fields), tuple(deps)


@overload
def tool(fn: Callable[..., Any], /) -> FunctionTool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: bool = False,
    deps_type: type | None = None,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: bool = False,
    deps_type: type | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a `Tool` from a function: name from the function, description from its
    docstring, parameters from its type hints. Works on sync and async functions.
    `needs_approval`: each call waits for a person's decision (see `agentfsm.agent.approval`).
    `deps_type`: the class of the run's dependencies; parameters annotated with it are filled
    in from `run(..., deps=...)` and are not part of the schema the model sees."""

    def make(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            f, name=name, description=description, needs_approval=needs_approval, deps_type=deps_type
        )

    return make(fn) if fn is not None else make


class ToolCollection:
    """An ordered set of tools, by name. Duplicate names are an error.

    The set may change between steps (`add`, `remove`): the next think sends
    the current set.
    """

    def __init__(self, *tools: Tool) -> None:
        self._tools: dict[str, Tool] = {}
        self._params: list[dict[str, Any]] | None = None
        self._approval: frozenset[str] | None = None
        self._asking: bool | None = None
        self._with_deps: tuple[Tool, ...] | None = None
        self.add(*tools)

    def add(self, *tools: Tool) -> ToolCollection:
        for item in tools:
            if not isinstance(item, Tool):
                raise ToolSetupError(f"expected a Tool, got {item!r}; wrap functions with @tool")
            if item.name in self._tools:
                raise ToolSetupError(
                    f"duplicate tool name {item.name!r}: {self._tools[item.name]!r} and {item!r}; "
                    "give one of them another name"
                )
            self._tools[item.name] = item
        self._changed()
        return self

    def remove(self, name: str) -> Tool:
        try:
            removed = self._tools.pop(name)
        except KeyError:
            raise KeyNotFoundError(f"no tool named {name!r}; have {sorted(self._tools)!r}") from None
        self._changed()
        return removed

    def replace(self, item: Tool) -> Tool:
        """Put `item` in place of the tool of its name, in its position (the order of the
        declarations the model reads stays); the tool replaced."""
        if not isinstance(item, Tool):
            raise ToolSetupError(f"expected a Tool, got {item!r}; wrap functions with @tool")
        replaced = self._tools.get(item.name)
        if replaced is None:
            raise KeyNotFoundError(f"no tool named {item.name!r} to replace; have {sorted(self._tools)!r}")
        self._tools[item.name] = item
        self._changed()
        return replaced

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    @property
    def approval_names(self) -> frozenset[str]:
        """Names of the tools marked `needs_approval` (read when added: mark a tool before adding it)."""
        if self._approval is None:
            self._approval = frozenset(name for name, item in self._tools.items() if item.needs_approval)
        return self._approval

    @property
    def asks_for_input(self) -> bool:
        """Whether any tool may ask for input (`Tool.asks_for_input`): the agent then has AWAITING_INPUT."""
        if self._asking is None:
            self._asking = any(item.asks_for_input for item in self._tools.values())
        return self._asking

    @property
    def with_deps(self) -> tuple[Tool, ...]:
        """The tools that take the run's dependencies (a `deps_type`, read when added): checked per run."""
        if self._with_deps is None:
            self._with_deps = tuple(item for item in self._tools.values() if item.deps_type is not None)
        return self._with_deps

    def _changed(self) -> None:
        """The set changed: what is derived from it (declarations, names) is made again when read."""
        self._params = self._approval = self._asking = self._with_deps = None

    def to_params(self) -> list[dict[str, Any]]:
        """The declarations sent to the model (built once per change of the set; do not mutate)."""
        if self._params is None:
            self._params = [item.to_param() for item in self._tools.values()]
        return self._params

    async def execute(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        item = self._tools.get(name)
        if item is None:
            raise KeyNotFoundError(f"no tool named {name!r}")
        return await item(**arguments)

    @classmethod
    def of(cls, tools: ToolCollection | Iterable[Tool] | None) -> ToolCollection:
        if tools is None:
            return cls()
        return tools if isinstance(tools, ToolCollection) else cls(*tools)
