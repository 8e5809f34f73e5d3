"""Generated diagrams and README blocks match the machine tables they are drawn from."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from agentfsm.diagram import to_mermaid
from agentfsm.table import AGENT_TABLE

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
