"""Every public name has a docstring: what the API reference shows is what the code says.

The public modules are `agentfsm` and those the reference pages document (`::: module` in
`docs/reference/*.md`); their public names are each one's `__all__`. Names are read as the
reference reads them (griffe, statically, re-exports followed to where they are defined), so a
constant's docstring is the string under its assignment.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

griffe = pytest.importorskip("griffe", reason="the docs extra (in the dev lock) reads the docstrings")


def _public_modules() -> list[str]:
    pages = "\n".join(
        p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs" / "reference").glob("*.md"))
    )
    return sorted({"agentfsm", *re.findall(r"^::: (agentfsm[\w.]*)$", pages, flags=re.MULTILINE)})


def test_the_reference_documents_the_package_and_its_public_modules() -> None:
    modules = _public_modules()
    assert {"agentfsm", "agentfsm.testing", "agentfsm.errors"} <= set(modules)
    package = griffe.load("agentfsm", search_paths=[str(ROOT)], resolve_aliases=True)
    for name in modules:
        module = package if name == "agentfsm" else package[name.removeprefix("agentfsm.")]
        assert module.exports, f"{name} has no `__all__`: the reference shows what it lists"


def test_every_public_name_has_a_docstring() -> None:
    package = griffe.load("agentfsm", search_paths=[str(ROOT)], resolve_aliases=True)
    missing = []
    for name in _public_modules():
        module = package if name == "agentfsm" else package[name.removeprefix("agentfsm.")]
        for member in module.exports or ():
            target = module[member]
            target = target.final_target if target.is_alias else target
            if not target.docstring or not target.docstring.value.strip():
                missing.append(f"{name}.{member} ({target.path})")
    assert not missing, f"public names without a docstring (say what each is for): {missing}"
