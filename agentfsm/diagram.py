"""Render a `MachineTable` as Mermaid, DOT, SVG or PNG, or as a Markdown table.

Every form is drawn from the same table the engine runs, so none can drift
from the code. Mermaid and DOT need no dependency (Mermaid renders on
GitHub); SVG and PNG use pygraphviz, an optional extra, imported on use.
"""

from __future__ import annotations

from .machine import Edge, MachineTable

__all__ = ["FORMATS", "render", "to_dot", "to_markdown", "to_mermaid"]

FORMATS = ("mermaid", "dot", "svg", "png")


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
    for edge, label in _labelled(table):
        lines.append(f"    {edge.source} --> {edge.dest}: {label}")
    terminal = [s.name for s in table.states if s.name in ("FINISHED", "ERROR")]
    lines.extend(f"    {name} --> [*]" for name in terminal)
    if highlight is not None:
        _check_state(table, highlight)
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


def to_dot(table: MachineTable, *, highlight: str | None = None) -> str:
    """Graphviz DOT: each group a cluster around its members, each edge labelled trigger [guard]."""
    if highlight is not None:
        _check_state(table, highlight)
    lines = [
        "digraph agent {",
        "    rankdir=LR;",
        "    compound=true;",
        '    node [shape=box, style="rounded,filled", fillcolor=white, fontname=Helvetica];',
        "    edge [fontname=Helvetica, fontsize=10];",
        '    __start__ [shape=point, label=""];',
    ]
    grouped = {member for members in table.groups.values() for member in members}

    def node(name: str, indent: str) -> str:
        fill = ', fillcolor="#ffd54f", penwidth=3' if name == highlight else ""
        return f'{indent}"{name}" [label="{name}"{fill}];'

    clusters = {group: f"cluster_{index}" for index, group in enumerate(table.groups)}
    for index, (group, members) in enumerate(table.groups.items()):
        style = 'style="rounded,filled"; fillcolor="#fff3c4";' if group == highlight else "style=rounded;"
        lines.append(f'    subgraph cluster_{index} {{ label="{group}"; {style}')
        lines.extend(node(member, "        ") for member in members)
        lines.append("    }")
    lines.extend(node(state.name, "    ") for state in table.states if state.name not in grouped)
    lines.append(f'    __start__ -> "{table.initial}";')
    for edge, label in _labelled(table):
        if edge.source in clusters:  # one edge leaving the group's box, not one per member
            first = table.groups[edge.source][0]
            lines.append(f'    "{first}" -> "{edge.dest}" [label="{label}", ltail={clusters[edge.source]}];')
        else:
            lines.append(f'    "{edge.source}" -> "{edge.dest}" [label="{label}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(table: MachineTable, fmt: str, *, highlight: str | None = None) -> bytes:
    """The diagram in `fmt` (one of `FORMATS`) as bytes."""
    if fmt == "mermaid":
        return to_mermaid(table, highlight=highlight).encode()
    dot = to_dot(table, highlight=highlight)
    if fmt == "dot":
        return dot.encode()
    if fmt not in FORMATS:
        raise ValueError(f"unknown diagram format {fmt!r}; choose one of {', '.join(FORMATS)}")
    try:
        import pygraphviz
    except ImportError:
        raise ImportError(
            f"rendering {fmt.upper()} needs pygraphviz: pip install 'agentfsm[graphviz]' "
            "(or use --format mermaid / dot, which need nothing)"
        ) from None
    drawn: bytes = pygraphviz.AGraph(string=dot).draw(format=fmt, prog="dot")
    return drawn


def _labelled(table: MachineTable) -> list[tuple[Edge, str]]:
    """Each edge with its label: `trigger [guard]`, `[otherwise]` for a fallback, `/ stop_reason`."""
    guarded = {(e.source, e.trigger) for e in table.edges if e.guard is not None}
    labelled = []
    for edge in table.edges:
        label = edge.label
        if edge.guard is None and (edge.source, edge.trigger) in guarded:
            label += " [otherwise]"
        if edge.stop_reason is not None:
            label += f" / {edge.stop_reason.value}"
        labelled.append((edge, label))
    return labelled


def _check_state(table: MachineTable, name: str) -> None:
    if name not in table.by_name and name not in table.groups:
        raise ValueError(f"cannot highlight unknown state {name!r}; states: {sorted(table.by_name)}")
