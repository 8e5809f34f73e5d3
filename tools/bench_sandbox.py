"""The benchmark's sandbox section: what Manus's tools pay for the place they run in.

For the Docker sandbox (when an engine answers and the sandbox image is on
it; otherwise one line says why the rows are missing) and the local one:

- start and close of a sandbox (p50/p95, ms), each sandbox new;
- ``python_execute`` and ``bash`` warm (p50/p95, ms): the tools themselves,
  called on a sandbox that already ran one call of each;
- the first ``python_execute`` and the first ``bash`` of a new sandbox: what
  starting the worker and the shell adds to a call;
- the sandbox's share of one agent run, with ``keep_alive`` off (the sandbox
  made and destroyed in the run) and on (made once, for the agent's life):
  `SandboxSession.get`, one ``python_execute``, `SandboxSession.end_run`.

The image is the one tools/build-sandbox-image builds (AGENTFSM_TEST_IMAGE
overrides), as in the tests.
"""

from __future__ import annotations

import asyncio
import functools
import os
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agentfsm.sandbox.base import Sandbox
from agentfsm.sandbox.local import LocalSandbox
from agentfsm.sandbox.session import SandboxSession, docker_unavailable
from agentfsm.sandbox.settings import SandboxSettings
from agentfsm.toolbox.bash import Bash
from agentfsm.toolbox.python_execute import PythonExecute

ROOT = Path(__file__).resolve().parent.parent
GOALS = {"python_execute_p50_ms": 15.0, "start_p50_ms": 250.0}
"""Issue 20's goals, for the Docker sandbox."""


def image() -> str:
    named = os.environ.get("AGENTFSM_TEST_IMAGE")
    if named:
        return named
    script = ROOT / "tools" / "build-sandbox-image"
    return subprocess.run(
        ["bash", str(script), "--name"], check=True, capture_output=True, text=True
    ).stdout.strip()


def spread(samples: list[float]) -> dict[str, float]:
    """p50 and p95 of samples in seconds, as ms."""
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50_ms": statistics.median(ordered) * 1e3, "p95_ms": p95 * 1e3, "n": len(ordered)}


async def timed(call: Callable[[], Awaitable[Any]], n: int) -> list[float]:
    samples = []
    for _ in range(n):
        began = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - began)
    return samples


async def one_kind(
    make: Callable[[], Sandbox], settings: SandboxSettings, quick: bool, bare: BareContainer | None = None
) -> dict[str, Any]:
    """The kind's rows; with `bare`, its floor measured in turns with its starts, so load slows both alike."""
    lifecycles = 7 if quick else 21
    calls = 30 if quick else 200
    starts, closes, floor = [], [], []
    for _ in range(lifecycles):
        if bare is not None:
            floor.append(await asyncio.to_thread(bare.once))
        sandbox = make()
        began = time.perf_counter()
        await sandbox.start()
        starts.append(time.perf_counter() - began)
        began = time.perf_counter()
        await sandbox.close()
        closes.append(time.perf_counter() - began)
    out: dict[str, Any] = {"start": spread(starts), "close": spread(closes)}
    first_python, first_bash = [], []
    for _ in range(lifecycles):
        async with make() as sandbox:
            first_python += await timed(functools.partial(run_python, PythonExecute(sandbox)), 1)
            first_bash += await timed(functools.partial(run_bash, Bash(sandbox)), 1)
    out["first_python_execute"], out["first_bash"] = spread(first_python), spread(first_bash)
    if floor:
        out["bare_start"] = spread([start for start, _ in floor])
        out["bare_close"] = spread([close for _, close in floor])
    async with make() as sandbox:
        warm_python = functools.partial(run_python, PythonExecute(sandbox))
        warm_bash = functools.partial(run_bash, Bash(sandbox))
        for call in (warm_python, warm_bash):  # warm: the first call of each may start a process
            await call()
        out["python_execute"] = spread(await timed(warm_python, calls))
        out["bash"] = spread(await timed(warm_bash, calls))
    for keep_alive in (False, True):
        session = SandboxSession(settings.model_copy(update={"keep_alive": keep_alive}))
        try:
            await agent_run(session)  # the first run of a kept sandbox makes it; later runs find it
            samples = await timed(functools.partial(agent_run, session), lifecycles)
            out[f"run_keep_alive_{'on' if keep_alive else 'off'}"] = spread(samples)
        finally:
            await session.close()
    return out


