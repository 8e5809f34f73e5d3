"""The exceptions: every class agentfsm defines inherits `AgentfsmError`, lives in `errors.py`,
keeps the builtin base callers catch, and stays importable where it was imported from before;
and every exception the package raises is one of those classes.

The classes are found by walking every module of the package, so a new exception class
defined anywhere is checked without being listed here; the raises are found by parsing
every module's source.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import pkgutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

import agentfsm
from agentfsm import errors
from agentfsm.errors import AgentfsmError

# Exception classes that must not inherit AgentfsmError, each with the reason.
NOT_ERRORS = {
    "agentfsm.agent.replay.ReplayStop": (
        "a BaseException for control flow: replay (an agent's, a flow's) leaves the run with it, and no "
        "`except AgentfsmError` or `except Exception` may catch it"
    ),
}


def package_modules() -> list[ModuleType]:
    """Every module of agentfsm, but those whose import needs an optional dependency that is absent."""
    modules = []
    for info in pkgutil.walk_packages(agentfsm.__path__, "agentfsm."):
        try:
            modules.append(importlib.import_module(info.name))
        except ModuleNotFoundError as exc:
            if (exc.name or "").partition(".")[0] == "agentfsm":
                raise
    return modules


def classes_in(owner: ModuleType | type, module: str) -> list[type]:
    """The classes defined in `module` reachable from `owner`, nested classes included."""
    found = []
    for value in vars(owner).values():
        if inspect.isclass(value) and value.__module__ == module and value is not owner:
            found += [value, *classes_in(value, module)]
    return found


def exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class the package defines, by qualified name."""
    found: dict[str, type[BaseException]] = {}
    for module in package_modules():
        for cls in classes_in(module, module.__name__):
            if issubclass(cls, BaseException):
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return found


EXCEPTIONS = exception_classes()


def test_the_walk_finds_the_package_and_its_exceptions() -> None:
    names = {module.__name__ for module in package_modules()}
    # docker, litellm and jsonschema are installed: the modules that use them are walked too
    assert {"agentfsm.sandbox.docker_engine", "agentfsm.model.llm", "agentfsm.cli.commands"} <= names
    assert {"agentfsm.errors.ConfigError", "agentfsm.errors.SandboxError", *NOT_ERRORS} <= set(EXCEPTIONS)


@pytest.mark.parametrize("name", sorted(EXCEPTIONS))
def test_every_exception_inherits_the_base(name: str) -> None:
    cls = EXCEPTIONS[name]
    if name in NOT_ERRORS:
        assert not issubclass(cls, AgentfsmError), f"{name} is listed in NOT_ERRORS; remove it from there"
    else:
        assert issubclass(cls, AgentfsmError), (
            f"{name} does not inherit `AgentfsmError`: write `class {cls.__name__}(AgentfsmError, "
            f"{cls.__base__.__name__})`, or list it in NOT_ERRORS with the reason"
        )


@pytest.mark.parametrize("name", sorted(set(EXCEPTIONS) - set(NOT_ERRORS)))
def test_every_exception_is_defined_in_errors(name: str) -> None:
    assert EXCEPTIONS[name].__module__ == "agentfsm.errors", f"move {name} into agentfsm/errors.py"


def test_errors_exports_each_class_it_defines() -> None:
    defined = {cls.__name__ for cls in classes_in(errors, "agentfsm.errors")}
    assert defined == set(errors.__all__)


