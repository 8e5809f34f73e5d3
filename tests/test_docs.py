"""Generated diagrams and the README match the machine tables and the examples they come from; the docs' lists
match the code."""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

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


# -- the README: the front door, every example in it a script that runs ---------------------------------


EXAMPLES = ROOT / "docs" / "examples"


def _fenced(text: str, language: str) -> list[tuple[int, str]]:
    """Each block fenced as `language` in `text`, with where it starts."""
    opening = f"```{language}\n"
    found, at = [], text.find(opening)
    while at != -1:
        body = at + len(opening)
        found.append((at, text[body : text.index("```", body)]))
        at = text.find(opening, body)
    return found


def test_every_python_block_of_the_readme_is_an_example_script_with_the_output_it_prints() -> None:
    """A Python block of the README is the text of a `docs/examples/NAME.py` (which
    tests/test_docs_examples.py runs), and the `text` block after it is the `NAME.out` it must print: the
    front door shows nothing that is not run."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    scripts = {path.read_text(encoding="utf-8"): path for path in EXAMPLES.glob("*.py")}
    blocks = _fenced(text, "python")
    assert blocks, "the README shows no example"
    outputs = _fenced(text, "text")
    for at, block in blocks:
        assert block in scripts, (
            f"the README's example {block[:120]!r} is no docs/examples/NAME.py: make it one"
        )
        after = [output for start, output in outputs if start > at]
        assert after, f"the README shows no output after {scripts[block].name}"
        expected = scripts[block].with_suffix(".out").read_text(encoding="utf-8")
        assert after[0] == expected, f"the README's output of {scripts[block].name} is not its .out"


def test_the_readme_names_the_two_commands_of_a_fresh_clone() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for command in ("tools/demo", "tools/test"):
        assert f"./{command}" in text
        assert os.access(ROOT / command, os.X_OK), f"{command} is not an executable script"


def test_every_link_of_the_readme_reaches_a_file_of_the_repository() -> None:
    """The README links into the docs' pages as files (GitHub shows them): each must exist."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert len(targets) > 10, "the README links into the docs"
    missing = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert not missing, f"the README links to {missing}, which are not in the repository"


def test_the_docs_own_agent_module_runs_on_the_command_line_as_written(clean_env, llmock):
    import subprocess
    import sys

    (clean_env / "myagents.py").write_text((EXAMPLES / "myagents.py").read_text(encoding="utf-8"))
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


def test_the_repository_layout_names_every_module_in_its_folder() -> None:
    """The docs' "Repository layout" page names each package of agentfsm and each module in the lines
    of its folder (a module added, moved or deleted shows here first), and each tool script."""
    section = (ROOT / "docs" / "reference" / "layout.md").read_text(encoding="utf-8")
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
    assert not unnamed, f"docs/reference/layout.md does not name {unnamed} where they are"


def test_the_docs_list_every_event_type_of_the_event_stream() -> None:
    """The table of events on the page of a run is `AgentEvent`'s members, no more, no fewer."""
    import re
    import typing

    from agentfsm.run.events import AgentEvent

    text = (ROOT / "docs" / "concepts" / "run.md").read_text(encoding="utf-8")
    table = text[text.index("| event | when |") :].split("\n\n", 1)[0]
    listed = re.findall(r"^\| `(\w+)` \|", table, flags=re.MULTILINE)
    assert sorted(listed) == sorted(cls.__name__ for cls in typing.get_args(AgentEvent))


def test_the_reliability_page_cites_only_tests_that_exist() -> None:
    """docs/reliability.md names the tests that prove each promise: a test renamed, moved or deleted
    shows here, so the page never cites a proof that is gone."""
    text = (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8")
    files = set(re.findall(r"tests/[\w/]+\.py", text))
    assert files, "the reliability page cites no test file"
    missing = sorted(name for name in files if not (ROOT / name).is_file())
    assert not missing, f"docs/reliability.md cites {missing}, which do not exist"
    defined = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        defined.update(re.findall(r"^(?:async )?def (test_\w+)\(", path.read_text(encoding="utf-8"), re.M))
    cited = set(re.findall(r"`(?:tests/[\w/]+\.py::)?(test_\w+)`", text))
    assert cited, "the reliability page names no test"
    assert not cited - defined, (
        f"docs/reliability.md names {sorted(cited - defined)}, which no test file defines"
    )
