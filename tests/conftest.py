"""Shared fixtures: small tools and helpers for asserting on runs."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentfsm import Message, Role, Terminate, ToolCollection, tool

# The npm MCP servers' fixtures (`everything_stdio`, `everything_http`), for any test module.
pytest_plugins = ["mcp_servers"]


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def slow_echo(text: str, delay: float = 0.0) -> str:
    """Echo `text` after `delay` seconds."""
    await asyncio.sleep(delay)
    return text


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(reason)


# Variables that steer the test run itself, not agentfsm's configuration.
_HARNESS_VARIABLES = {
    "AGENTFSM_REQUIRE_DOCKER",
    "AGENTFSM_REQUIRE_MCP",
    "AGENTFSM_REQUIRE_BROWSER",
    "AGENTFSM_REQUIRE_POSTGRES",
    "AGENTFSM_POSTGRES_URL",
    "AGENTFSM_TEST_IMAGE",
}


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No AGENTFSM_* configuration variables, and a working directory without agentfsm.toml."""
    for name in list(os.environ):
        if name.upper().startswith("AGENTFSM_") and name not in _HARNESS_VARIABLES:
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def toolbox() -> ToolCollection:
    return ToolCollection(add, slow_echo, explode, Terminate())


def flow_state_of(checkpoint: Path) -> str | None:
    """The flow's state as its checkpoint holds it now (None: not written yet, or mid-write)."""
    from agentfsm.errors import CheckpointError
    from agentfsm.flow.checkpoint import read_flow_checkpoint

    try:
        state: str = read_flow_checkpoint(checkpoint)["run_state"]["state"]
    except (OSError, CheckpointError):
        return None
    return state


def assert_pairs_complete(messages: list[Message]) -> None:
    """Every tool message follows its assistant call; every call has a result, and its own id."""
    open_ids: set[str] = set()
    for message in messages:
        if message.role is Role.TOOL:
            assert message.tool_call_id in open_ids, f"orphan tool message {message.tool_call_id!r}"
            open_ids.discard(message.tool_call_id)
        else:
            assert not open_ids, f"calls {open_ids} have no result before a {message.role} message"
            if message.role is Role.ASSISTANT:
                ids = [call.id for call in message.tool_calls]
                assert len(set(ids)) == len(ids), f"calls share an id: {ids}"
                open_ids = set(ids)
    assert not open_ids, f"calls {open_ids} never got a result"


class EventCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.events: list[dict[str, object]] = []

    def emit(self, record: logging.LogRecord) -> None:
        assert isinstance(record.msg, dict)
        self.events.append(dict(record.msg))

    def named(self, name: str) -> list[dict[str, object]]:
        return [e for e in self.events if e.get("event") == name]


@pytest.fixture
def agentfsm_events() -> Iterator[EventCapture]:
    """Structured events of the `agentfsm` logger (as the library emits them)."""
    logger = logging.getLogger("agentfsm")
    handler = EventCapture()
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


@pytest.fixture(scope="session", autouse=True)
def _no_browser_leftovers() -> Iterator[None]:
    """After the whole suite: no browser process, Playwright driver or browser work directory remains."""
    yield
    from browser_support import browser_leftovers

    remaining = browser_leftovers()
    if remaining:
        pytest.fail(f"the tests left browser resources behind: {', '.join(remaining)}", pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def _no_sandbox_leftovers() -> Iterator[None]:
    """After the whole suite: no sandbox container, volume or temporary workspace of this run remains."""
    yield
    from sandbox_support import leftovers

    remaining = leftovers()
    if remaining:
        pytest.fail(f"the tests left sandbox resources behind: {', '.join(remaining)}", pytrace=False)
