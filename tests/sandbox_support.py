"""Helpers for the sandbox tests: the test image, whether Docker can run, and what a run left behind."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from agentfsm.sandbox.local import TEMP_PREFIX
from agentfsm.sandbox.settings import SandboxSettings

ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = ROOT / "tools" / "build-sandbox-image"
REQUIRE_DOCKER = os.environ.get("AGENTFSM_REQUIRE_DOCKER") == "1"
"""Set by CI: a Docker test that would skip fails instead."""


@functools.cache
def sandbox_image() -> str:
    """The image built by tools/build-sandbox-image (the script names it; AGENTFSM_TEST_IMAGE overrides)."""
    named = os.environ.get("AGENTFSM_TEST_IMAGE")
    if named:
        return named
    return subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--name"], check=True, capture_output=True, text=True
    ).stdout.strip()


@functools.cache
def docker_problem() -> str | None:
    """Why the Docker tests cannot run here, or None."""
    from agentfsm.sandbox.session import docker_unavailable

    return docker_unavailable(sandbox_image())


def require_docker() -> None:
    """Skip without an engine and the image; fail instead when CI demands Docker."""
    problem = docker_problem()
    if problem is None:
        return
    if REQUIRE_DOCKER:
        pytest.fail(f"AGENTFSM_REQUIRE_DOCKER=1 but the Docker tests cannot run: {problem}", pytrace=False)
    pytest.skip(f"no Docker sandbox here: {problem}")


def docker_settings(**overrides: object) -> SandboxSettings:
    """Tight limits, so the limit tests are quick: 256 MiB, 64 processes, a 10 s default timeout."""
    values: dict[str, object] = {
        "mode": "docker",
        "image": sandbox_image(),
        "memory": "256m",
        "pids_limit": 64,
        "timeout": 10.0,
    }
    values.update(overrides)
    return SandboxSettings.model_validate(values)


def leftovers() -> list[str]:
    """Containers, volumes and temporary workspaces this test process made and did not remove."""
    found = [str(path) for path in Path(tempfile.gettempdir()).glob(f"{TEMP_PREFIX}*")]
    if "agentfsm.sandbox.docker_engine" not in sys.modules:
        return found  # no Docker sandbox was ever made in this process
    import docker

    try:
        client = docker.from_env(timeout=30)
    except docker.errors.DockerException:
        return found
    try:
        mine = {"label": ["agentfsm.sandbox", f"agentfsm.owner_pid={os.getpid()}"]}
        found += [
            f"container {c.name}" for c in client.containers.list(all=True, filters=mine, ignore_removed=True)
        ]
        found += [f"volume {v.name}" for v in client.volumes.list(filters=mine)]
    finally:
        client.close()
    return found


def exists(kind: str, name: str) -> bool:
    """Whether the engine still has the container (`kind` "containers") or volume ("volumes") `name`."""
    import docker

    client = docker.from_env()
    try:
        getattr(client, kind).get(name)
    except docker.errors.NotFound:
        return False
    finally:
        client.close()
    return True
