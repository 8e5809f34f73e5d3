"""Render a `MachineTable` as Mermaid, DOT, SVG or PNG, or as a Markdown table.

Every form is drawn from the same table the engine runs, so none can drift
from the code. Mermaid and DOT need no dependency (Mermaid renders on
GitHub); SVG and PNG use pygraphviz, an optional extra, imported on use.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import MissingExtraError, ReplayError, WrongValueError
from .machine import Edge, MachineTable

__all__ = ["FORMATS", "EdgePath", "path_of", "render", "to_dot", "to_markdown", "to_mermaid"]

FORMATS = ("mermaid", "dot", "svg", "png")
"""What `render` draws: Mermaid and DOT as text, SVG and PNG through Graphviz (the `graphviz` extra)."""

EdgePath = Sequence[Edge]
"""The edges a run took, in order (`path_of` reads them from a trace's transitions)."""


def path_of(table: MachineTable, transitions: Iterable[dict[str, Any]]) -> list[Edge]:
    """The table's edges taken by a run, from its trace's ``transition`` records.

    The edge is told apart by the guards evaluated: the one whose guard held,
    or the unguarded fallback when none did.
    """
    path = []
    for t in transitions:
        held = [g["name"] for g in t.get("guards", ()) if g["held"]]
        for edge in table.edges:
            if (
                edge.trigger == t["trigger"]
                and edge.dest == t["dest"]
                and t["source"] in table.sources(edge)
                and (edge.guard.name in held if edge.guard else not held)
            ):
                path.append(edge)
                break
        else:
            raise ReplayError(
                f"the trace's edge {t['source']} -> {t['dest']} on {t['trigger']!r} is not in this "
                "machine; draw it with the agent that wrote the trace"
            )
    return path


def to_mermaid(table: MachineTable, *, highlight: str | None = None, path: EdgePath | None = None) -> str:
    """`stateDiagram-v2` with each group drawn as a composite state around its members.

    With `path`, each edge taken is labelled with how often, the states visited
    are shaded, and the run's last state is highlighted (unless `highlight` names another).
    """
    if path and highlight is None:
        highlight = path[-1].dest
    lines = ["stateDiagram-v2", f"    [*] --> {table.initial}"]
    grouped = {member for members in table.groups.values() for member in members}
    for group, members in table.groups.items():
        lines.append(f"    state {group} {{")
        lines.extend(f"        {member}" for member in members)
        lines.append("    }")
    for state in table.states:
        if state.name not in grouped and state.name != table.initial:
            lines.append(f"    {state.name}")
    taken = Counter(path or ())
    for edge, label in _labelled(table):
        lines.append(f"    {edge.source} --> {edge.dest}: {label}{_times(taken[edge])}")
    lines.extend(f"    {state.name} --> [*]" for state in table.finals)
    if path:
        visited = sorted({edge.dest for edge in path} - {highlight})
        lines.append("    classDef visited fill:#c8e6c9,stroke:#2e7d32")
        lines.extend(f"    class {name} visited" for name in visited)
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
            f"{'`' + edge.stop_reason + '`' if edge.stop_reason else ''} | "
            f"{'`' + edge.effect.name + '`' if edge.effect else ''} |"
        )
    return "\n".join(rows) + "\n"


def to_dot(table: MachineTable, *, highlight: str | None = None, path: EdgePath | None = None) -> str:
    """Graphviz DOT: each group a cluster around its members, each edge labelled trigger [guard].

    With `path`, the edges taken are drawn thick and labelled with how often, the
    others grey; visited states are shaded and the run's last state highlighted.
    """
    taken = Counter(path or ())
    visited = {edge.dest for edge in path or ()}
    if path and highlight is None:
        highlight = path[-1].dest
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
        if not fill and name in visited:
            fill = ', fillcolor="#c8e6c9"'
        return f'{indent}"{name}" [label="{name}"{fill}];'

    clusters = {group: f"cluster_{index}" for index, group in enumerate(table.groups)}
    for index, (group, members) in enumerate(table.groups.items()):
        style = 'style="rounded,filled"; fillcolor="#fff3c4";' if group == highlight else "style=rounded;"
        lines.append(f'    subgraph cluster_{index} {{ label="{group}"; {style}')
        lines.extend(node(member, "        ") for member in members)
        # Where the group's own edges start: an invisible point after its last member, so they
        # leave the group's border on the side the machine moves on to, not one member's box.
        lines.append(f'        "{_exit(group)}" [shape=point, style=invis, width=0, label=""];')
        lines.append(f'        "{members[-1]}" -> "{_exit(group)}" [style=invis];')
        lines.append("    }")
    lines.extend(node(state.name, "    ") for state in table.states if state.name not in grouped)
    lines.append(f'    __start__ -> "{table.initial}";')
    for edge, label in _labelled(table):
        style = ""
        if path:
            times = taken[edge]
            style = ', color="#e65100", penwidth=2.5' if times else ', color="#9e9e9e", fontcolor="#9e9e9e"'
            label += _times(times)
        if edge.trigger == table.reset:  # back to the start: drawn, but it does not rank the states,
            style += ", constraint=false"  # so the machine reads from its initial state onwards
        if edge.source in clusters:  # one edge leaving the group's box, not one per member
            source = _exit(edge.source)
            lines.append(
                f'    "{source}" -> "{edge.dest}" [label="{label}", ltail={clusters[edge.source]}{style}];'
            )
        else:
            lines.append(f'    "{edge.source}" -> "{edge.dest}" [label="{label}"{style}];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def _exit(group: str) -> str:
    """The invisible node a group's own edges start from (see `to_dot`)."""
    return f"__{group}_exit__"


def render(
    table: MachineTable, fmt: str, *, highlight: str | None = None, path: EdgePath | None = None
) -> bytes:
    """The diagram in `fmt` (one of `FORMATS`) as bytes; `path`: a run's edges drawn over it."""
    if fmt == "mermaid":
        return to_mermaid(table, highlight=highlight, path=path).encode()
    dot = to_dot(table, highlight=highlight, path=path)
    if fmt == "dot":
        return dot.encode()
    if fmt not in FORMATS:
        raise WrongValueError(f"unknown diagram format {fmt!r}; choose one of {', '.join(FORMATS)}")
    try:
        import pygraphviz
    except ImportError:
        raise MissingExtraError(
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
            label += f" / {edge.stop_reason}"
        labelled.append((edge, label))
    return labelled


def _times(count: int) -> str:
    return f" ({count}×)" if count else ""


def _check_state(table: MachineTable, name: str) -> None:
    if name not in table.by_name and name not in table.groups:
        raise WrongValueError(f"cannot highlight unknown state {name!r}; states: {sorted(table.by_name)}")