@pytest.mark.parametrize(
    ("cls", "builtin"),
    [
        (errors.MachineSetupError, TypeError),
        (errors.ToolSetupError, ValueError),
        (errors.CheckpointError, ValueError),
        (errors.ConfigError, ValueError),
        (errors.AgentBusyError, RuntimeError),
        (errors.WrongPhaseError, RuntimeError),
        (errors.LLMError, RuntimeError),
        (errors.ScriptExhaustedError, RuntimeError),
        (errors.ArgumentError, ValueError),
        (errors.SandboxError, RuntimeError),
        (errors.ReplayError, ValueError),
        (errors.PauseRun, Exception),
        (errors.TokenLimitExceeded, Exception),
        (errors.EditorError, Exception),
        (errors.OptionsSetupError, TypeError),
        (errors.WrongValueError, ValueError),
        (errors.WrongTypeError, TypeError),
        (errors.NotFoundError, LookupError),
        (errors.KeyNotFoundError, KeyError),
        (errors.KeyNotFoundError, errors.NotFoundError),
        (errors.IndexOutOfRangeError, IndexError),
        (errors.IndexOutOfRangeError, errors.NotFoundError),
        (errors.MissingExtraError, ImportError),
        (errors.SearchError, RuntimeError),
        (errors.SearchConnectionError, ConnectionError),
        (errors.SearchConnectionError, errors.SearchError),
        (errors.SearchTimeoutError, TimeoutError),
        (errors.SearchTimeoutError, errors.SearchError),
        (errors.EndOfInputError, EOFError),
        (errors.SandboxPathError, OSError),
        (errors.OutsideWorkspaceError, PermissionError),
        (errors.OutsideWorkspaceError, errors.SandboxPathError),
        (errors.NoSuchFileError, FileNotFoundError),
        (errors.NoSuchFileError, errors.SandboxPathError),
        (errors.NotAFileError, IsADirectoryError),
        (errors.NotAFileError, errors.SandboxPathError),
    ],
)
def test_each_keeps_the_builtin_callers_catch(cls: type[Exception], builtin: type[Exception]) -> None:
    assert issubclass(cls, builtin)
    assert issubclass(cls, AgentfsmError)


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("agentfsm", "AgentfsmError"),
        ("agentfsm.sandbox", "SandboxError"),
        ("agentfsm.sandbox.base", "SandboxError"),
        ("agentfsm.agent.replay", "ReplayError"),
        ("agentfsm.toolbox.tool", "ArgumentError"),
        ("agentfsm.toolbox.editor_files", "EditorError"),
    ],
)
def test_the_old_import_paths_give_the_same_class(module: str, name: str) -> None:
    imported = importlib.import_module(module)
    assert name in imported.__all__
    assert getattr(imported, name) is getattr(errors, name)


def test_a_key_error_reads_as_written() -> None:
    # A plain KeyError shows its message quoted: KeyError("no tool named 'x'") prints "\"no tool named 'x'\"".
    exc = errors.KeyNotFoundError("no tool named 'x'; have ['bash']")
    assert str(exc) == "no tool named 'x'; have ['bash']"
    assert exc.args == ("no tool named 'x'; have ['bash']",)


def _render_in_an_unknown_format() -> None:
    from agentfsm.agent.table import AGENT_TABLE
    from agentfsm.fsm.diagram import render

    render(AGENT_TABLE, "gif")


def _breakpoint_on_nothing() -> None:
    from agentfsm.agent.stepping import Breakpoint

    Breakpoint()


def _remove_an_unknown_tool() -> None:
    from agentfsm.toolbox.tool import ToolCollection

    ToolCollection().remove("nope")


def _bash_with_no_time() -> None:
    from agentfsm.sandbox.local import LocalSandbox
    from agentfsm.toolbox.bash import Bash

    Bash(LocalSandbox(), timeout=0)


def _a_sandbox_that_is_none() -> None:
    from agentfsm.toolbox.sandboxed import as_provider

    as_provider(None)  # type: ignore[arg-type]


def _a_size_in_words() -> None:
    from agentfsm.sandbox.settings import memory_bytes

    memory_bytes("lots")


@pytest.mark.parametrize(
    ("call", "cls", "builtin", "message"),
    [
        (_render_in_an_unknown_format, errors.WrongValueError, ValueError, "unknown diagram format 'gif'"),
        (_breakpoint_on_nothing, errors.WrongValueError, ValueError, "a Breakpoint needs a `state`"),
        (_remove_an_unknown_tool, errors.KeyNotFoundError, KeyError, "no tool named 'nope'; have []"),
        (_bash_with_no_time, errors.ConfigError, ValueError, "`timeout` must be a positive number"),
        (
            _a_sandbox_that_is_none,
            errors.WrongTypeError,
            TypeError,
            "expected a Sandbox or a sandbox provider",
        ),
        (_a_size_in_words, errors.ConfigError, ValueError, "'lots' is not a size"),
    ],
)
def test_a_wrong_call_raises_the_class_and_its_builtin(
    call: Callable[[], None], cls: type[Exception], builtin: type[Exception], message: str
) -> None:
    with pytest.raises(cls) as raised:
        call()
    assert isinstance(raised.value, builtin) and isinstance(raised.value, AgentfsmError)
    assert str(raised.value).startswith(message)


