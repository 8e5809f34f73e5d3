"""The example web app (`examples/web_app.py`) over real HTTP on 127.0.0.1: 50 runs at once, events
over server-sent events, approvals and a cancel from requests, then a SIGKILL mid-run and a restart
after which every run ends as it should, and no tool ran twice."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from app_model_server import AppModel

from agentfsm import AgentState
from agentfsm.agent.replay import replay

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "examples" / "web_app.py"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class App:
    """The example app as a process of its own, on a port of 127.0.0.1."""

    def __init__(self, workdir: Path, api_base: str) -> None:
        self.workdir, self.api_base = workdir, api_base
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        env = {**os.environ, "APP_API_BASE": self.api_base, "PORT": str(self.port), "APP_RUNS": "runs"}
        env["APP_LEDGER"] = str(self.workdir / "ledger.txt")
        self.process = subprocess.Popen(
            [sys.executable, str(APP)],
            cwd=self.workdir,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        async with aiohttp.ClientSession() as http:
            for _ in range(300):
                try:
                    async with http.get(f"{self.url}/runs") as response:
                        if response.status == 200:
                            return
                except aiohttp.ClientConnectionError:
                    pass
                assert self.process.poll() is None, self.process.stderr.read().decode()  # type: ignore[union-attr]
                await asyncio.sleep(0.05)
        raise AssertionError("the example app did not start in 15 s")

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # aiohttp's clean exit: the runs' cleanup runs
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
async def model() -> AsyncIterator[AppModel]:
    server = AppModel()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def _json(http: aiohttp.ClientSession, method: str, url: str, body: Any = None) -> Any:
    async with http.request(method, url, json=body) as response:
        data = await response.json()
        assert response.status < 300, data
        return data


async def _until(http: aiohttp.ClientSession, app: App, run_id: str, states: set[str]) -> dict[str, Any]:
    for _ in range(400):
        status = await _json(http, "GET", f"{app.url}/runs/{run_id}")
        if status["state"] in states:
            return status  # type: ignore[no-any-return]
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} is {status['state']}, not one of {states}")


async def _sse(http: aiohttp.ClientSession, url: str, until_kind: str | None = None) -> list[dict[str, Any]]:
    """The server-sent events at `url`, to the stream's end or the first of `until_kind`."""
    events: list[dict[str, Any]] = []
    async with http.get(url) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        async for raw in response.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if until_kind is not None and events[-1]["kind"] == until_kind:
                    break
    return events


async def test_the_example_app_serves_runs_and_survives_a_kill(tmp_path: Path, model: AppModel) -> None:
    app = App(tmp_path, model.base)
    await app.start()
    try:
        async with aiohttp.ClientSession() as http:
            many = [_json(http, "POST", f"{app.url}/runs", {"task": f"note {n}"}) for n in range(50)]
            notes = [created["run_id"] for created in await asyncio.gather(*many)]
            archives = [
                (await _json(http, "POST", f"{app.url}/runs", {"task": f"archive r{n}"}))["run_id"]
                for n in range(3)
            ]
            slow = (await _json(http, "POST", f"{app.url}/runs", {"task": "slow s1"}))["run_id"]

            events = await _sse(http, f"{app.url}/runs/{archives[0]}/events", until_kind="run_paused")
            assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
            paused = [await _until(http, app, run_id, {"paused"}) for run_id in archives]
            calls = [status["pending_approval"][0]["id"] for status in paused]
            await _json(http, "POST", f"{app.url}/runs/{archives[0]}/approve", {"call_id": calls[0]})
            async with http.post(
                f"{app.url}/runs/{archives[0]}/approve", json={"call_id": calls[0]}
            ) as again:
                assert again.status == 409  # decided once: a second decision is refused, naming the pause
                assert "pause" in (await again.json())["error"]
            await _json(http, "POST", f"{app.url}/runs/{archives[1]}/cancel")
            rest = await _sse(http, f"{app.url}/runs/{archives[0]}/events?after={len(events)}")
            assert rest[-1]["kind"] == "transition" and rest[-1]["data"]["dest"] == "FINISHED"
            for run_id in notes:
                assert (await _until(http, app, run_id, {"finished", "error"}))["state"] == "finished"
            await _until(http, app, slow, {"running"})

        app.kill()  # mid-run: `slow` waits for its model, archives[2] for its approval
        model.slow_s = 0.0  # the resumed run asks its model again, and is answered at once
        await app.start()

        async with aiohttp.ClientSession() as http:
            status = await _until(http, app, archives[2], {"paused"})
            await _json(
                http,
                "POST",
                f"{app.url}/runs/{archives[2]}/approve",
                {"call_id": status["pending_approval"][0]["id"]},
            )
            ended = {
                run_id: await _until(http, app, run_id, {"finished", "error", "cancelled"})
                for run_id in archives
            }
            assert [ended[r]["state"] for r in archives] == ["finished", "cancelled", "finished"]
            assert (await _until(http, app, slow, {"finished", "error"}))["state"] == "finished"
            listed = await _json(http, "GET", f"{app.url}/runs")
            assert len(listed) == 54 and {s["state"] for s in listed} == {"finished", "cancelled"}
            async with http.get(f"{app.url}/runs/nope") as missing:
                assert missing.status == 404 and "no run 'nope'" in (await missing.json())["error"]
    finally:
        app.stop()
    assert sorted((tmp_path / "ledger.txt").read_text().splitlines()) == ["archived r0", "archived r2"]
    # Each trace replays as one run, those of the runs the kill stopped included (on from their
    # checkpoints, their traces cut back to the same point and written on).
    for run_id in (slow, archives[2], archives[0], notes[0]):
        replayed = await replay(tmp_path / "runs" / run_id / "trace.jsonl")
        assert replayed.ended_early is None and replayed.result is not None, run_id
        assert replayed.result.state is AgentState.FINISHED, run_id
