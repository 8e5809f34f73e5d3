"""Regenerate diagrams/ and the README's generated diagram from the machine tables.

.venv/bin/python tools/render_diagrams.py          # write
.venv/bin/python tools/render_diagrams.py --check  # exit 1 if anything is stale
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from pathlib import Path

from agentfsm import BaseAgent, ToolCallAgent
from agentfsm.agent.approval import with_approval
from agentfsm.agent.browser import BrowserAgent
from agentfsm.agent.manus import Manus
from agentfsm.agent.table import AGENT_TABLE
from agentfsm.flow.review import with_review
from agentfsm.flow.table import FLOW_TABLE
from agentfsm.fsm.diagram import render, to_mermaid

ROOT = Path(__file__).resolve().parent.parent


AGENTS: dict[str, type[BaseAgent]] = {"toolcall": ToolCallAgent, "manus": Manus, "browser": BrowserAgent}
"""Every built-in agent, by the name `agentfsm diagram --agent` takes."""


def expected() -> dict[Path, str]:
    """Every generated file and its content: Mermaid and SVG for each built-in agent, for
    each with tools that need approval (`agentfsm diagram --agent NAME --approvals`), and for
    the planning flow, with and without plan review (`agentfsm diagram --agent planning [--review]`)."""
    files = {}
    for name, agent in AGENTS.items():
        for suffix, table in (("", agent.table), ("-approval", with_approval(agent.table))):
            files[ROOT / "diagrams" / f"{name}{suffix}.mmd"] = to_mermaid(table)
            files[ROOT / "diagrams" / f"{name}{suffix}.svg"] = render(table, "svg").decode()
    for suffix, table in (("", FLOW_TABLE), ("-review", with_review(FLOW_TABLE))):
        files[ROOT / "diagrams" / f"planning{suffix}.mmd"] = to_mermaid(table)
        files[ROOT / "diagrams" / f"planning{suffix}.svg"] = render(table, "svg").decode()
    return files


def readme_blocks() -> dict[str, str]:
    """The README's generated blocks, by marker name: the agent's diagram. (The docs' pages get
    their diagrams and tables from the site's hook, docs/hooks/machine_table.py, at each build.)"""
    return {"mermaid": "```mermaid\n" + to_mermaid(AGENT_TABLE) + "```\n"}


def _between(match: re.Match[str], block: str) -> str:
    return match.group(1) + block + match.group(2)


def render_readme(text: str) -> str:
    for name, block in readme_blocks().items():
        pattern = re.compile(rf"(<!-- generated:{name} -->\n).*?(<!-- /generated:{name} -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(
                f"README.md lacks the markers <!-- generated:{name} --> ... <!-- /generated:{name} -->"
            )
        text = pattern.sub(functools.partial(_between, block=block), text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report stale files instead of writing")
    args = parser.parse_args(argv)
    files = expected()
    readme = ROOT / "README.md"
    files[readme] = render_readme(readme.read_text())
    stale = [path for path, content in files.items() if not path.exists() or path.read_text() != content]
    if args.check:
        for path in stale:
            print(f"stale: {path.relative_to(ROOT)} (run: .venv/bin/python tools/render_diagrams.py)")
        return 1 if stale else 0
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[path])
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
