"""Draw a described table (`MachineTable.describe()`) as SVG, with no dependency.

Why its own layout: the inspector draws the machine a trace recorded (an extended
agent's, a flow's) in a page that must work offline from a wheel, and marks on
it the state a run is in and the edges it took. Graphviz is an optional extra,
and a diagram library in the page would have to be shipped and kept; a machine
of a dozen states lays out well enough by rule. Each element carries its name
(``data-state``, ``data-edges``, ``data-edge``) so a page colours the drawing
without redrawing it.

The rule: states go in columns by the longest path from the initial state
(edges back to an earlier column, and the `reset` edges, do not rank), and in
declaration order within a column; a group is a box around its members, and its
own edges leave from the box. Edges between the same two ends are drawn once,
with one label line per table row (``trigger [guard] / stop_reason``). An edge to
the next column is a line, a longer one arcs above the states it passes, one
going back arcs below them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from typing import Any

__all__ = ["edge_labels", "to_svg"]

COLUMN = 250
"""Horizontal distance between columns (a state's box and the gap its labels sit in)."""
ROW = 96
WIDTH, HEIGHT = 132, 40
PAD = 16
"""Space between a group's box and its members."""
LINE = 13
"""Height of one label line."""


@dataclass
class _Drawn:
    """One drawn edge: the table rows it stands for, from `source` (a state or a group) to `dest`."""

    source: str
    dest: str
    rows: list[int] = field(default_factory=list)


def edge_labels(described: dict[str, Any]) -> list[str]:
    """Each edge's label, in table order: ``trigger [guard]``, ``[otherwise]`` for a fallback after
    guarded edges of the same trigger and source, then ``/ stop_reason``."""
    edges = described["edges"]
    guarded = {(e["source"], e["trigger"]) for e in edges if e["guard"]}
    labels = []
    for e in edges:
        label = e["trigger"]
        if e["guard"]:
            label += f" [{e['guard']}]"
        elif (e["source"], e["trigger"]) in guarded:
            label += " [otherwise]"
        if e["stop_reason"]:
            label += f" / {e['stop_reason']}"
        labels.append(label)
    return labels


def to_svg(described: dict[str, Any]) -> str:
    """The table as an SVG document (see the module's docstring for the layout)."""
    states = [s["name"] for s in described["states"]]
    roles = {s["name"]: s["role"] for s in described["states"]}
    groups: dict[str, list[str]] = {}
    for s in described["states"]:
        if s["group"]:
            groups.setdefault(s["group"], []).append(s["name"])
    rank = _ranks(described, states, groups)
    columns: dict[int, list[str]] = {}
    for name in states:
        columns.setdefault(rank[name], []).append(name)
    at: dict[str, tuple[float, float]] = {
        name: (PAD * 3 + r * COLUMN, PAD * 3 + i * ROW)
        for r, names in columns.items()
        for i, name in enumerate(names)
    }
    boxes: dict[str, tuple[float, float, float, float]] = {
        group: (
            min(at[m][0] for m in members) - PAD,
            min(at[m][1] for m in members) - PAD - LINE,
            max(at[m][0] for m in members) + WIDTH + PAD,
            max(at[m][1] for m in members) + HEIGHT + PAD,
        )
        for group, members in groups.items()
    }
    drawn: dict[tuple[str, str], _Drawn] = {}
    for index, e in enumerate(described["edges"]):
        drawn.setdefault((e["source"], e["dest"]), _Drawn(e["source"], e["dest"])).rows.append(index)

    labels = edge_labels(described)
    parts: list[str] = []
    top, bottom = 0.0, 0.0 + max(y for _, y in at.values()) + HEIGHT + PAD * 3
    above: list[tuple[float, float]] = []
    below: list[tuple[float, float]] = []
    for edge in sorted(drawn.values(), key=lambda d: _span(d, rank, groups)):
        path, (lx, ly), lowest = _route(edge, rank, groups, at, boxes, above, below)
        top, bottom = min(top, ly - LINE * len(edge.rows)), max(bottom, ly + 4, lowest)
        rows = " ".join(map(str, edge.rows))
        parts.append(f'<path class="edge" data-edges="{rows}" d="{path}" marker-end="url(#arrow)"/>')
        for n, row in enumerate(edge.rows):
            y = ly - LINE * (len(edge.rows) - 1 - n) - 4
            parts.append(
                f'<text class="edge-label" data-edge="{row}" x="{lx:.0f}" y="{y:.0f}" text-anchor="middle">'
                f'{escape(labels[row])}<tspan class="count"></tspan></text>'
            )
    shapes: list[str] = []
    for group, (x0, y0, x1, y1) in boxes.items():
        shapes.append(
            f'<g class="group" data-state="{escape(group)}"><rect x="{x0}" y="{y0}" width="{x1 - x0}" '
            f'height="{y1 - y0}" rx="10"/><text x="{x0 + 8}" y="{y0 + LINE}">{escape(group)}</text></g>'
        )
    for name, (x, y) in at.items():
        shapes.append(
            f'<g class="state {roles[name]}" data-state="{escape(name)}"><rect x="{x}" y="{y}" '
            f'width="{WIDTH}" height="{HEIGHT}" rx="8"/><text x="{x + WIDTH / 2:.0f}" '
            f'y="{y + HEIGHT / 2 + 4:.0f}" text-anchor="middle">{escape(name)}</text></g>'
        )
    ix, iy = at[described["initial"]]
    middle = iy + HEIGHT / 2
    start = f'<path class="edge start" d="M {ix - 30} {middle} L {ix} {middle}" marker-end="url(#arrow)"/>'
    width = PAD * 6 + max(rank.values()) * COLUMN + WIDTH
    y0 = top - PAD
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="machine" viewBox="0 {y0:.0f} {width} '
        f'{bottom - y0:.0f}" width="{width}" height="{bottom - y0:.0f}">'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z"/></marker></defs>'
        + "".join(shapes)
        + start
        + "".join(parts)
        + "</svg>"
    )


