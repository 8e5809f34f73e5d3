"""The documentation site builds, strict (a broken link, snippet or API reference fails), with every page."""

from __future__ import annotations

import os
import re
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


def _config_hook() -> object:
    """`docs/hooks/config_reference.py`, imported from its file (the hooks are not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "docs/hooks/config_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _settings_keys(model: type, path: tuple[str, ...]) -> list[tuple[str, str]]:
    """Every key of the settings under `model` as (its section's title, its name), walked on its own
    here, so the page is checked against the models rather than against the hook's own walk."""
    import typing

    from pydantic import BaseModel

    found: list[tuple[str, str]] = []
    for name, info in model.model_fields.items():  # type: ignore[attr-defined]
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += _settings_keys(annotation, (*path, name))
        elif typing.get_origin(annotation) is dict and issubclass(typing.get_args(annotation)[1], BaseModel):
            table = (*path, "<agent name>") if name == "per_agent" else (*path, name, "<id>")
            found += _settings_keys(typing.get_args(annotation)[1], table)
        else:
            found.append((f"[{'.'.join(path)}]", name))
    return found


def test_the_configuration_reference_names_and_describes_every_settings_key() -> None:
    from agentfsm.cli.config import Settings

    page = _config_hook().render()  # type: ignore[attr-defined]
    chunks = {chunk.split("`", 1)[0]: chunk for chunk in page.split("\n## `")[1:]}
    keys = _settings_keys(Settings, ())
    assert len(keys) > 50 and ("[search.brave]", "api_key") in keys
    for section, name in keys:
        assert section in chunks, f"the configuration reference has no section {section}"
        line = next((ln for ln in chunks[section].splitlines() if ln.startswith(f"- **`{name}`**")), None)
        assert line is not None, f"the configuration reference does not list {section} {name}"
        described = chunks[section].split(line, 1)[1].split("\n", 2)[1].strip()
        assert described, f"{section} {name} has no description on the configuration reference"


def test_a_settings_key_without_a_description_fails_the_build() -> None:
    from pydantic import BaseModel

    hook = _config_hook()

    class Undocumented(BaseModel):
        size: int = 3

    with pytest.raises(hook.MissingDescriptionError, match=r"\[x\] size .* no description"):  # type: ignore[attr-defined]
        list(hook._walk(Undocumented, ("x",)))  # type: ignore[attr-defined]


def _toml_blocks() -> list[tuple[str, str]]:
    blocks = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for n, block in enumerate(re.findall(r"^```toml\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)):
            blocks.append((f"{page.relative_to(ROOT)}#{n}", block))
    return blocks


@pytest.mark.parametrize(("where", "block"), _toml_blocks(), ids=[w for w, _ in _toml_blocks()])
def test_every_configuration_a_page_shows_loads_as_written(
    where: str, block: str, tmp_path, monkeypatch
) -> None:
    """A page's TOML is a file a reader copies: every key must be one the settings take."""
    from agentfsm.cli.config import Settings

    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith("AGENTFSM_"):
            monkeypatch.delenv(name)
    config = tmp_path / "agentfsm.toml"
    config.write_text(block, encoding="utf-8")
    Settings.load(config)  # a ConfigError names the key that is wrong
