"""The package as a pip user gets it: a wheel built from the tree, installed with `[all]` in a fresh
virtual environment, with no clone beside it. The wheel is built offline (the build backend is in the
dev environment, `--no-build-isolation`); its dependencies come from the registry at the lock's pins,
as a user's `pip install` gets them. They are not installed `--offline`: uv does not promise to reuse
for an offline install what an online sync cached, so such a test passes or fails with the cache's
history. The offline promise that is real, that the demo needs no network, is checked where it holds:
the installed demo runs in a network namespace with no interface up."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentfsm

ROOT = Path(__file__).resolve().parent.parent


def uv() -> list[str]:
    found = shutil.which("uv")
    if found:
        return [found]
    for python in ("python3", sys.executable):
        if subprocess.run([python, "-m", "uv", "--version"], capture_output=True).returncode == 0:
            return [python, "-m", "uv"]
    pytest.fail("uv is missing: tools/dev-env installs it (pip install uv)")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [*uv(), "build", "--wheel", "--no-build-isolation", "--offline", "--python", sys.executable,
         "-o", str(out), str(ROOT)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (built,) = out.glob("agentfsm-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The fresh environment's bin folder, `agentfsm[all]` installed from the wheel alone."""
    venv = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([*uv(), "venv", "-q", "--python", sys.executable, str(venv)], check=True, timeout=120)
    proc = subprocess.run(
        [*uv(), "pip", "install", "-q", "--python", str(venv / "bin" / "python"),
         "-c", str(ROOT / "requirements" / "dev.lock"), f"agentfsm[all] @ {wheel.as_uri()}"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    yield venv / "bin"


def no_network() -> list[str]:
    """The command prefix that runs a program with no network at all (a new network namespace, whose
    only interface, loopback, is down), or [] where this user may not make one."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-n", "true"], capture_output=True).returncode != 0:
        return []
    return [unshare, "-n"]


def outside(
    bin_dir: Path, *args: str, tmp_path: Path, prefix: tuple[str, ...] = (), **env: str
) -> subprocess.CompletedProcess[str]:
    """Run the installed `agentfsm` in an empty folder, far from the clone."""
    return subprocess.run(
        [*prefix, str(bin_dir / "agentfsm"), *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env={**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}, **env},
    )


def test_the_wheel_holds_the_license_and_the_sandbox_builder(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "agentfsm/sandbox/build-image.sh" in names
    assert {f"agentfsm/ui/static/{name}" for name in ("index.html", "app.js", "style.css")} <= set(names)
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    assert not [name for name in names if "__pycache__" in name or name.startswith(("tests/", "docs/"))]


def test_all_holds_every_extra_of_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    (everything,) = extras["all"]
    held = set(everything.removeprefix("agentfsm[").removesuffix("]").split(","))
    # bench and docs are the repository's (its benchmarks, its site), not the package's
    assert held == set(extras) - {"all", "dev", "bench", "docs"}
    assert "graphviz" in held


def test_installed_with_all_it_renders_an_svg_and_runs_the_demo(installed: Path, tmp_path: Path) -> None:
    drawn = outside(installed, "diagram", "--format", "svg", "-o", "machine.svg", tmp_path=tmp_path)
    assert drawn.returncode == 0, drawn.stderr
    svg = (tmp_path / "machine.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "THINKING" in svg and "</svg>" in svg
    demo = outside(installed, "demo", tmp_path=tmp_path, DOCKER_HOST="unix:///nonexistent/docker.sock")
    assert demo.returncode == 0, demo.stderr
    assert demo.stderr.splitlines()[-1].startswith("FINISHED  stop_reason=terminated  steps=4")
    version = outside(installed, "--version", tmp_path=tmp_path)
    assert version.stdout.strip() == f"agentfsm {agentfsm.__version__}"
    named = outside(installed, "sandbox", "build", "--name", tmp_path=tmp_path)
    assert (named.returncode, named.stdout.strip()) == (0, "agentfsm-sandbox:bookworm")


def test_the_installed_inspector_serves_its_page_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    import urllib.request

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    process = subprocess.Popen(
        [str(installed / "agentfsm"), "ui", "."], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().split(" at ")[1].split(" ")[0]
        for path, marker in (("", "agentfsm inspector"), ("static/app.js", "function route()")):
            with urllib.request.urlopen(url + path, timeout=30) as answer:
                assert marker in answer.read().decode()
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
    assert process.returncode == 0


def test_the_installed_demo_needs_no_network(installed: Path, tmp_path: Path) -> None:
    prefix = no_network()
    if not prefix:
        pytest.skip("`unshare -n` is not permitted here (it needs root or user namespaces)")
    probe = "import socket; socket.create_connection(('127.0.0.1', 9), 2)"
    cut_off = subprocess.run([*prefix, sys.executable, "-c", probe], capture_output=True, text=True)
    assert cut_off.returncode != 0 and "unreachable" in cut_off.stderr  # not even loopback is up there
    demo = outside(
        installed,
        "demo",
        tmp_path=tmp_path,
        prefix=tuple(prefix),
        DOCKER_HOST="unix:///nonexistent/docker.sock",
    )
    assert demo.returncode == 0, demo.stderr
    assert "stop_reason=terminated" in demo.stdout + demo.stderr
