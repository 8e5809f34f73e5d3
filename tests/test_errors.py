"""The exceptions: every class agentfsm defines inherits `AgentfsmError`, lives in `errors.py`,
keeps the builtin base callers catch, and stays importable where it was imported from before.

The classes are found by walking every module of the package, so a new exception class
defined anywhere is checked without being listed here.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

import agentfsm
from agentfsm import errors
from agentfsm.errors import AgentfsmError

# Exception classes that must not inherit AgentfsmError, each with the reason.
NOT_ERRORS = {
    "agentfsm.agent.replay._Stop": (
        "a private BaseException for control flow: replay leaves the run with it, and no "
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
