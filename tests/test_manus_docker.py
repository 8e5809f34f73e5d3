"""Manus through the agent loop, on a scripted model, with the Docker sandbox.

What the model does to the sandbox (an infinite loop, a memory hog, a fork
bomb, a network call, writes outside the workspace, path traversal, 10 MB of
output) comes back as an observation, the next call still works, and the
container is gone whenever the rules say so. The containment itself is
tested against the sandbox directly in test_sandbox_docker.py. Without an
engine or the image (tools/build-sandbox-image) these skip, unless
AGENTFSM_REQUIRE_DOCKER=1 (CI), where they fail.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from conftest import assert_pairs_complete
from sandbox_support import docker_settings, exists, require_docker

from agentfsm import AgentState, Manus, Role, StopReason
from agentfsm.sandbox.base import Sandbox
from agentfsm.sandbox.docker import DockerSandbox
from agentfsm.sandbox.session import SandboxSession
from agentfsm.testing import ScriptedLLM, reply

pytestmark = [pytest.mark.docker, pytest.mark.asyncio(loop_scope="module")]

TERMINATE = reply("Done.", [("terminate", {"status": "success"})])
CHECK = ("python_execute", {"code": "print('still works')"})


class Recording(SandboxSession):
    """A session that remembers the sandboxes it made, so a test can look for their containers."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(docker_settings(**settings))
        self.made: list[DockerSandbox] = []

    async def get(self) -> Sandbox:
        sandbox = await super().get()
        if isinstance(sandbox, DockerSandbox) and sandbox not in self.made:
            self.made.append(sandbox)
        return sandbox


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared() -> AsyncIterator[Recording]:
    """One container for the tests that only call tools: kept alive between their runs."""
    require_docker()
    session = Recording(timeout=5.0, keep_alive=True)
    try:
        yield session
    finally:
        await session.close()
    assert not any(exists("containers", box.container_name) for box in session.made)


async def observe(session: SandboxSession, *calls: tuple[str, dict[str, Any]]) -> list[str]:
    """Run one call per step, then terminate; the observations, in order (terminate's left out)."""
    llm = ScriptedLLM([*(reply(tool_calls=[call]) for call in calls), TERMINATE])
    agent = Manus(llm=llm, sandbox=session, max_steps=len(calls) + 1)
    result = await agent.run("task")
    assert result.stop_reason is StopReason.TERMINATED, result
    assert_pairs_complete(agent.memory.messages)
    return [m.content or "" for m in agent.memory if m.role is Role.TOOL][:-1]


async def test_write_run_read_terminate_in_a_container_that_is_gone_after_the_run() -> None:
    require_docker()
    session = Recording(keep_alive=False)  # one sandbox per run
    llm = ScriptedLLM([
        reply(tool_calls=[("str_replace_editor", {
            "command": "create", "path": "/workspace/square.py", "file_text": "print(12 ** 2)\n"})]),
        reply(tool_calls=[("python_execute", {"code": "import runpy\nrunpy.run_path('square.py')"})]),
        reply(tool_calls=[("bash", {"command": "cat square.py; whoami 2>/dev/null || id -u"})]),
        reply(tool_calls=[("str_replace_editor", {"command": "view", "path": "/workspace"})]),
        TERMINATE,
    ])  # fmt: skip
    agent = Manus(llm=llm, sandbox=session)
    result = await agent.run("task")
    assert (result.state, result.stop_reason, result.steps) == (AgentState.FINISHED, StopReason.TERMINATED, 5)
    created, ran, read, listed, _ = [m.content or "" for m in agent.memory if m.role is Role.TOOL]
    assert created.endswith("File created successfully at: /workspace/square.py")
    assert ran.endswith("executed:\n144")
    assert read.endswith("executed:\nprint(12 ** 2)\nshell")  # the shell's own user, named by the image
    assert listed.endswith("excluding hidden items:\n/workspace\n/workspace/square.py\n")
    prompt = llm.requests[0].system_msgs[0].content or ""
    assert prompt.endswith("The initial directory is: /workspace")  # known before the container exists
    (box,) = session.made
    assert not session.active and not exists("containers", box.container_name)
    assert not exists("volumes", box.container_name)


async def test_infinite_loop_is_killed_at_the_timeout_and_the_next_call_works(shared: Recording) -> None:
    started = time.monotonic()
    loop, after = await observe(shared, ("python_execute", {"code": "while True: pass", "timeout": 2}), CHECK)
    assert time.monotonic() - started < 20
    assert loop.startswith("Error: Execution timeout after 2 seconds: the process was killed.")
    assert after.endswith("executed:\nstill works")


async def test_bash_timeout_restarts_the_session_and_says_so(shared: Recording) -> None:
    _, slept, pwd = await observe(
        shared,
        ("bash", {"command": "cd /tmp"}),
        ("bash", {"command": "sleep 60"}),
        ("bash", {"command": "pwd"}),
    )
    assert slept.startswith("Error: Command timed out after 5 seconds: it was killed and the shell session")
    assert pwd.endswith("executed:\n/workspace")


