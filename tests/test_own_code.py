"""Your own code on the command line: `--agent MODULE:FUNCTION` (a factory given the configured model
as ``llm=``), `--tool MODULE:FUNCTION` for the built-in agents, `[agent] factory` and `tools` in the
configuration; what built the agent is recorded, so `resume` and `replay` build it again; and every
mistake is one line, exit status 2. As a user runs it: `python -m agentfsm` in a folder holding the
person's module, the model a real HTTP server on 127.0.0.1 (llmock)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.usefixtures("clean_env")

KEY = "test-key-0c1e"

MINE = '''
from pathlib import Path

from agentfsm import Edge, Guard, StateSpec, Terminate, ToolCallAgent, tool
from agentfsm.agent.table import AGENT_TABLE, NEXT_STEP
from agentfsm.flow.flow import PlanningFlow


@tool
def shout(text: str) -> str:
    """Say `text` loudly."""
    Path("shouted.txt").open("a").write(text.upper() + "\\n")
    return text.upper() + "!"


def whisper(text: str) -> str:
    """Say `text` quietly."""
    return text.lower() + "..."


async def note(agent):  # the extra phase's work
    Path("noted.txt").open("a").write(f"step {agent.run_state.step}\\n")


class NotingAgent(ToolCallAgent):
    table = AGENT_TABLE.extend(
        states=[StateSpec("NOTING", "RUNNING", note, "note_done")],
        edges=[
            Edge("observe_done", "OBSERVING", "NOTING", Guard("always", lambda agent: True)),
            Edge("note_done", "NOTING", "THINKING", effect=NEXT_STEP),
        ],
        before=AGENT_TABLE.edge("OBSERVING", "THINKING"),
    )


def build(llm):
    Path("built.txt").open("a").write("built\\n")
    return NotingAgent(llm=llm, tools=[shout, Terminate()], name="noter", max_steps=5)


def build_flow(llm):
    return PlanningFlow(agents={"toolcall": ToolCallAgent(llm=llm)}, planner_llm=llm)


def broken(llm):
    raise RuntimeError("no key for the vault")


def wrong(llm):
    return "an agent"


NOT_A_FUNCTION = 42
'''


@pytest.fixture
def mine(clean_env: Path) -> Path:
    (clean_env / "mine.py").write_text(MINE)
    return clean_env


def agentfsm(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentfsm", *args], capture_output=True, text=True, timeout=timeout,
        env={**os.environ},
    )  # fmt: skip


def model(llmock: Any) -> list[str]:
    return ["--model", "openai/test-model", "--api-base", llmock.base_url("openai"), "--api-key", KEY]


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_run_builds_the_person_s_agent_with_its_factory_and_records_it(mine: Path, llmock: Any):
    llmock.call_tool("shout", {"text": "hello"})
    llmock.call_tool("terminate", {"status": "success"})
    done = agentfsm(
        "run", "shout hello", "--agent", "mine:build", *model(llmock), "--trace", "t.jsonl", "--json"
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["state"], result["stop_reason"]) == ("FINISHED", "terminated")
    assert (mine / "shouted.txt").read_text() == "HELLO\n"  # the person's tool ran
    assert (mine / "noted.txt").read_text() == "step 1\n"  # and the person's own phase
    header = records(mine / "t.jsonl")[0]
    assert header["agent"] == "noter" and header["agent_class"] == "mine.NotingAgent"
    assert header["config"]["built_by"] == {"factory": "mine:build"}
    sent = llmock.requests[0].body
    assert {t["function"]["name"] for t in sent["tools"]} == {"shout", "terminate"}


def test_replay_imports_the_recorded_factory_s_module_and_drives_its_own_table(mine: Path, llmock: Any):
    llmock.call_tool("shout", {"text": "hi"})
    llmock.call_tool("terminate", {"status": "success"})
    assert (
        agentfsm("run", "shout", "--agent", "mine:build", *model(llmock), "--trace", "t.jsonl").returncode
        == 0
    )
    done = agentfsm("replay", "t.jsonl")
    assert done.returncode == 0, done.stderr
    assert "OBSERVING -> NOTING" in done.stdout and "NOTING -> THINKING" in done.stdout
    assert (mine / "shouted.txt").read_text() == "HI\n"  # replayed: the tool did not run again


def test_resume_builds_the_agent_again_with_the_recorded_factory(mine: Path, llmock: Any):
    llmock.call_tool("terminate", {"status": "success"})
    ran = agentfsm("run", "end", "--agent", "mine:build", *model(llmock), "--checkpoint", "c.jsonl")
    assert ran.returncode == 0, ran.stderr
    done = agentfsm("resume", "c.jsonl", "--api-key", KEY, "--json")
    assert done.returncode == 0, done.stderr
    assert "the run already finished; its result:" in done.stderr
    assert json.loads(done.stdout)["stop_reason"] == "terminated"
    assert (mine / "built.txt").read_text() == "built\nbuilt\n"  # built by the factory again
    (mine / "mine.py").write_text(MINE.replace("max_steps=5", "max_steps=6"))  # built otherwise now
    done = agentfsm("resume", "c.jsonl", "--api-key", KEY)
    assert done.returncode == 2
    assert "these options differ: max_steps" in done.stderr.strip().splitlines()[-1]


def test_tool_adds_the_person_s_functions_to_a_built_in_agent_and_resume_adds_them_again(
    mine: Path, llmock: Any
):
    llmock.call_tool("whisper", {"text": "HUSH"})
    llmock.call_tool("terminate", {"status": "success"})
    done = agentfsm(
        "run", "whisper", *model(llmock), "--tool", "mine:whisper", "--tool", "mine:shout",
        "--checkpoint", "c.jsonl", "--trace", "t.jsonl", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert {t["function"]["name"] for t in llmock.requests[0].body["tools"]} == {
        "whisper",
        "shout",
        "terminate",
    }
    tool_records = [r for r in records(mine / "t.jsonl") if r["kind"] == "tool"]
    assert tool_records[0]["observation"].endswith("hush...")
    assert records(mine / "t.jsonl")[0]["config"]["built_by"] == {"tools": ["mine:whisper", "mine:shout"]}
    resumed = agentfsm("resume", "c.jsonl", "--api-key", KEY, "--json")
    assert resumed.returncode == 0, resumed.stderr  # the same tools again: the configuration matches


def test_the_configuration_names_the_factory_and_the_tools(mine: Path, llmock: Any):
    (mine / "agentfsm.toml").write_text('[agent]\nfactory = "mine:build"\n')
    llmock.call_tool("terminate", {"status": "success"})
    done = agentfsm("run", "end", *model(llmock), "--trace", "t.jsonl")
    assert done.returncode == 0, done.stderr
    assert records(mine / "t.jsonl")[0]["config"]["built_by"] == {"factory": "mine:build"}
    (mine / "agentfsm.toml").write_text('[agent]\ntools = ["mine:whisper"]\n')
    llmock.call_tool("terminate", {"status": "success"})
    done = agentfsm("run", "end", *model(llmock), "--trace", "t2.jsonl")
    assert done.returncode == 0, done.stderr
    assert records(mine / "t2.jsonl")[0]["config"]["built_by"] == {"tools": ["mine:whisper"]}


def test_a_factory_that_builds_a_flow_runs_it(mine: Path, llmock: Any):
    plan = {"title": "One step", "steps": ["Say done"]}
    llmock.call_tool("planning", {"command": "create", "plan_id": "p1", **plan})
    llmock.reply("done")
    llmock.reply("All done.")
    done = agentfsm("run", "do one thing", "--agent", "mine:build_flow", *model(llmock), "--trace", "f.jsonl")
    assert done.returncode == 0, done.stderr
    assert records(mine / "f.jsonl")[0]["config"]["built_by"] == {"factory": "mine:build_flow"}
    refused = agentfsm("debug", "x", "--agent", "mine:build_flow", *model(llmock))
    assert refused.returncode == 2 and "built a flow; debug takes an agent" in refused.stderr


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--agent", "nowhere:build"], "--agent 'nowhere:build': no module 'nowhere' here"),
        (["--agent", "mine:nothing"], "--agent 'mine:nothing': mine has no 'nothing'; give MODULE:FUNCTION"),
        (["--agent", "mine:NOT_A_FUNCTION"], "--agent 'mine:NOT_A_FUNCTION' is a int, not a function"),
        (["--agent", "mine:broken"], "--agent 'mine:broken' raised RuntimeError: no key for the vault"),
        (["--agent", "mine:wrong"], "--agent 'mine:wrong' returned a str, not an agent or a flow"),
        (["--agent", "nothing"], "'nothing' is no agent: choose toolcall, manus, mcp, browser, or give"),
        (["--agent", "mine:build", "--max-steps", "3"], "--max-steps configure the built-in agents"),
        (["--agent", "mine:build", "--tool", "mine:whisper"], "--tool ([agent] tools) adds tools to the"),
        (
            ["--tool", "mine:NOT_A_FUNCTION"],
            "--tool 'mine:NOT_A_FUNCTION' is a int, not a function or a Tool",
        ),
        (["--tool", "whisper"], "--tool 'whisper': give MODULE:FUNCTION"),
    ],
)
def test_a_mistake_in_the_person_s_code_is_one_line_and_exit_2(
    mine: Path, llmock: Any, flags: list[str], says: str
):
    done = agentfsm("run", "task", *model(llmock), *flags)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr
    assert not llmock.requests  # refused before the model was asked


async def test_mcp_serve_serves_the_person_s_agent_as_the_default(mine: Path, llmock: Any):
    from mcp import StdioServerParameters
    from mcp.client import Client

    llmock.call_tool("shout", {"text": "served"})
    llmock.call_tool("terminate", {"status": "success"})
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentfsm", "mcp-serve", "--agent", "mine:build", *model(llmock)],
        cwd=mine,
        env={**os.environ},
    )
    async with Client(params) as client:
        (listed,) = (await client.list_tools()).tools
        agent = listed.input_schema["properties"]["agent"]
        assert agent["default"] == "mine:build" and "mine:build" in agent["enum"]
        result = await client.call_tool("run_agent", {"task": "shout served", "max_steps": 4})
    assert not result.is_error, result
    assert result.structured_content["stop_reason"] == "terminated"
    assert (mine / "shouted.txt").read_text() == "SERVED\n"


def test_mcp_serve_refuses_a_factory_it_cannot_serve_before_serving(mine: Path, llmock: Any):
    done = agentfsm("mcp-serve", "--agent", "mine:build_flow", *model(llmock))
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .endswith("--agent mine:build_flow built a PlanningFlow; mcp-serve serves tool-calling agents")
    )


def test_a_worker_runs_the_person_s_agent_submitted_by_its_name(mine: Path, llmock: Any):
    import time

    llmock.call_tool("shout", {"text": "durable"})
    llmock.call_tool("terminate", {"status": "success"})
    (mine / "agentfsm.toml").write_text(
        f'[llm]\nmodel = "openai/test-model"\napi_base = "{llmock.base_url("openai")}"\napi_key = "{KEY}"\n'
    )
    db = f"sqlite:///{mine / 'runs.db'}"
    log = mine / "worker.log"
    with open(log, "w") as err:
        command = ["-m", "agentfsm", "worker", "--db", db, "--agent", "mine:build", "--worker-id", "w"]
        worker = subprocess.Popen(
            [sys.executable, *command], stdout=subprocess.DEVNULL, stderr=err, text=True, env={**os.environ}
        )
    try:
        deadline = time.monotonic() + 60
        while "worker w runs queue" not in log.read_text():
            assert worker.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        submitted = agentfsm("submit", "shout durable", "--db", db, "--agent", "mine:build")
        assert submitted.returncode == 0, submitted.stderr
        done = agentfsm("result", submitted.stdout.strip(), "--db", db, "--wait", "--json", timeout=90)
        assert done.returncode == 0, done.stderr + log.read_text()
        assert json.loads(done.stdout)["stop_reason"] == "terminated"
        assert (mine / "shouted.txt").read_text() == "DURABLE\n"
    finally:
        worker.terminate()
        worker.communicate(timeout=30)
    refused = agentfsm("worker", "--db", db, "--agent", "mine:nothing")
    assert refused.returncode == 2 and "--agent 'mine:nothing': mine has no 'nothing'" in refused.stderr


@contextlib.asynccontextmanager
async def _inspector(*paths: str, agent: str, llmock: Any) -> AsyncIterator[str]:
    """`agentfsm ui PATHS --agent AGENT` in a process of its own, on llmock's model: its URL."""
    command = [sys.executable, "-m", "agentfsm", "ui", *paths, "--agent", agent, *model(llmock)]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ}
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 60)
        found = re.search(rf"at (http://127\.0\.0\.1:\d+/); runs started on the page by {agent} \(", line)
        assert found, line + (process.stderr.read() if process.poll() is not None else "")  # type: ignore[union-attr]
        yield found[1]
    finally:
        process.terminate()
        process.wait(timeout=30)


