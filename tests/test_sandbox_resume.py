"""The sandbox never silently moves to the host.

One image name for every command and for the builder; a Manus run checkpointed in Docker
resumes in Docker (with the image it used), or stops with one line; ``mode = "auto"``
falling back to the host says so on stderr once, before the first command runs; a
checkpoint without the sandbox record (older ones) resumes as a new run would decide.

Docker is made unreachable by pointing DOCKER_HOST at a unix socket in a temporary folder
that nothing listens on. The Docker cases need an engine and the sandbox image
(tools/docker-env), and skip without them unless AGENTFSM_REQUIRE_DOCKER=1.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandbox_support import BUILD_SCRIPT, require_docker, sandbox_image

from agentfsm import Manus
from agentfsm.cli import commands as cli_main
from agentfsm.cli import config
from agentfsm.cli.config import Settings
from agentfsm.cli.demo import BUILT_IMAGE, demo_sandbox
from agentfsm.errors import CheckpointError, SandboxError
from agentfsm.flow.checkpoint import read_flow_checkpoint
from agentfsm.recording.checkpoint import read_checkpoint
from agentfsm.sandbox.record import SandboxRecord, resumed_settings
from agentfsm.sandbox.session import SandboxSession
from agentfsm.sandbox.settings import DEFAULT_IMAGE, SandboxSettings
from agentfsm.testing import FunctionLLM, ModelRequest, ScriptedLLM, reply

pytestmark = pytest.mark.usefixtures("clean_env")

WHERE = ("bash", {"command": "echo where: $(hostname) $(pwd)"})
TERMINATE = reply("Done.", [("terminate", {"status": "success"})])


@pytest.fixture
def no_engine(tmp_path: Path) -> Iterator[str]:
    """A DOCKER_HOST where nothing answers: a unix socket bound and closed again, in a temp folder."""
    path = tmp_path / "closed-docker.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.close()  # the file stays; a connect to it is refused
    yield f"unix://{path}"


@pytest.fixture
def ctrl_c_delivered() -> Iterator[None]:
    """SIGINT as in a terminal (a background job starts with it ignored): the run ends cancelled."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def other_image() -> Iterator[str]:
    """The sandbox image under a second name, which is not the default: a resume that looked for
    the default image, not the recorded one, would not find this run's."""
    require_docker()
    name = f"agentfsm-sandbox-resume-test:{os.getpid()}"
    subprocess.run(["docker", "tag", sandbox_image(), name], check=True, capture_output=True)
    try:
        yield name
    finally:
        subprocess.run(["docker", "rmi", name], check=False, capture_output=True)


