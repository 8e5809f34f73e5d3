"""A page's state as the model reads it: where it is, its tabs, its elements by ref, what lies off screen.

The elements come from Playwright's AI-mode accessibility snapshot, whose lines
carry refs (``textbox "Name" [ref=e5]``) that the browser tool's actions take.
The same element keeps its ref from one snapshot to the next, so a state can
mark the lines whose refs are new since the previous one: that is where a
click or a key press changed the page. The snapshot is capped at a number of
characters, cut at a line, with a marker that says how many lines were left
out and how to read them (`find`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["PageState", "Tab", "find_lines", "refs_in"]

_REF = re.compile(r"\[ref=((?:f\d+)?e\d+)\]")

NEW_MARK = "*"
"""What replaces a line's leading ``-`` when its ref is new since the previous state."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Tab:
    """One tab of the browser: its number (what `switch_tab` and `close_tab` take), address and title."""

    tab_id: int
    url: str
    title: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PageState:
    """The current tab's page, read at one moment."""

    url: str
    title: str
    tabs: tuple[Tab, ...]
    current_tab: int
    snapshot: str
    """The AI-mode snapshot, whole (`render` caps it)."""
    pixels_above: int
    """How far the page is scrolled down."""
    pixels_below: int
    """How much of the page lies below the viewport."""
    screenshot: str | None = None
    """The viewport as a base64 JPEG."""
    blocked: tuple[str, ...] = ()
    """Requests refused since the previous state (their hosts are outside the allowlist)."""
    refs: frozenset[str] = field(default_factory=frozenset)
    """The refs of this snapshot."""
    cut: str | None = None
    """Why the page's document is shorter than the server's (it was over `max_page_bytes`)."""

    def render(self, *, previous_refs: frozenset[str], max_chars: int) -> str:
        """The state as text: the page, the tabs, the elements (new ones marked), what lies off screen."""
        lines = [f"Current URL: {self.url}", f"Title: {self.title or '(none)'}"]
        if len(self.tabs) > 1:
            lines.append("Tabs:")
            lines += [
                f"  [{t.tab_id}]{' (current)' if t.tab_id == self.current_tab else ''} {t.title} - {t.url}"
                for t in self.tabs
            ]
        if self.cut:
            lines.append(self.cut)
        if self.blocked:
            shown = ", ".join(self.blocked[:5])
            more = f" and {len(self.blocked) - 5} more" if len(self.blocked) > 5 else ""
            lines.append(f"Refused (host outside [browser] allowed_hosts): {shown}{more}")
        lines.append(
            f"[{self.pixels_above} pixels above - scroll up to see more]"
            if self.pixels_above
            else "[Start of page]"
        )
        marked = previous_refs & self.refs and self.refs - previous_refs  # same document, new elements
        lines.append(
            "Interactive elements (address them by ref"
            + (f"; lines starting with {NEW_MARK} are new since the last state" if marked else "")
            + "):"
        )
        lines.append(_capped(_marked(self.snapshot, previous_refs) if marked else self.snapshot, max_chars))
        lines.append(
            f"[{self.pixels_below} pixels below - scroll down to see more]"
            if self.pixels_below
            else "[End of page]"
        )
        return "\n".join(lines)


def refs_in(snapshot: str) -> frozenset[str]:
    """Every ref of a snapshot."""
    return frozenset(_REF.findall(snapshot))


def find_lines(snapshot: str, text: str) -> list[str]:
    """The snapshot's lines that contain `text` (case-insensitive), stripped of their indentation."""
    needle = text.lower()
    return [line.strip() for line in snapshot.splitlines() if needle in line.lower()]


def _marked(snapshot: str, previous_refs: frozenset[str]) -> str:
    out = []
    for line in snapshot.splitlines():
        match = _REF.search(line)
        if match is not None and match.group(1) not in previous_refs:
            stripped = line.lstrip(" ")
            if stripped.startswith("- "):
                line = f"{line[: len(line) - len(stripped)]}{NEW_MARK} {stripped[2:]}"
        out.append(line)
    return "\n".join(out)


def _capped(snapshot: str, max_chars: int) -> str:
    """The first lines of `snapshot` that fit in `max_chars`, and a marker counting the rest."""
    if len(snapshot) <= max_chars:
        return snapshot
    lines = snapshot.splitlines()
    kept, size = [], 0
    for line in lines:
        if size + len(line) + 1 > max_chars:
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join(kept) + (
        f"\n... [snapshot cut at {max_chars} characters: {len(lines) - len(kept)} of {len(lines)} lines "
        "not shown; use the `find` action with a text to read the lines that contain it]"
    )