async def _forked(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """The page's fork of ``body["key"]`` POSTed, then its summary once the fork has finished."""
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"{url}api/run/fork", json=body, headers={"Origin": url.rstrip("/")}
        ) as response:
            answer = await response.json()
            assert response.status == 200, answer
        for _ in range(300):
            async with session.get(f"{url}api/run", params={"key": answer["key"]}) as response:
                summary: dict[str, Any] = await response.json()
            if summary["status"]["state"] == "finished":
                break
            await asyncio.sleep(0.1)
    return summary


async def _recordings(url: str) -> list[dict[str, Any]]:
    import aiohttp

    async with aiohttp.ClientSession() as session, session.get(f"{url}api/runs") as response:
        return [r for r in (await response.json())["runs"] if "trace" in r["kind"]]


async def test_the_inspector_forks_a_recording_by_the_person_s_agent(mine: Path, llmock: Any):
    import aiohttp

    llmock.call_tool("shout", {"text": "first"})
    llmock.call_tool("terminate", {"status": "success"})
    ran = agentfsm("run", "shout", "--agent", "mine:build", *model(llmock), "--trace", "t.jsonl")
    assert ran.returncode == 0, ran.stderr
    llmock.call_tool("terminate", {"status": "success"})  # the fork's one model call
    async with _inspector("t.jsonl", agent="mine:build", llmock=llmock) as url:
        (row,) = await _recordings(url)
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{url}api/run", params={"key": row["key"]}) as response,
        ):
            assert (await response.json())["fork"]["agents"] == ["mine:build"]
        summary = await _forked(url, {"key": row["key"], "at": 3, "agent": "mine:build"})
    assert summary["forked_from"]["transition"] == 3 and summary["result"]["stop_reason"] == "terminated"
    assert (mine / "built.txt").read_text().count("built") >= 3  # the run, the check, the fork


