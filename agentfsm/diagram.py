"""Render a `MachineTable` as a Mermaid state diagram or a Markdown table.

Both are drawn from the same table the engine runs, so they cannot drift
from the code. Mermaid needs no dependency and renders on GitHub.
"""

from __future__ import annotations

from .machine import MachineTable

__all__ = ["to_markdown", "to_mermaid"]


def to_mermaid(table: MachineTable, *, highlight: str | None = None) -> str:
    """`stateDiagram-v2` with each group drawn as a composite state around its members."""
    lines = ["stateDiagram-v2", f"    [*] --> {table.initial}"]
    grouped = {member for members in table.groups.values() for member in members}
    for group, members in table.groups.items():
        lines.append(f"    state {group} {{")
        lines.extend(f"        {member}" for member in members)
        lines.append("    }")
    for state in table.states:
        if state.name not in grouped and state.name != table.initial:
            lines.append(f"    {state.name}")
    guarded = {(e.source, e.trigger) for e in table.edges if e.guard is not None}
    for edge in table.edges:
        label = edge.label
        if edge.guard is None and (edge.source, edge.trigger) in guarded:
            label += " [otherwise]"
        if edge.stop_reason is not None:
            label += f" / {edge.stop_reason.value}"
        lines.append(f"    {edge.source} --> {edge.dest}: {label}")
    terminal = [s.name for s in table.states if s.name in ("FINISHED", "ERROR")]
    lines.extend(f"    {name} --> [*]" for name in terminal)
    if highlight is not None:
        if highlight not in table.by_name and highlight not in table.groups:
            raise ValueError(f"cannot highlight unknown state {highlight!r}; states: {sorted(table.by_name)}")
        lines.append("    classDef current fill:#ffd54f,stroke:#e65100,stroke-width:3px")
        lines.append(f"    class {highlight} current")
    return "\n".join(lines) + "\n"


def to_markdown(table: MachineTable) -> str:
    """The table as SPEC writes it: from, to, trigger, guard, stop_reason, effect."""
    rows = [
        "| from | to | trigger | guard (first that holds wins) | stop_reason | effect |",
        "|---|---|---|---|---|---|",
    ]
    for edge in table.edges:
        guard = f"`{edge.guard.name}`: {edge.guard.doc}" if edge.guard else "otherwise"
        rows.append(
            f"| {edge.source} | {edge.dest} | `{edge.trigger}` | {guard} | "
            f"{'`' + edge.stop_reason.value + '`' if edge.stop_reason else ''} | "
            f"{'`' + edge.effect.name + '`' if edge.effect else ''} |"
        )
    return "\n".join(rows) + "\n"