def where(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(hostname, working directory) of each `WHERE` observation, in order."""
    found = []
    for message in messages:
        text = message.get("content") or ""
        if message.get("role") == "tool" and "where: " in text:
            host, cwd = text.split("where: ", 1)[1].split()[:2]
            found.append((host, cwd))
    return found


def never_called(request: ModelRequest) -> Any:
    raise AssertionError("the model was asked although the resume should have been refused")


def stderr_lines(err: str) -> list[str]:
    """The command's own lines on stderr (the log's lines, which start with a time, left out)."""
    return [line for line in err.splitlines() if line.startswith("agentfsm: ")]


# -- one image ---------------------------------------------------------------------------


def test_every_command_and_the_builder_name_the_one_default_image(capfd: pytest.CaptureFixture[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENTFSM_TEST_IMAGE"}
    built = subprocess.run(["bash", str(BUILD_SCRIPT), "--name"], capture_output=True, text=True, env=env)
    assert built.stdout.strip() == DEFAULT_IMAGE == "agentfsm-sandbox:bookworm"
    assert SandboxSettings().image == Settings.load(None).sandbox.image == BUILT_IMAGE == DEFAULT_IMAGE
    settings, described = demo_sandbox()
    assert settings.image == DEFAULT_IMAGE and (settings.mode == "local" or DEFAULT_IMAGE in described)


# -- auto falling back to the host says so, once, before the first command ----------------------


def test_run_manus_without_docker_says_once_on_stderr_before_the_first_command_that_it_runs_on_the_host(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], no_engine: str
) -> None:
    monkeypatch.setenv("DOCKER_HOST", no_engine)
    monkeypatch.setenv("AGENTFSM_SANDBOX__KEEP_ALIVE", "false")  # a new sandbox per run: still one line
    seen_before: list[str] = []
    script = [reply(tool_calls=[WHERE]), reply(tool_calls=[WHERE]), TERMINATE]

    def model(request: ModelRequest) -> Any:
        if not seen_before:  # the first model call comes before any command
            seen_before.append(capsys.readouterr().err)
        return script.pop(0)

    monkeypatch.setattr(config, "build_llm", lambda settings: FunctionLLM(model))
    assert cli_main.main(["run", "t", "--agent", "manus", "--model", "openai/unused", "--json"]) == 0
    out, err = capsys.readouterr()
    [line] = stderr_lines(seen_before[0])
    assert line.startswith("agentfsm: warning: no Docker sandbox (cannot reach the Docker engine at ")
    assert no_engine in line
    assert "commands run on this machine" in line and '[sandbox] mode = "docker" to require Docker' in line
    assert "warning" not in err and "sandbox_fallback_local" not in err  # once: no second word of it
    result = json.loads(out)
    assert result["stop_reason"] == "terminated"


def test_run_manus_with_docker_required_and_none_is_refused_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], no_engine: str
) -> None:
    monkeypatch.setenv("DOCKER_HOST", no_engine)
    monkeypatch.setenv("AGENTFSM_SANDBOX__MODE", "docker")
    monkeypatch.setattr(config, "build_llm", lambda settings: FunctionLLM(never_called))
    assert cli_main.main(["run", "t", "--agent", "manus", "--model", "openai/unused"]) == 2
    [line] = stderr_lines(capsys.readouterr().err)
    assert line.startswith('agentfsm: error: [sandbox] mode = "docker", but cannot reach the Docker engine')


async def test_a_session_warns_once_and_keeps_the_kind_it_decided(
    monkeypatch: pytest.MonkeyPatch, agentfsm_events: Any, no_engine: str
) -> None:
    monkeypatch.setenv("DOCKER_HOST", no_engine)
    session = SandboxSession(SandboxSettings(keep_alive=False))
    assert session.record is None  # auto has not decided yet
    for _ in range(2):
        assert (await session.get()).kind == "local"
        await session.end_run()
    assert len(agentfsm_events.named("sandbox_fallback_local")) == 1
    assert session.record == SandboxRecord("local")


async def test_a_session_that_decided_docker_never_moves_to_the_host(
    monkeypatch: pytest.MonkeyPatch, no_engine: str
) -> None:
    require_docker()
    session = SandboxSession(SandboxSettings(image=sandbox_image(), keep_alive=False))
    assert (await session.get()).kind == "docker"
    await session.end_run()
    assert session.record == SandboxRecord("docker", sandbox_image())
    monkeypatch.setenv("DOCKER_HOST", no_engine)  # the engine goes away between two runs
    with pytest.raises(SandboxError, match="cannot reach the Docker engine"):
        await session.get()
    assert not session.active


# -- what a resume makes of the record ---------------------------------------------------------


def test_resumed_settings_keep_a_docker_run_in_docker_with_its_image() -> None:
    docker = SandboxRecord("docker", "img:run")
    auto = SandboxSettings(memory="1g")
    assert resumed_settings(auto, docker) == SandboxSettings(mode="docker", image="img:run", memory="1g")
    assert resumed_settings(SandboxSettings(mode="docker", image="other"), docker).image == "img:run"
    assert resumed_settings(SandboxSettings(mode="local"), docker).mode == "local"  # asked outright
    assert resumed_settings(auto, SandboxRecord("local")).mode == "local"
    assert resumed_settings(SandboxSettings(mode="docker"), SandboxRecord("local")).mode == "docker"
    assert resumed_settings(auto, None) is auto


def test_the_record_reads_back_and_a_damaged_one_is_refused() -> None:
    assert SandboxRecord.from_config({"sandbox": {"kind": "docker", "image": "x"}}) == SandboxRecord(
        "docker", "x"
    )
    assert SandboxRecord.from_config({"sandbox": {"kind": "local"}}) == SandboxRecord("local")
    assert SandboxRecord.from_config({}) is None  # an older checkpoint
    for damaged in ({"kind": "docker"}, {"kind": "vm"}, "docker"):
        with pytest.raises(CheckpointError, match="the checkpoint is damaged"):
            SandboxRecord.from_config({"sandbox": damaged})


async def test_an_agent_with_another_sandbox_open_refuses_the_resume(
    monkeypatch: pytest.MonkeyPatch, no_engine: str
) -> None:
    monkeypatch.setenv("DOCKER_HOST", no_engine)
    agent = Manus(llm=ScriptedLLM([]))  # auto, which falls back to the host here
    try:
        await agent.session.get()
        agent.prepare_resume({"sandbox": {"kind": "local"}})  # where it runs already: fine
        with pytest.raises(CheckpointError, match="close the agent"):
            agent.prepare_resume({"sandbox": {"kind": "docker", "image": "img:run"}})
        await agent.aclose()
        agent.prepare_resume({"sandbox": {"kind": "docker", "image": "img:run"}})  # closed: it takes it up
        assert agent.session.record == SandboxRecord("docker", "img:run")
        assert agent.trace_config()["sandbox"] == {"kind": "docker", "image": "img:run"}
    finally:
        await agent.aclose()


# -- a run checkpointed in Docker, resumed --------------------------------------------------------


def checkpoint_a_docker_run(
    path: Path, image: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> list[tuple[str, str]]:
    """`run --agent manus --checkpoint` in Docker with `image`: one command, then Ctrl-C while
    the model thinks again; the run's (hostname, cwd) as its command saw them."""
    calls: list[int] = []

    async def model(request: ModelRequest) -> Any:
        calls.append(1)
        if len(calls) == 1:
            return reply(tool_calls=[WHERE])
        signal.raise_signal(signal.SIGINT)  # the run is cancelled here, in its second THINKING
        await asyncio.sleep(30)

    with monkeypatch.context() as patch:
        patch.setenv("AGENTFSM_SANDBOX__IMAGE", image)
        patch.setattr(config, "build_llm", lambda settings: FunctionLLM(model))
        args = [
            "run",
            "t",
            "--agent",
            "manus",
            "--model",
            "openai/unused",
            "--json",
            "--checkpoint",
            str(path),
        ]
        assert cli_main.main(args) == 130
    capsys.readouterr()
    data = read_checkpoint(path, resuming=True)
    assert data["config"]["sandbox"] == {"kind": "docker", "image": image}
    return where(data["memory"]["messages"])