async def test_the_inspector_forks_a_flows_recording_by_the_person_s_flow(mine: Path, llmock: Any):
    """``agentfsm ui TRACE --agent MODULE:FUNCTION`` with a factory that builds a flow: the flow's
    trace forks from the page after its plan was made, and only the step and the summary run."""
    plan = {"title": "One step", "steps": ["Say done"]}
    llmock.call_tool("planning", {"command": "create", "plan_id": "p1", **plan})
    llmock.reply("done")
    llmock.reply("All done.")
    ran = agentfsm("run", "do one thing", "--agent", "mine:build_flow", *model(llmock), "--trace", "f.jsonl")
    assert ran.returncode == 0, ran.stderr
    llmock.reply("done again")  # the fork's step
    llmock.reply("All done again.")  # and its summary: no new plan
    asked = len(llmock.requests)
    async with _inspector("f.jsonl", agent="mine:build_flow", llmock=llmock) as url:
        (row,) = await _recordings(url)
        summary = await _forked(url, {"key": row["key"], "at": 1, "agent": "mine:build_flow"})
    assert summary["forked_from"]["transition"] == 1, summary
    assert summary["result"]["output"] == "All done again."
    assert len(llmock.requests) == asked + 2  # the step and the summary; the plan was not made again


def test_the_inspector_s_runs_folder_needs_its_agent(mine: Path):
    done = agentfsm("ui", ".", "--runs", "forks")
    assert done.returncode == 2
    assert "--runs holds the runs --agent starts from the page: give --agent too" in done.stderr


def test_debug_steps_the_person_s_agent_through_its_own_states(mine: Path, llmock: Any):
    llmock.call_tool("shout", {"text": "step"})
    llmock.call_tool("terminate", {"status": "success"})
    done = subprocess.run(
        [sys.executable, "-m", "agentfsm", "debug", "shout", "--agent", "mine:build", *model(llmock)],
        input="break NOTING\ncontinue\nstate\ncontinue\n",
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert done.returncode == 0, done.stderr
    assert "OBSERVING -> NOTING" in done.stdout and "breakpoint set: NOTING" in done.stdout