def _ranks(described: dict[str, Any], states: list[str], groups: dict[str, list[str]]) -> dict[str, int]:
    """Each state's column: its longest distance from the initial state over the edges that go
    forward (not `reset`, not back to a state on the way to it)."""
    out: dict[str, list[str]] = {name: [] for name in states}
    for e in described["edges"]:
        if e["trigger"] == described["reset"]:
            continue
        for source in groups.get(e["source"], [e["source"]]):
            if e["dest"] not in out[source]:
                out[source].append(e["dest"])
    forward: dict[str, list[str]] = {name: [] for name in states}
    seen: set[str] = set()
    on_way: set[str] = set()

    def visit(name: str) -> None:  # a depth-first walk: an edge to a state on the way is a back edge
        seen.add(name)
        on_way.add(name)
        for dest in out[name]:
            if dest in on_way:
                continue
            forward[name].append(dest)
            if dest not in seen:
                visit(dest)
        on_way.discard(name)

    visit(described["initial"])
    rank = dict.fromkeys(states, 0)
    order: list[str] = []
    done: set[str] = set()

    def finish(name: str) -> None:
        done.add(name)
        for dest in forward[name]:
            if dest not in done:
                finish(dest)
        order.append(name)

    for name in states:
        if name not in done:
            finish(name)
    for name in reversed(order):  # a topological order of the forward edges
        for dest in forward[name]:
            rank[dest] = max(rank[dest], rank[name] + 1)
    return rank


def _span(edge: _Drawn, rank: dict[str, int], groups: dict[str, list[str]]) -> int:
    sources = groups.get(edge.source, [edge.source])
    return abs(rank[edge.dest] - max(rank[s] for s in sources))


def _route(
    edge: _Drawn,
    rank: dict[str, int],
    groups: dict[str, list[str]],
    at: dict[str, tuple[float, float]],
    boxes: dict[str, tuple[float, float, float, float]],
    above: list[tuple[float, float]],
    below: list[tuple[float, float]],
) -> tuple[str, tuple[float, float], float]:
    """The edge's SVG path, where its labels end (their last line's baseline), and the lowest
    point it reaches (0 for one that stays among the states). `above` and `below` hold the x
    ranges of the arcs drawn so far on each side: an arc over a range another covers is drawn
    higher (or lower), so none coincide."""
    dx, dy = at[edge.dest]
    if edge.source in boxes:  # a group's own edge leaves its box's right side, low, below the others
        sx, sy = boxes[edge.source][2], boxes[edge.source][3] - PAD
        ex, ey = dx, dy + HEIGHT / 2
        bend = (ex - sx) / 2
        return (
            f"M {sx} {sy:.0f} C {sx + bend:.0f} {sy:.0f}, {ex - bend:.0f} {ey:.0f}, {ex} {ey:.0f}",
            (ex - WIDTH / 2, ey + HEIGHT / 2 + LINE * len(edge.rows)),
            0,
        )
    sx, sy = at[edge.source]
    if edge.source == edge.dest:  # a loop over the state's box
        x, y = sx + WIDTH / 2, sy
        return f"M {x - 20} {y} C {x - 40} {y - 50}, {x + 40} {y - 50}, {x + 20} {y}", (x, y - 42), 0
    forward, span = rank[edge.dest] > rank[edge.source], abs(rank[edge.dest] - rank[edge.source])
    if forward and span == 1:
        ax, ay, ex, ey = sx + WIDTH, sy + HEIGHT / 2, dx, dy + HEIGHT / 2
        bend = (ex - ax) / 2
        path = f"M {ax} {ay:.0f} C {ax + bend:.0f} {ay:.0f}, {ex - bend:.0f} {ey:.0f}, {ex} {ey:.0f}"
        return path, ((ax + ex) / 2, min(ay, ey) - 2 if sy == dy else (ay + ey) / 2), 0
    left, right = sorted((sx + WIDTH / 2, dx + WIDTH / 2))
    over = forward and dy <= sy  # forward arcs go over the states between; back ones, and ones
    side = above if over else below  # to a lower row, under them
    level = sum(1 for a, b in side if a < right and left < b)
    side.append((left, right))
    lift = 34 + 14 * span + 26 * level
    ax, ex = sx + WIDTH / 2, dx + WIDTH / 2
    if over:  # from the top of one box to the top of the other
        ay, ey, peak = sy, dy, min(sy, dy) - lift
    else:
        ay, ey, peak = sy + HEIGHT, dy + HEIGHT, max(sy, dy) + HEIGHT + lift
    control = (peak - (ay + ey) / 8) * 4 / 3  # a cubic's middle is 1/8 of each end and 3/8 of each control
    path = f"M {ax} {ay} C {ax} {control:.0f}, {ex} {control:.0f}, {ex} {ey}"
    label_y = peak - 4 if over else peak + LINE * len(edge.rows) + 2
    return path, ((ax + ex) / 2, label_y), 0 if over else peak
