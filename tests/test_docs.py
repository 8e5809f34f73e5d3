"""Generated diagrams and README blocks match the machine tables they are drawn from."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

from agentfsm.agent.table import AGENT_TABLE
from agentfsm.fsm.diagram import to_mermaid

ROOT = Path(__file__).resolve().parent.parent


def load_renderer():
    spec = importlib.util.spec_from_file_location("render_diagrams", ROOT / "tools" / "render_diagrams.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_diagrams_and_readme_are_current():
    assert load_renderer().main(["--check"]) == 0, "run: .venv/bin/python tools/render_diagrams.py"


def test_mermaid_draws_every_edge_with_trigger_and_guard():
    text = to_mermaid(AGENT_TABLE)
    assert text.startswith("stateDiagram-v2\n")
    assert "state RUNNING {" in text
    for edge in AGENT_TABLE.edges:
        assert f"{edge.source} --> {edge.dest}: {edge.label}" in text
    assert "OBSERVING --> THINKING: observe_done [otherwise]" in text


def test_highlight_marks_one_state_and_rejects_unknown_ones():
    assert "class ACTING current" in to_mermaid(AGENT_TABLE, highlight="ACTING")
    with pytest.raises(ValueError, match="unknown state 'NAPPING'"):
        to_mermaid(AGENT_TABLE, highlight="NAPPING")


def test_dot_draws_the_group_as_a_cluster_and_every_edge():
    from agentfsm.fsm.diagram import to_dot

    text = to_dot(AGENT_TABLE, highlight="OBSERVING")
    assert 'subgraph cluster_0 { label="RUNNING";' in text
    assert '"OBSERVING" [label="OBSERVING", fillcolor="#ffd54f", penwidth=3];' in text
    # The group's edges leave its border: from an invisible point after its last member.
    assert '"__RUNNING_exit__" -> "ERROR" [label="fail / error", ltail=cluster_0];' in text
    assert '"OBSERVING" -> "__RUNNING_exit__" [style=invis];' in text
    assert '"OBSERVING" -> "FINISHED" [label="observe_done [terminated] / terminated"];' in text
    # Edges back to the start do not rank the states, so the machine reads from IDLE onwards.
    assert '"FINISHED" -> "IDLE" [label="reset", constraint=false];' in text
    assert text.count(" -> ") == len(AGENT_TABLE.edges) + 2  # plus the start arrow and the exit point


def test_diagram_command(tmp_path, capsysbinary):
    from agentfsm.cli.commands import main

    assert main(["diagram"]) == 0
    assert capsysbinary.readouterr().out.decode() == to_mermaid(AGENT_TABLE)
    assert main(["diagram", "--agent", "manus", "--format", "dot", "--highlight", "ACTING"]) == 0
    assert b'"ACTING" [label="ACTING", fillcolor=' in capsysbinary.readouterr().out
    svg, png = tmp_path / "agent.svg", tmp_path / "agent.png"
    assert main(["diagram", "--format", "svg", "-o", str(svg)]) == 0
    assert svg.read_text().lstrip().startswith("<?xml") and "observe_done [terminated]" in svg.read_text()
    assert main(["diagram", "--format", "png", "-o", str(png), "--highlight", "RUNNING"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["diagram", "--highlight", "NAPPING"]) == 2
    assert "cannot highlight unknown state 'NAPPING'" in capsysbinary.readouterr().err.decode()


async def test_a_traces_path_is_drawn_over_its_agents_machine(tmp_path, capsysbinary):
    from agentfsm import Terminate, ToolCallAgent, tool
    from agentfsm.cli.commands import main
    from agentfsm.testing import ScriptedLLM, reply

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    trace = tmp_path / "run.jsonl"
    steps = [reply(tool_calls=[("add", {"a": 1, "b": 2})])] * 2 + [
        reply(tool_calls=[("terminate", {"status": "success"})])
    ]
    agent = ToolCallAgent(llm=ScriptedLLM(steps), tools=[add, Terminate()], stuck_limit=None)
    await agent.run("add", trace=trace)

    assert main(["diagram", "--trace", str(trace)]) == 0
    text = capsysbinary.readouterr().out.decode()
    assert "THINKING --> ACTING: think_done [has_tool_calls] (3×)" in text
    assert "OBSERVING --> THINKING: observe_done [otherwise] (2×)" in text
    assert "OBSERVING --> FINISHED: observe_done [terminated] / terminated (1×)" in text
    assert "OBSERVING --> FINISHED: observe_done [max_steps] / max_steps\n" in text  # not taken
    assert "class FINISHED current" in text and "class OBSERVING visited" in text
    assert "class ERROR" not in text

    assert main(["diagram", "--trace", str(trace), "--format", "dot"]) == 0
    dot = capsysbinary.readouterr().out.decode()
    assert '"ACTING" -> "OBSERVING" [label="act_done (3×)", color="#e65100", penwidth=2.5];' in dot
    assert (
        '"FINISHED" -> "IDLE" [label="reset", color="#9e9e9e", fontcolor="#9e9e9e", constraint=false];' in dot
    )

    bad = tmp_path / "bad.jsonl"
    header, records = trace.read_text().split("\n", 1)  # the header's table names the state too
    bad.write_text(header + "\n" + records.replace('"dest": "OBSERVING"', '"dest": "NAPPING"', 1))
    assert main(["diagram", "--trace", str(bad)]) == 2
    assert "is not in this machine" in capsysbinary.readouterr().err.decode()
    assert main(["diagram", "--trace", str(tmp_path / "missing.jsonl")]) == 2


def test_the_approval_machine_is_drawn_with_its_state(capsysbinary):
    from agentfsm.cli.commands import main

    assert main(["diagram", "--approvals"]) == 0
    text = capsysbinary.readouterr().out.decode()
    assert "THINKING --> AWAITING_APPROVAL: think_done [needs_approval]" in text
    assert "        AWAITING_APPROVAL\n" in text  # inside RUNNING


def _readme_block(containing: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
    (block,) = [b for b in blocks if containing in b]
    return block


async def test_the_readmes_extension_example_runs_as_described():
    namespace: dict[str, object] = {}
    exec(compile(_readme_block("class ReflectingAgent"), "README.md", "exec"), namespace)
    from agentfsm import AgentState, StopReason
    from agentfsm.testing import ScriptedLLM, reply

    agent_class = namespace["ReflectingAgent"]
    agent = agent_class(llm=ScriptedLLM([reply("[handoff] a person should take this")]))  # type: ignore[operator]
    result = await agent.run("help")
    assert (result.state, result.stop_reason) == (AgentState.FINISHED, "handed_off")
    assert "HANDED_OFF --> [*]" in to_mermaid(agent.table)
    agent.llm = ScriptedLLM([reply(tool_calls=[("terminate", {"status": "success"})])])
    assert (await agent.run("again")).stop_reason is StopReason.TERMINATED


# -- the README's Python examples, run as written ------------------------------------------------------
#
# An example runs as written, in a namespace holding what the README says the examples assume (`llm`,
# any model; `agent`, an agent built as above; here scripted ones) and what the examples before it
# imported (they build on each other: a reader who ran them has those names); its top-level `await`s
# run in the test's event loop. Each example is found by a line only it has, and every example is
# either run here or listed in NOT_RUN with the reason, so a new one cannot go untested by accident.

NOT_RUN = {
    'asyncio.run(agent.run("What\'s the weather in Paris?"))': "a script asking a provider (a key)",
    'result = agent.run_sync("What\'s the weather in Paris?")': "a script, and a model server on port 8000",
    'sandbox=SandboxSettings(mode="docker", memory="1g")': "Docker and a provider",
    'async for event in agent.run_stream("what is 2 + 3?"):': "a streaming model server on port 8000",
    "final_only=True)": "the streaming example's agent",
    'MCPServerSettings(command="mcp-server-time")': "the mcp-server-time command",
    "elicitation_callback=approve": "agentfsm mcp-serve on port 8000",
    'servers={"shop": "http://127.0.0.1:8000/mcp"}': "an MCP server that asks, on port 8000",
    'Manus(llm=llm, browser=BrowserSettings(allowed_hosts=["*.python.org"]))': "the web",
    'BrowserAgent(llm=LLM("openai/gpt-4o")': "the web and a provider",
}
"""Examples that need what the suite does not give them (their parts are tested elsewhere)."""

RUN = [
    'api_base="http://127.0.0.1:8000/v1", api_key="none")',
    "inspector = await serve(runs)",
    "vision=True, max_input_tokens=32768",
    "class City(BaseModel):",
    "@tool(deps_type=Shop)",
    'async for t in agent.iter("task"):',
    "class ReflectingAgent",
    "echo = FunctionLLM",
    "def on_retry(event):",
    "InMemorySpanExporter()",
    "@tool(needs_approval=True)",
    "stepper = Stepper(",
    "flow = PlanningFlow(",
    'agents={"mine": build_my_agent}',
    'agents={"helper": build_helper}',
    "def word_count(text: str) -> int:",
]
"""Examples the tests below run (by a line only each has)."""


def _readme_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]


def test_every_python_example_of_the_readme_is_run_or_says_why_not():
    markers = [*RUN, *NOT_RUN]
    for block in _readme_blocks():
        found = [m for m in markers if m in block]
        assert len(found) == 1, f"the README example {block[:200]!r} is matched by {found}: run it here"
    for marker in markers:
        assert any(marker in block for block in _readme_blocks()), f"no README example has {marker!r}"


async def _run_example(containing: str, **assumed: object) -> dict[str, object]:
    import ast

    blocks = _readme_blocks()
    (index,) = [i for i, block in enumerate(blocks) if containing in block]
    namespace: dict[str, object] = dict(assumed)
    for earlier in blocks[:index]:
        imports = [node for node in ast.parse(earlier).body if isinstance(node, ast.Import | ast.ImportFrom)]
        exec(compile(ast.Module(body=imports, type_ignores=[]), "README.md", "exec"), namespace)
    code = compile(blocks[index], "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    pending = eval(code, namespace)  # a coroutine when the example awaits
    if pending is not None:
        await pending
    return namespace


def _terminates(request):
    from agentfsm.testing import reply

    return reply("finished", tool_calls=[("terminate", {"status": "success"})])


async def test_the_readmes_native_adapter_example_builds_its_model():
    from agentfsm import OpenAICompatible

    llm = (await _run_example('api_base="http://127.0.0.1:8000/v1", api_key="none")'))["llm"]
    assert isinstance(llm, OpenAICompatible) and llm.api_base == "http://127.0.0.1:8000/v1"  # no request sent
    await llm.aclose()


async def test_the_readmes_declared_facts_example_runs_as_written():
    from agentfsm import OpenAICompatible

    llm = (await _run_example("vision=True, max_input_tokens=32768"))["llm"]
    assert isinstance(llm, OpenAICompatible)
    assert (llm.supports_vision, llm.input_limit) == (True, 32768)  # the map knows nothing of this model
    await llm.aclose()


async def test_the_readmes_structured_answer_example_runs_as_written():
    from agentfsm.testing import ScriptedLLM, reply

    city = {"name": "Paris", "country": "France", "population": 2100000}
    namespace = await _run_example(
        "class City(BaseModel):", llm=ScriptedLLM([reply(tool_calls=[("final_result", city)])])
    )
    result = namespace["result"]
    assert result.parsed == namespace["City"](**city)  # type: ignore[attr-defined,operator]
    assert json.loads(result.output) == city  # type: ignore[attr-defined]


async def test_the_readmes_dependencies_example_runs_as_written():
    from agentfsm.testing import ScriptedLLM, reply

    llm = ScriptedLLM(
        [
            reply(tool_calls=[("price", {"item": "tea"})]),
            reply(tool_calls=[("terminate", {"status": "success"})]),
        ]
    )
    namespace = await _run_example("@tool(deps_type=Shop)", llm=llm)
    assert namespace["result"].stop_reason == "terminated"  # type: ignore[attr-defined]
    assert llm.requests[1].messages[-1].content.endswith("3.50 EUR")
    assert "shop" not in json.dumps(llm.requests[0].tools)  # the model never sees the dependency


async def test_the_readmes_stepping_examples_run_as_written(capsys):
    from agentfsm import ToolCallAgent
    from agentfsm.testing import FunctionLLM

    await _run_example(
        'async for t in agent.iter("task"):', agent=ToolCallAgent(llm=FunctionLLM(_terminates))
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "IDLE -> THINKING [start] step 1 {}"
    assert lines[-1].startswith("OBSERVING -> FINISHED [observe_done] step 1 {") and len(lines) == 4

    await _run_example("stepper = Stepper(", agent=ToolCallAgent(llm=FunctionLLM(_terminates)))
    observations, result = capsys.readouterr().out.splitlines()[-2:]  # paused once in OBSERVING
    assert observations.endswith("The interaction has been completed with status: success']")
    assert result.startswith("RunResult(") and "stop_reason=<StopReason.TERMINATED: 'terminated'>" in result


async def test_the_readmes_retry_listener_example_runs_as_written(capsys):
    from agentfsm import ToolCallAgent
    from agentfsm.testing import FunctionLLM

    agent = ToolCallAgent(llm=FunctionLLM(_terminates))
    await _run_example("def on_retry(event):", agent=agent)
    assert (await agent.run("go")).stop_reason == "terminated"
    assert capsys.readouterr().out == ""  # nothing was retried


async def test_the_readmes_telemetry_example_runs_as_written(capsys):
    namespace = await _run_example("InMemorySpanExporter()")
    assert capsys.readouterr().out == "['chat', 'execute_tool terminate', 'invoke_agent toolcall']\n"
    assert namespace["tracing"] is not None


async def test_the_readmes_approval_example_runs_as_written(clean_env):
    from agentfsm.testing import ScriptedLLM, reply

    calls = [("delete", {"path": "/"}), ("delete", {"path": "/tmp/old"})]
    llm = ScriptedLLM([reply(tool_calls=calls), reply(tool_calls=[("terminate", {"status": "success"})])])
    namespace = await _run_example("@tool(needs_approval=True)", llm=llm)
    assert namespace["result"].stop_reason == "terminated"  # type: ignore[attr-defined]
    results = [m.content for m in llm.requests[1].messages if m.role == "tool"]
    assert results[0].endswith("it was not run. Reason: never the root")
    assert results[1] == "Cmd `delete` completed with no output"
    assert (clean_env / "run.checkpoint.jsonl").exists()


async def test_the_readmes_testing_example_runs_as_written():
    from agentfsm import StopReason

    namespace = await _run_example("echo = FunctionLLM")
    result = namespace["result"]
    assert result.stop_reason is StopReason.TERMINATED  # type: ignore[attr-defined]
    assert namespace["answer"].output == "you said hello"  # type: ignore[attr-defined]


def _planner_and_agents(request):
    """The planner plans two steps, each agent terminates, and the summary is a text."""
    from agentfsm.testing import reply

    if "planning" in request.tool_names:
        steps = ["[coder] write the CSV", "[coder] check it"]
        return reply(tool_calls=[("planning", {"command": "create", "title": "primes", "steps": steps})])
    if "terminate" in request.tool_names:
        return reply("done", tool_calls=[("terminate", {"status": "success"})])
    return reply("The CSV was written and checked.")


async def test_the_readmes_planning_example_runs_as_written(capsys):
    from agentfsm.testing import FunctionLLM

    namespace = await _run_example("flow = PlanningFlow(", llm=FunctionLLM(_planner_and_agents))
    result = namespace["result"]
    assert (result.stop_reason, result.summary) == ("completed", "The CSV was written and checked.")  # type: ignore[attr-defined]
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["1 coder completed done", "2 coder completed done"]


async def test_the_readmes_planning_example_handles_a_flow_that_failed_before_its_plan(capsys):
    from agentfsm.errors import LLMError
    from agentfsm.testing import ScriptedLLM

    namespace = await _run_example(
        "flow = PlanningFlow(", llm=ScriptedLLM([LLMError("the provider is down")])
    )
    result = namespace["result"]
    assert (result.plan, result.stop_reason) == (None, "error")  # type: ignore[attr-defined]
    assert capsys.readouterr().out == "error LLMError: the provider is down\n"


async def test_the_readmes_durable_example_runs_as_written(clean_env):
    from agentfsm import StopReason, ToolCallAgent
    from agentfsm.testing import FunctionLLM

    namespace = await _run_example('agents={"mine": build_my_agent}', llm=FunctionLLM(_terminates))
    result = namespace["result"]
    assert result.stop_reason is StopReason.TERMINATED  # type: ignore[attr-defined]
    built = namespace["build_my_agent"](namespace["AgentSpec"](agent="mine", options={"max_steps": 10}))  # type: ignore[operator]
    assert isinstance(built, ToolCallAgent) and (built.name, built.options.max_steps) == ("mine", 10)
    assert (clean_env / "runs.db").exists()


def test_the_readmes_own_agent_runs_on_the_command_line_as_written(clean_env, llmock):
    import subprocess
    import sys

    (clean_env / "myagents.py").write_text(_readme_block("def word_count(text: str) -> int:"))
    llmock.call_tool("word_count", {"text": "to be or not"})
    llmock.call_tool("terminate", {"status": "success"})
    model = ["--model", "openai/m", "--api-base", llmock.base_url("openai"), "--api-key", "k"]
    command = [sys.executable, "-m", "agentfsm", "run", "How many words in 'to be or not'?"]
    done = subprocess.run(
        [*command, "--agent", "myagents:build", *model, "--trace", "counted.jsonl", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    tools = [json.loads(line) for line in (clean_env / "counted.jsonl").read_text().splitlines()]
    assert next(r["observation"] for r in tools if r["kind"] == "tool").endswith("\n4")
    replay = [sys.executable, "-m", "agentfsm", "replay", "counted.jsonl"]
    replayed = subprocess.run(replay, capture_output=True, text=True, timeout=60)
    assert replayed.returncode == 0, replayed.stderr


async def test_the_readmes_run_manager_example_runs_as_written(clean_env, capsys):
    from agentfsm import StopReason
    from agentfsm.testing import FunctionLLM

    namespace = await _run_example('agents={"helper": build_helper}', llm=FunctionLLM(_terminates))
    result = namespace["result"]
    assert result.stop_reason is StopReason.TERMINATED  # type: ignore[attr-defined]
    assert capsys.readouterr().out in ("queued\n", "running\n")
    (folder,) = (clean_env / "runs").iterdir()
    assert (folder / "run.json").exists() and (folder / "checkpoint.jsonl").exists()


async def test_the_readmes_inspector_example_serves_an_apps_runs(clean_env, capsys):
    from agentfsm import ToolCallAgent
    from agentfsm.testing import FunctionLLM

    factories = {"helper": lambda spec: ToolCallAgent(llm=FunctionLLM(_terminates))}
    namespace = await _run_example("inspector = await serve(runs)", factories=factories)
    inspector: Any = namespace["inspector"]
    assert capsys.readouterr().out == f"{inspector.url}\n"
    assert inspector.url.startswith("http://127.0.0.1:") and inspector.token is None


def test_the_repository_layout_names_every_module_in_its_folder() -> None:
    """The README's "Repository layout" names each package of agentfsm and each module in the lines
    of its folder (a module added, moved or deleted shows here first), and each tool script."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Repository layout") :]
    block = section[section.index("```\n") + 4 : section.index("```\n", section.index("```\n") + 4)]
    folders: dict[str, str] = {}
    current = ""
    for line in block.splitlines():
        head = line[:17].strip()
        if head.endswith("/"):
            current = head
        elif head and not line.startswith(" " * 17):
            current = "agentfsm/" if line.startswith("  ") else head
        folders[current] = folders.get(current, "") + " " + line
    package = ROOT / "agentfsm"
    unnamed = []
    for path in sorted(package.rglob("*")):
        if (
            "__pycache__" in path.parts
            or path.name in ("__init__.py", "__main__.py", "py.typed")
            or path.is_dir()
        ):
            continue
        folder = "agentfsm/" if path.parent == package else f"{path.parent.name}/"
        if not re.search(rf"(?<![\w.]){re.escape(path.name)}\b", folders.get(folder, "")):
            unnamed.append(str(path.relative_to(ROOT)))
    for path in sorted((ROOT / "tools").iterdir()):
        if not re.search(rf"(?<![\w.-]){re.escape(path.name)}\b", folders.get("tools/", "")):
            unnamed.append(str(path.relative_to(ROOT)))
    assert not unnamed, f"the README's repository layout does not name {unnamed} where they are"


def test_the_readme_lists_every_event_type_of_the_event_stream() -> None:
    """The table of events under "Traces and replay" is `AgentEvent`'s members, no more, no fewer."""
    import re
    import typing

    from agentfsm.run.events import AgentEvent

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    table = text[text.index("| event | when |") :].split("\n\n", 1)[0]
    listed = re.findall(r"^\| `(\w+)` \|", table, flags=re.MULTILINE)
    assert sorted(listed) == sorted(cls.__name__ for cls in typing.get_args(AgentEvent))