async def test_a_path_outside_the_workspace_is_an_outside_workspace_error() -> None:
    from agentfsm.sandbox.local import LocalSandbox

    async with LocalSandbox() as sandbox:
        with pytest.raises(errors.OutsideWorkspaceError, match="outside the sandbox workspace") as raised:
            await sandbox.resolve("../outside")
        with pytest.raises(errors.NotAFileError, match="the workspace directory itself"):
            await sandbox.write_file(".", b"x")
    assert isinstance(raised.value, PermissionError)


# -- what the package raises ------------------------------------------------------

PACKAGE = Path(agentfsm.__file__).parent

BUILTIN_EXCEPTIONS = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
)

# Builtins a protocol asks for by that very class, with the reason; allowed wherever they are raised.
PROTOCOL = {
    "NotImplementedError": "an abstract method's body: the subclass must implement it",
    "StopIteration": "ends an iterator",
    "StopAsyncIteration": "ends an async iterator",
    "KeyboardInterrupt": "passes an interrupt on as it came",
    "AssertionError": "an invariant that fails only if agentfsm itself is wrong, as `assert` would",
}

# Builtins a protocol asks for in one module only, with the reason.
PROTOCOL_IN = {
    ("lazy.py", "AttributeError"): (
        "a module `__getattr__` raises AttributeError, as Python does for a missing module "
        "attribute (`hasattr` and `from package import name` rely on it)"
    ),
}


# TEMPORARY: modules being changed elsewhere, still raising these builtins (agent/replay.py
# and recording/ raise none by name). Convert each raise to a class of errors.py, then delete
# its entry; once the list is empty, delete it.
def builtin_raises_in(source: str) -> list[tuple[int, str]]:
    """(line, builtin) of each builtin exception `source` raises (``raise ValueError(...)``,
    ``raise ValueError``) or builds to raise elsewhere (``return PermissionError(...)``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise):
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        elif isinstance(node, ast.Call):
            target = node.func
        else:
            continue
        if isinstance(target, ast.Name) and target.id in BUILTIN_EXCEPTIONS:
            found.append((node.lineno, target.id))
    return sorted(set(found))


def builtin_raises() -> list[tuple[str, int, str]]:
    """(module path under agentfsm/, line, builtin) for every module of the package."""
    return [
        (path.relative_to(PACKAGE).as_posix(), line, name)
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, name in builtin_raises_in(path.read_text(encoding="utf-8"))
    ]


BUILTIN_RAISES = builtin_raises()


def allowed(module: str, name: str) -> bool:
    return name in PROTOCOL or (module, name) in PROTOCOL_IN


def test_the_scan_finds_builtins_raised_or_built() -> None:
    source = """
from .errors import ConfigError

def f(x):
    if x:
        raise ValueError(f"bad {x!r}")
    raise KeyError
def g():
    return PermissionError("refused")
def h(exc):
    try:
        raise ConfigError("bad")
    except ValueError:
        raise
    raise exc
"""
    assert builtin_raises_in(source) == [(6, "ValueError"), (7, "KeyError"), (9, "PermissionError")]
    assert {"lazy.py", "toolbox/tool.py"} <= {module for module, _, _ in BUILTIN_RAISES}


def test_every_raise_is_an_agentfsm_error() -> None:
    wrong = [
        f"agentfsm/{module}:{line}: {name}"
        for module, line, name in BUILTIN_RAISES
        if not allowed(module, name)
    ]
    assert not wrong, (
        "these raise a builtin exception: raise a class of agentfsm/errors.py that subclasses "
        "both `AgentfsmError` and that builtin (add one there if none fits), or, if a protocol "
        "needs the builtin itself, list it in PROTOCOL_IN with the reason:\n" + "\n".join(wrong)
    )


def test_the_allowances_are_still_needed() -> None:
    raised = {(module, name) for module, _, name in BUILTIN_RAISES}
    stale = sorted(set(PROTOCOL_IN) - raised)
    assert not stale, f"no longer raised: remove from PROTOCOL_IN: {stale}"
