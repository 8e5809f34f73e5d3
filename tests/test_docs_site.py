"""The documentation site builds, strict (a broken link, snippet or API reference fails), with every page."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("mkdocs", reason="the docs extra (in the dev lock) builds the site")
yaml = pytest.importorskip("yaml")


def _nav_pages(nav: object) -> list[str]:
    """Every page the nav of mkdocs.yml lists, in order."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    raise AssertionError(f"unexpected nav entry {nav!r}")


def test_the_site_builds_strict_with_every_page(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.Loader)
    pages = _nav_pages(config["nav"])
    assert "reference/cli.md" in pages and "index.md" in pages
    for page in pages:
        built = site / ("index.html" if page == "index.md" else page.removesuffix(".md") + "/index.html")
        assert built.is_file(), f"{page} was not built"
    assert "agentfsm run" in (site / "reference/cli/index.html").read_text(encoding="utf-8")
    assert 'id="agentfsm.ToolCallAgent"' in (site / "reference/api/index.html").read_text(encoding="utf-8")
    assert not (site / "examples").exists() and not (site / "hooks").exists()  # sources, not pages