async def test_memory_hog_is_killed_by_the_limit_and_the_next_call_works(shared: Recording) -> None:
    hog, after = await observe(shared, ("python_execute", {"code": "block = b'x' * (1024 ** 3)"}), CHECK)
    assert hog.startswith("Error: Python failed")
    assert "ran out of memory (the sandbox's limit is 256m)" in hog
    assert after.endswith("executed:\nstill works")


async def test_fork_bomb_is_held_by_the_pids_limit_and_the_next_call_works(shared: Recording) -> None:
    bomb = "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass"
    started = time.monotonic()
    held, after = await observe(shared, ("python_execute", {"code": bomb, "timeout": 3}), CHECK)
    assert time.monotonic() - started < 30
    assert held.startswith("Error: Execution timeout after 3 seconds")
    assert after.endswith("executed:\nstill works")


async def test_network_calls_are_refused(shared: Recording) -> None:
    code = "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=3)"
    (refused,) = await observe(shared, ("python_execute", {"code": code}))
    assert refused.startswith("Error: Python failed (exit code 1)")
    assert "Network is unreachable" in refused


async def test_writes_outside_the_workspace_are_refused(shared: Recording) -> None:
    python, shell, editor, inside = await observe(
        shared,
        ("python_execute", {"code": "open('/usr/evil', 'w').write('x')"}),
        ("bash", {"command": "echo x > /etc/evil"}),
        ("str_replace_editor", {"command": "create", "path": "/etc/evil", "file_text": "x"}),
        ("bash", {"command": "echo fine > /tmp/ok && cat /tmp/ok"}),
    )
    assert "Read-only file system" in python and python.startswith("Error: Python failed")
    assert "Read-only file system" in shell and "[exit code 1]" in shell
    assert editor == (
        "Error: path '/etc/evil' is outside the sandbox workspace /workspace: refused. "
        "Use a path inside the workspace."
    )
    assert inside.endswith("executed:\nfine")


async def test_editor_path_traversal_and_symlinks_out_are_refused(shared: Recording) -> None:
    up, through_root, _, link, linked_dir = await observe(
        shared,
        ("str_replace_editor", {"command": "view", "path": "../etc/passwd"}),
        ("str_replace_editor", {"command": "view", "path": "/workspace/../etc/shadow"}),
        ("bash", {"command": "ln -sf /etc/passwd /workspace/pw && ln -sfn /etc /workspace/etc"}),
        ("str_replace_editor", {"command": "view", "path": "pw"}),
        ("str_replace_editor", {"command": "create", "path": "etc/evil", "file_text": "x"}),
    )
    for seen in (up, through_root, link, linked_dir):
        assert seen.startswith("Error: path ") and "is outside the sandbox workspace /workspace" in seen


async def test_ten_megabytes_of_output_are_truncated_without_hanging(shared: Recording) -> None:
    started = time.monotonic()
    python, shell = await observe(
        shared,
        ("python_execute", {"code": "print('x' * 10_000_000)"}),
        ("bash", {"command": "head -c 10000000 /dev/zero | tr '\\0' y"}),
    )
    assert time.monotonic() - started < 30
    for seen in (python, shell):
        assert len(seen) <= 10_100 and "[stdout clipped: " in seen


async def test_a_missing_image_is_an_observation_naming_it_and_the_run_goes_on() -> None:
    require_docker()
    session = SandboxSession(docker_settings(image="agentfsm-no-such-image:0"))
    (seen,) = await observe(session, ("bash", {"command": "ls"}))
    assert seen.startswith(
        "Error: ⚠️ Tool 'bash' encountered a problem: the sandbox image 'agentfsm-no-such-image:0'"
    )
    assert "agentfsm sandbox build" in seen


async def test_cancelling_run_mid_exec_removes_the_container() -> None:
    require_docker()
    session = Recording()
    code = "open('started', 'w').write('1')\nimport time\ntime.sleep(60)"
    agent = Manus(llm=ScriptedLLM([reply(tool_calls=[("python_execute", {"code": code})])]), sandbox=session)
    task = asyncio.create_task(agent.run("task"))
    for _ in range(300):
        if session.made and (await session.made[0].exec(["test", "-e", "started"])).exit_code == 0:
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("the code never started")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert agent.last_result is not None
    assert (agent.last_result.state, agent.last_result.stop_reason) == (
        AgentState.ERROR,
        StopReason.CANCELLED,
    )
    (box,) = session.made
    assert not session.active
    assert not exists("containers", box.container_name) and not exists("volumes", box.container_name)


async def test_keep_alive_shares_one_container_across_runs_until_aclose() -> None:
    require_docker()
    session = Recording(keep_alive=True)
    llm = ScriptedLLM([
        reply(tool_calls=[("bash", {"command": "echo kept > note.txt"})]), TERMINATE,
        reply(tool_calls=[("bash", {"command": "cat note.txt"})]), TERMINATE,
    ])  # fmt: skip
    async with Manus(llm=llm, sandbox=session) as agent:
        await agent.run("first")
        await agent.run("second")
        assert [m.content for m in agent.memory if m.role is Role.TOOL][2] == (
            "Observed output of cmd `bash` executed:\nkept"
        )
        (box,) = session.made
        assert exists("containers", box.container_name)
    assert not session.active and not exists("containers", box.container_name)
