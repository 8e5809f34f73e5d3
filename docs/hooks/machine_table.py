"""The machines on the pages, generated at each build from the tables the engine runs.

A page that holds the line `<!-- generated:agent-table -->` gets the edges of
`AGENT_TABLE` as a Markdown table there, and `<!-- generated:agent-mermaid -->`
its Mermaid diagram; `<!-- generated:flow-table -->` and `<!-- generated:flow-mermaid -->`
do the same for the planning flow's `FLOW_TABLE`. So none can drift from the engine.
"""

from __future__ import annotations

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

from agentfsm.agent.table import AGENT_TABLE
from agentfsm.flow.table import FLOW_TABLE
from agentfsm.fsm.diagram import to_markdown, to_mermaid

TABLES = {"agent": AGENT_TABLE, "flow": FLOW_TABLE}
"""Each machine a page can ask for, by the name in its markers."""


def on_page_markdown(markdown: str, *, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Put the generated tables and diagrams where a page asks for them."""
    for name, table in TABLES.items():
        markdown = markdown.replace(f"<!-- generated:{name}-table -->", to_markdown(table).rstrip())
        markdown = markdown.replace(
            f"<!-- generated:{name}-mermaid -->", f"```mermaid\n{to_mermaid(table).rstrip()}\n```"
        )
    return markdown
