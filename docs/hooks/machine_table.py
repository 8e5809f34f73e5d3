"""The agent's machine on the pages, generated at each build from the table the engine runs.

A page that holds the line `<!-- generated:agent-table -->` gets the edges of
`AGENT_TABLE` as a Markdown table there, and `<!-- generated:agent-mermaid -->`
its Mermaid diagram, so neither can drift from the engine.
"""

from __future__ import annotations

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

from agentfsm.agent.table import AGENT_TABLE
from agentfsm.fsm.diagram import to_markdown, to_mermaid


def on_page_markdown(markdown: str, *, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Put the generated table and diagram where a page asks for them."""
    markdown = markdown.replace("<!-- generated:agent-table -->", to_markdown(AGENT_TABLE).rstrip())
    return markdown.replace(
        "<!-- generated:agent-mermaid -->", f"```mermaid\n{to_mermaid(AGENT_TABLE).rstrip()}\n```"
    )