async def run_python(tool: PythonExecute) -> None:
    result = await tool(code="print(1)")
    assert result.output == "1", result


async def run_bash(tool: Bash) -> None:
    result = await tool(command="echo 1")
    assert result.output == "1", result


class BareContainer:
    """The engine's own floor: a container with no options at all (no limits, mounts or init), made and
    started, then removed, through the create and start calls the sandbox makes (it also attaches)."""

    def __init__(self, image: str) -> None:
        import docker

        self.image = image
        self.client = docker.from_env()

    def once(self) -> tuple[float, float]:
        """Seconds to make and start one, seconds to remove it."""
        api = self.client.api
        began = time.perf_counter()
        made = api.create_container(self.image, ["sleep", "infinity"], host_config={"NetworkMode": "none"})
        api.start(made["Id"])
        started = time.perf_counter()
        api.remove_container(made["Id"], force=True)
        return started - began, time.perf_counter() - started


async def agent_run(session: SandboxSession) -> None:
    """The sandbox's share of one agent run that makes one ``python_execute`` call."""
    result = await PythonExecute(session)(code="print(1)")
    assert result.output == "1", result
    await session.end_run()


async def sandbox(quick: bool) -> dict[str, Any]:
    name = image()
    docker = SandboxSettings(mode="docker", image=name)
    out: dict[str, Any] = {"image": name, "goals": GOALS}
    problem = docker_unavailable(name)
    if problem is None:
        from agentfsm.sandbox.docker import DockerSandbox

        bare = BareContainer(name)
        try:
            out["docker"] = await one_kind(lambda: DockerSandbox(docker), docker, quick, bare)
        finally:
            bare.client.close()
    else:
        out["docker_skipped"] = problem
    local = SandboxSettings(mode="local")
    out["local"] = await one_kind(lambda: LocalSandbox(), local, quick)
    return out


def lines(s: dict[str, Any], out: list[str]) -> None:
    out.append("The sandbox (ms, p50 / p95; warm calls on a sandbox that already ran one)")
    rows = (
        "start",
        "close",
        "python_execute",
        "bash",
        "first_python_execute",
        "first_bash",
        "run_keep_alive_off",
        "run_keep_alive_on",
    )
    labels = {
        "first_python_execute": "first python_execute",
        "first_bash": "first bash",
        "bare_start": "bare container start",
        "bare_close": "bare container remove",
        "run_keep_alive_off": "run, keep_alive off",
        "run_keep_alive_on": "run, keep_alive on",
    }
    kinds = [kind for kind in ("docker", "local") if kind in s]
    out.append(f"  {'':<22}" + "".join(f"{kind:>20}" for kind in kinds))
    for row in rows:
        cells = "".join(f"{s[kind][row]['p50_ms']:>11.1f} / {s[kind][row]['p95_ms']:>6.1f}" for kind in kinds)
        out.append(f"  {labels.get(row, row):<22}{cells}")
    out.append("  (a run: the session's get, one python_execute, end_run)")
    if "docker_skipped" in s:
        out.append(f"  docker: skipped, no Docker sandbox here: {s['docker_skipped']}")
        return
    if "bare_start" in s["docker"]:
        for row in ("bare_start", "bare_close"):
            cell = s["docker"][row]
            out.append(f"  {labels[row]:<22}{cell['p50_ms']:>11.1f} / {cell['p95_ms']:>6.1f}")
        out.append(
            "  (the engine's floor: a container without options, created and started, in turns with starts)"
        )
    for key, row in (("python_execute_p50_ms", "python_execute"), ("start_p50_ms", "start")):
        value, limit = s["docker"][row]["p50_ms"], s["goals"][key]
        verdict = "met" if value <= limit else "NOT met"
        out.append(f"  goal: docker {row} p50 <= {limit:g} ms: {value:.1f} ms, {verdict}")