def test_a_run_checkpointed_in_docker_resumes_in_docker_with_its_image_or_stops_with_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    ctrl_c_delivered: None,
    other_image: str,
    no_engine: str,
) -> None:
    checkpoint = tmp_path / "run.checkpoint.jsonl"
    [(first_host, first_cwd)] = checkpoint_a_docker_run(checkpoint, other_image, monkeypatch, capsys)
    assert first_cwd == "/workspace" and first_host != socket.gethostname()
    refused, older, host = (tmp_path / f"{name}.jsonl" for name in ("refused", "older", "host"))
    for copy in (refused, older, host):
        shutil.copy(checkpoint, copy)

    # Docker unreachable: one line naming the image and what to do; nothing runs, nothing is written.
    with monkeypatch.context() as patch:
        patch.setenv("DOCKER_HOST", no_engine)
        patch.setattr(config, "build_llm", lambda settings: FunctionLLM(never_called))
        before = refused.read_bytes()
        assert cli_main.main(["resume", str(refused), "--json"]) == 2
        out, err = capsys.readouterr()
        [line] = stderr_lines(err)
        assert out == "" and refused.read_bytes() == before
        assert line.startswith(
            f"agentfsm: error: {refused}: the run used the Docker sandbox (image {other_image!r})"
        )
        assert no_engine in line and line.endswith(
            "or pass --sandbox local to run its commands on this machine"
        )
        assert "mode = 'local'" not in line  # the engine's own hint, which a resume does not take
        # A configured mode = "local" is not the word to move this run to the host.
        patch.setenv("AGENTFSM_SANDBOX__MODE", "local")
        assert cli_main.main(["resume", str(refused)]) == 2
        [line] = stderr_lines(capsys.readouterr().err)
        assert "but [sandbox] mode = 'local': pass --sandbox docker" in line

    # With the engine: the default configuration (another image), yet the resumed command runs in a
    # container of the recorded image, and the journal goes on recording it.
    monkeypatch.setattr(
        config, "build_llm", lambda settings: ScriptedLLM([reply(tool_calls=[WHERE]), TERMINATE])
    )
    assert cli_main.main(["resume", str(checkpoint), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["stop_reason"] == "terminated"
    assert "warning" not in err
    data = read_checkpoint(checkpoint)
    [_, (host_name, cwd)] = where(data["memory"]["messages"])
    assert cwd == "/workspace" and host_name not in (socket.gethostname(), first_host)  # a new container
    assert data["config"]["sandbox"] == {"kind": "docker", "image": other_image}

    # --sandbox local: the one way to move it to this machine, and it says so.
    with monkeypatch.context() as patch:
        patch.setenv("DOCKER_HOST", no_engine)
        patch.setattr(
            config, "build_llm", lambda settings: ScriptedLLM([reply(tool_calls=[WHERE]), TERMINATE])
        )
        assert cli_main.main(["resume", str(host), "--sandbox", "local", "--json"]) == 0
        [line] = stderr_lines(capsys.readouterr().err)
        assert line.startswith(
            f"agentfsm: warning: {host}: the run used the Docker sandbox (image {other_image!r})"
        )
        assert line.endswith("as --sandbox local asks")
        [_, (host_name, cwd)] = where(read_checkpoint(host)["memory"]["messages"])
        assert cwd != "/workspace" and host_name == socket.gethostname()
        assert read_checkpoint(host)["config"]["sandbox"] == {"kind": "local"}

    # A checkpoint without the record (as before it existed): it resumes as a new run decides, so
    # without an engine on the host, said once, before its first command.
    text = older.read_text().splitlines()
    stripped = []
    for line_text in text:
        record = json.loads(line_text)
        if isinstance(record.get("config"), dict):
            record["config"].pop("sandbox", None)
        stripped.append(json.dumps(record))
    older.write_text("\n".join(stripped) + "\n")
    assert "sandbox" not in read_checkpoint(older)["config"]
    seen_before: list[str] = []
    script = [reply(tool_calls=[WHERE]), TERMINATE]

    def model(request: ModelRequest) -> Any:
        if not seen_before:
            seen_before.append(capsys.readouterr().err)
        return script.pop(0)

    with monkeypatch.context() as patch:
        patch.setenv("DOCKER_HOST", no_engine)
        patch.setattr(config, "build_llm", lambda settings: FunctionLLM(model))
        assert cli_main.main(["resume", str(older), "--json"]) == 0
        [line] = stderr_lines(seen_before[0])
        assert line.startswith("agentfsm: warning: no Docker sandbox (") and "to require Docker" in line
        assert "warning" not in capsys.readouterr().err
        [_, (host_name, cwd)] = where(read_checkpoint(older)["memory"]["messages"])
        assert host_name == socket.gethostname()


def test_the_library_resume_of_a_docker_run_goes_on_in_docker(tmp_path: Path, other_image: str) -> None:
    """`Manus.resume(path)` on an agent built with the defaults (auto, the default image): the run
    goes on in the recorded sandbox, with the recorded image."""
    checkpoint = tmp_path / "run.checkpoint.jsonl"

    async def first() -> None:
        thinking, calls = asyncio.Event(), []

        async def model(request: ModelRequest) -> Any:
            calls.append(request)
            if len(calls) == 1:
                return reply(tool_calls=[WHERE])
            thinking.set()
            await asyncio.sleep(30)

        agent = Manus(llm=FunctionLLM(model), sandbox=SandboxSettings(image=other_image))
        run = asyncio.create_task(agent.run("t", checkpoint=checkpoint))
        await thinking.wait()
        run.cancel()  # cancelled in its second THINKING: a resume goes on from there
        await asyncio.gather(run, return_exceptions=True)
        await agent.aclose()

    asyncio.run(first())
    assert read_checkpoint(checkpoint)["config"]["sandbox"] == {"kind": "docker", "image": other_image}

    async def resumed() -> SandboxSettings:
        async with Manus(llm=ScriptedLLM([reply(tool_calls=[WHERE]), TERMINATE])) as agent:
            result = await agent.resume(checkpoint)
            assert result.stop_reason == "terminated"
            return agent.session.settings

    settings = asyncio.run(resumed())
    assert (settings.mode, settings.image) == ("docker", other_image)
    [(first_host, _), (host_name, cwd)] = where(read_checkpoint(checkpoint)["memory"]["messages"])
    assert cwd == "/workspace" and host_name not in (socket.gethostname(), first_host)


async def test_a_flow_resumed_from_its_checkpoint_runs_its_manus_where_the_checkpoint_says(
    tmp_path: Path,
) -> None:
    """Paused for plan review (nothing ran yet): the new flow's Manus, built with the defaults,
    takes up the recorded sandbox when the flow is restored."""
    from agentfsm.flow import PlanningFlow

    held, path = tmp_path / "held.json", tmp_path / "flow.json"
    plan = reply(tool_calls=[("planning", {"command": "create", "title": "T", "steps": ["[coder] a"]})])
    recorded = SandboxSettings(mode="docker", image="agentfsm-recorded:flow")

    def flow(planner: ScriptedLLM, sandbox: SandboxSettings | None) -> PlanningFlow:
        coder = Manus(llm=ScriptedLLM([]), sandbox=sandbox, name="coder")
        return PlanningFlow(agents={"coder": coder}, planner_llm=planner, review=True)

    first = flow(ScriptedLLM([plan]), recorded)
    assert (await first.execute("task", checkpoint=held)).paused
    shutil.copy(held, path)  # as a process killed in the pause left it: nobody holds it
    saved = read_flow_checkpoint(path)
    assert saved["config"]["agents"]["coder"]["config"]["sandbox"] == {
        "kind": "docker",
        "image": "agentfsm-recorded:flow",
    }
    again = flow(ScriptedLLM([]), None)
    assert (await again.resume(checkpoint=path)).paused
    coder = again.agents["coder"]
    assert isinstance(coder, Manus)
    assert (coder.session.settings.mode, coder.session.settings.image) == ("docker", "agentfsm-recorded:flow")


def test_resume_sandbox_flag_is_refused_for_an_agent_without_a_sandbox(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    ctrl_c_delivered: None,
) -> None:
    path = tmp_path / "toolcall.jsonl"

    async def interrupted(request: ModelRequest) -> Any:
        signal.raise_signal(signal.SIGINT)
        await asyncio.sleep(30)

    monkeypatch.setattr(config, "build_llm", lambda settings: FunctionLLM(interrupted))
    assert cli_main.main(["run", "t", "--model", "openai/unused", "--checkpoint", str(path)]) == 130
    capsys.readouterr()
    assert "sandbox" not in read_checkpoint(path)["config"]
    assert cli_main.main(["resume", str(path), "--sandbox", "local"]) == 2
    [line] = stderr_lines(capsys.readouterr().err)
    assert line.endswith("this is a toolcall agent's checkpoint, which runs none: drop --sandbox")
