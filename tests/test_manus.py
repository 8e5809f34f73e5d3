"""Manus through the agent loop, on a scripted model, in local mode.

The sandbox is real (`LocalSandbox` through the agent's `SandboxSession`):
the tests check what the model was shown and that the sandbox is gone when
the rules say it must be (end of run, failure, cancellation, `aclose`).
The Docker variants are in test_manus_docker.py.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import assert_pairs_complete

from agentfsm import AgentState, Manus, Role, StopReason
from agentfsm.agent.manus import UNKNOWN_WORKSPACE
from agentfsm.recording.checkpoint import read_checkpoint
from agentfsm.sandbox.base import Sandbox, SandboxError
from agentfsm.sandbox.session import SandboxSession
from agentfsm.sandbox.settings import SandboxSettings
from agentfsm.testing import ScriptedLLM, reply

LOCAL = SandboxSettings(mode="local", timeout=20)
TERMINATE = reply("Done.", [("terminate", {"status": "success"})])


def observations(agent: Manus) -> list[str]:
    return [m.content or "" for m in agent.memory if m.role is Role.TOOL]


def workspace_of(llm: ScriptedLLM, request: int) -> str:
    prompt = llm.requests[request].system_msgs[0].content or ""
    # after tool results the step prompt ends the system prompt: the directory ends its line
    return prompt.rsplit("The initial directory is: ", 1)[1].split("\n", 1)[0]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            state = next(line for line in fh if line.startswith("State:"))
    except FileNotFoundError:
        return False
    return state.split()[1] != "Z"


def write_run_read(path: str = "square.py") -> list[Any]:
    return [
        reply("I write the script.", [("str_replace_editor", {
            "command": "create", "path": path, "file_text": "print(12 ** 2)\n"})]),
        reply("I run it.", [("python_execute", {"code": f"exec(open({path!r}).read())"})]),
        reply("I read it back.", [("str_replace_editor", {"command": "view", "path": path})]),
        TERMINATE,
    ]  # fmt: skip


def test_manus_has_upstreams_toolbox_and_defaults() -> None:
    agent = Manus(llm=ScriptedLLM([]))
    assert agent.tools.names == [
        "python_execute", "bash", "browser_use", "str_replace_editor", "ask_human", "terminate"
    ]  # fmt: skip
    assert (agent.name, agent.max_steps, agent.max_observe) == ("manus", 20, 10_000)
    assert agent.special_tool_names == {"terminate"}
    assert agent.system_prompt is not None and agent.system_prompt.startswith("You are OpenManus")
    assert agent.next_step_prompt is not None and "`terminate` tool/function call" in agent.next_step_prompt
    assert agent.session.settings.mode == "auto"
    assert not agent.session.active  # nothing is made before a tool needs it


async def test_create_is_the_async_factory() -> None:
    agent = await Manus.create(llm=ScriptedLLM([]), sandbox=LOCAL, max_steps=5)
    assert isinstance(agent, Manus) and agent.max_steps == 5


async def test_write_run_read_terminate_and_the_sandbox_is_destroyed_after_the_run() -> None:
    llm = ScriptedLLM(write_run_read())
    agent = Manus(llm=llm, sandbox=LOCAL.model_copy(update={"keep_alive": False}))  # one sandbox per run
    result = await agent.run("Compute 12 squared with a script.")
    assert (result.state, result.stop_reason, result.steps) == (AgentState.FINISHED, StopReason.TERMINATED, 4)
    ws = workspace_of(llm, 1)
    assert workspace_of(llm, 0) == UNKNOWN_WORKSPACE  # local: the path exists only once the sandbox does
    assert Path(ws).is_absolute() and workspace_of(llm, 3) == ws
    created, ran, viewed, _ = observations(agent)
    assert created.endswith(f"`str_replace_editor` executed:\nFile created successfully at: {ws}/square.py")
    assert ran == "Observed output of cmd `python_execute` executed:\n144"
    assert viewed.endswith(f"`cat -n` on {ws}/square.py:\n     1\tprint(12 ** 2)\n")
    assert_pairs_complete(agent.memory.messages)
    assert not agent.session.active and not Path(ws).exists()


async def test_local_dir_is_named_in_the_first_prompt_and_kept(tmp_path: Path) -> None:
    llm = ScriptedLLM(write_run_read())
    agent = Manus(llm=llm, sandbox=SandboxSettings(mode="local", local_dir=str(tmp_path / "ws")))
    assert (await agent.run("task")).stop_reason is StopReason.TERMINATED
    assert workspace_of(llm, 0) == str(tmp_path / "ws")
    assert (tmp_path / "ws" / "square.py").read_text() == "print(12 ** 2)\n"


async def test_failures_inside_tools_are_observations() -> None:
    llm = ScriptedLLM([
        reply(tool_calls=[("python_execute", {"code": "raise ValueError('bad input')"})]),
        reply(tool_calls=[("str_replace_editor", {"command": "view", "path": "../../etc/passwd"})]),
        reply(tool_calls=[("bash", {"command": "exit 3"})]),
        reply(tool_calls=[("bash", {"command": "echo after"})]),
        TERMINATE,
    ])  # fmt: skip
    agent = Manus(llm=llm, sandbox=LOCAL)
    assert (await agent.run("task")).stop_reason is StopReason.TERMINATED
    python, editor, exited, after, _ = observations(agent)
    assert python.startswith("Error: Python failed (exit code 1):\nstderr:\nTraceback")
    assert python.endswith("ValueError: bad input")
    assert editor.startswith("Error: path '../../etc/passwd' is outside the sandbox workspace")
    assert "the shell exited" in exited and "[exit code 3]" in exited
    assert after.endswith("executed:\nafter")


async def test_a_crashing_sandbox_is_an_observation_and_the_run_goes_on() -> None:
    class Broken(SandboxSession):
        async def get(self) -> Sandbox:
            raise SandboxError("the Docker engine is gone")

    llm = ScriptedLLM([reply(tool_calls=[("bash", {"command": "ls"})]), TERMINATE])
    agent = Manus(llm=llm, sandbox=Broken(LOCAL))
    assert (await agent.run("task")).stop_reason is StopReason.TERMINATED
    assert observations(agent)[0] == "Error: ⚠️ Tool 'bash' encountered a problem: the Docker engine is gone"


async def test_ten_megabytes_of_output_are_truncated_and_the_traceback_still_shows() -> None:
    code = "import sys\nsys.stdout.write('x' * 10_000_000)\nraise RuntimeError('after the flood')"
    llm = ScriptedLLM([reply(tool_calls=[("python_execute", {"code": code})]), TERMINATE])
    agent = Manus(llm=llm, sandbox=LOCAL)
    started = time.monotonic()
    assert (await agent.run("task")).stop_reason is StopReason.TERMINATED
    assert time.monotonic() - started < 30
    seen = observations(agent)[0]
    assert len(seen) <= 10_000 + 100
    assert "[stdout clipped:" in seen and seen.endswith("RuntimeError: after the flood")


async def test_ask_human_reaches_the_callback() -> None:
    async def ask(question: str) -> str:
        return f"you asked {question!r}; use 7"

    llm = ScriptedLLM([reply(tool_calls=[("ask_human", {"inquire": "Which number?"})]), TERMINATE])
    agent = Manus(llm=llm, sandbox=LOCAL, ask_human=ask)
    await agent.run("task")
    assert observations(agent)[0].endswith("you asked 'Which number?'; use 7")
    assert not agent.session.active  # ask_human never needed a sandbox


async def test_cancelling_run_mid_exec_kills_the_process_and_destroys_the_sandbox(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    code = (
        f"import os, time\nopen({str(marker)!r}, 'w').write(f'{{os.getpid()}} {{os.getcwd()}}')\n"
        "time.sleep(60)"
    )
    agent = Manus(llm=ScriptedLLM([reply(tool_calls=[("python_execute", {"code": code})])]), sandbox=LOCAL)
    task = asyncio.create_task(agent.run("task"))
    for _ in range(200):
        if marker.exists() and marker.read_text():
            break
        await asyncio.sleep(0.05)
    pid_text, ws = marker.read_text().split(" ", 1)
    assert alive(int(pid_text)) and Path(ws).is_dir()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert agent.last_result is not None
    assert (agent.last_result.state, agent.last_result.stop_reason) == (
        AgentState.ERROR,
        StopReason.CANCELLED,
    )
    assert not agent.session.active
    assert not Path(ws).exists()
    assert not alive(int(pid_text))
    assert_pairs_complete(agent.memory.messages)


async def test_keep_alive_keeps_the_sandbox_between_runs_until_aclose() -> None:
    llm = ScriptedLLM([
        reply(tool_calls=[("bash", {"command": "echo kept > note.txt; pwd"})]), TERMINATE,
        reply(tool_calls=[("bash", {"command": "cat note.txt"})]), TERMINATE,
    ])  # fmt: skip
    async with Manus(llm=llm, sandbox=SandboxSettings(mode="local", keep_alive=True)) as agent:
        await agent.run("first")
        assert agent.session.active
        ws = observations(agent)[0].rsplit("\n", 1)[1]
        await agent.run("second")
        assert observations(agent)[2].endswith("executed:\nkept")
        assert Path(ws).is_dir()
    assert not agent.session.active and not Path(ws).exists()


async def test_keep_alive_still_destroys_the_sandbox_when_a_run_fails() -> None:
    llm = ScriptedLLM([reply(tool_calls=[("bash", {"command": "pwd"})]), RuntimeError("provider down")])
    agent = Manus(llm=llm, sandbox=SandboxSettings(mode="local", keep_alive=True))
    result = await agent.run("task")
    assert (result.state, result.stop_reason) == (AgentState.ERROR, StopReason.ERROR)
    ws = observations(agent)[0].rsplit("\n", 1)[1]
    assert not agent.session.active and not os.path.exists(ws)


async def test_a_manus_run_resumes_from_its_checkpoint_in_a_new_agent(tmp_path: Path) -> None:
    """The prompt names the workspace at each think; the checkpoint check compares the configured one."""
    settings = SandboxSettings(mode="local", local_dir=str(tmp_path / "ws"), timeout=20)
    script = write_run_read()
    first = Manus(llm=ScriptedLLM(script), sandbox=settings)
    path, saved = tmp_path / "run.json", tmp_path / "saved.json"

    async for t in first.iter("Compute 12 squared with a script.", checkpoint=path):
        if (t.dest, t.step) == ("OBSERVING", 2):  # its records are in the journal once iter() yields it
            saved.write_text(path.read_text())
    reference = first.last_result
    assert reference is not None
    await first.aclose()
    state = read_checkpoint(saved)["run_state"]
    assert (state["state"], state["step"]) == ("OBSERVING", 2)
    llm = ScriptedLLM(script[2:])  # what the model answers after step 2
    second = Manus(llm=llm, sandbox=settings)
    try:
        result = await second.resume(saved)
    finally:
        await second.aclose()
    assert (result.stop_reason, result.steps, result.output) == (
        reference.stop_reason,
        reference.steps,
        reference.output,
    )
    assert workspace_of(llm, 0) == os.path.realpath(tmp_path / "ws")
    assert observations(second)[1] == "Observed output of cmd `python_execute` executed:\n144"
    assert observations(second)[2].endswith("     1\tprint(12 ** 2)\n")
    assert_pairs_complete(second.memory.messages)
