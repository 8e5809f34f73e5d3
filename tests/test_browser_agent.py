"""`BrowserAgent`, from Python and as `agentfsm run --agent browser`: a model served over HTTP on
127.0.0.1 opens the suite's form in the system's Chromium, is sent the page's state with its next
request (and the screenshot, as a vision model), acts on the refs it read there, and terminates."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from browser_support import Counter, Site, browser_leftovers, require_chromium

import agentfsm
from agentfsm import AgentState, BrowserAgent, OpenAICompatible, StopReason
from agentfsm.agent.browser import NEXT_STEP_PROMPT, SYSTEM_PROMPT, BrowserOptions
from agentfsm.agent.page_context import BROWSER_CONTEXT
from agentfsm.browser import BrowserSettings
from agentfsm.cli.building import agent_class_named, options_class_named, recorded_kind
from agentfsm.cli.commands import main
from agentfsm.testing import ScriptedLLM, reply

STATE_HEADER = BROWSER_CONTEXT.partition("{")[0].strip()

Answer = Callable[[int, dict[str, Any]], dict[str, Any]]


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    require_chromium()
    with Counter().serving() as counter, Site(counter.port).serving() as served:
        yield served


def _call(n: int, name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "id": f"call_{n}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def _completion(content: str | None, *calls: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _ref(text: str, line_start: str) -> str:
    match = re.search(re.escape(line_start) + r".*?\[ref=([a-z0-9]+)\]", text)
    assert match is not None, f"no {line_start!r} in the page state sent:\n{text}"
    return match.group(1)


@contextmanager
def model_server(answer: Answer) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """An OpenAI-compatible chat server on 127.0.0.1, in a thread (so a subprocess can use it too):
    `answer(n, body)` replies to the n-th request (1-based). Yields its base URL and the bodies."""
    bodies: list[dict[str, Any]] = []
    failures: list[BaseException] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            bodies.append(body)
            try:
                status, sent = 200, answer(len(bodies), body)
            except BaseException as exc:  # an assertion about the request: the test reports it
                failures.append(exc)
                status, sent = 400, {"error": {"message": f"the test's model refused: {exc}"}}
            data = json.dumps(sent).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", bodies
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    if failures:
        raise failures[0]


def _system(body: dict[str, Any]) -> str:
    first = body["messages"][0]
    assert first["role"] == "system"
    return str(first["content"])


def _images(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        part
        for message in body["messages"]
        if message["role"] == "user" and isinstance(message["content"], list)
        for part in message["content"]
        if part["type"] == "image_url"
    ]


# -- the class ----------------------------------------------------------------------------------


def test_browser_agent_is_public_with_upstreams_toolbox_and_limits() -> None:
    from agentfsm.agent import BrowserAgent as FromAgents

    assert "BrowserAgent" in agentfsm.__all__ and FromAgents is BrowserAgent
    agent = BrowserAgent(llm=ScriptedLLM([]))
    assert agent.name == "browser" and agent.tools.names == ["browser_use", "terminate"]
    assert isinstance(agent.options, BrowserOptions)
    assert (agent.options.max_steps, agent.options.max_observe, agent.options.max_images) == (20, 10_000, 3)
    assert agent.system_prompt == SYSTEM_PROMPT and agent.next_step_prompt == NEXT_STEP_PROMPT
    assert agent.browser.settings == BrowserSettings()  # loopback hosts only
    assert not agent.browser.active  # started by the first browser_use call
    with pytest.raises(ValueError, match="`max_steps` must be an integer >= 1, got 0"):
        BrowserAgent(llm=ScriptedLLM([]), max_steps=0)


def test_importing_agentfsm_does_not_import_the_browser() -> None:
    code = (
        "import sys, agentfsm, agentfsm.agent.browser; "
        "print(sorted(m for m in sys.modules if m.startswith(('playwright', 'agentfsm.browser'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- a run over HTTP --------------------------------------------------------------------------------


def _filler(site: Site) -> Answer:
    """Opens the form, fills the name by the ref of the page state it was sent, and terminates
    once the state shows the name filled in."""

    def answer(n: int, body: dict[str, Any]) -> dict[str, Any]:
        system = _system(body)
        if n == 1:
            assert STATE_HEADER not in system  # no browser use yet: nothing to show
            return _completion(
                "I open the form.", _call(1, "browser_use", action="go_to_url", url=site.url("/form"))
            )
        assert STATE_HEADER in system, system
        if n == 2:
            return _completion(
                "I type the name.",
                _call(2, "browser_use", action="input_text", ref=_ref(system, 'textbox "Name"'), text="Ada"),
            )
        assert ": Ada" in system, system  # the state after the fill
        return _completion("The form has Ada's name.", _call(3, "terminate", status="success"))

    return answer


async def test_the_next_request_after_a_browser_step_carries_the_page_and_its_screenshot(site: Site) -> None:
    before = set(browser_leftovers())
    with model_server(_filler(site)) as (base, bodies):
        llm = OpenAICompatible("openai/gpt-4o", api_base=base, api_key="none")  # a model that takes images
        agent = BrowserAgent(llm=llm)
        try:
            result = await agent.run("Put Ada's name into the form")
            assert (result.state, result.stop_reason, result.steps) == (
                AgentState.FINISHED,
                StopReason.TERMINATED,
                3,
            )
            assert result.output == "The form has Ada's name."
            assert agent.browser.active  # kept after a run that went well
        finally:
            await agent.aclose()
    assert not agent.browser.active and set(browser_leftovers()) == before

    assert len(bodies) == 3
    assert [tool["function"]["name"] for tool in bodies[0]["tools"]] == ["browser_use", "terminate"]
    systems = [_system(body) for body in bodies]
    assert systems[0] == SYSTEM_PROMPT  # the step prompt follows the request as a user message
    assert bodies[0]["messages"][-1] == {"role": "user", "content": NEXT_STEP_PROMPT}
    for system in systems[1:]:  # after tool results: the system prompt, the step prompt, the page
        head, _, state = system.partition(NEXT_STEP_PROMPT)
        assert head.startswith(SYSTEM_PROMPT) and state.lstrip().startswith(STATE_HEADER)
    assert f"Current URL: {site.url('/form')}" in systems[1] and "Title: Form" in systems[1]
    assert 'textbox "Name"' in systems[1] and 'button "Send"' in systems[1]
    assert not _images(bodies[0])
    for body in bodies[1:]:
        images = _images(body)
        assert images and all(p["image_url"]["url"].startswith("data:image/jpeg;base64,/9j/") for p in images)
    # The page state was each request's only: nothing of it in memory or in the options.
    assert agent.next_step_prompt == agent.options.next_step_prompt == NEXT_STEP_PROMPT
    assert not any(STATE_HEADER in (m.content or "") for m in agent.memory.messages)


async def test_a_failed_run_closes_the_browser_and_the_next_one_starts_another(site: Site) -> None:
    before = set(browser_leftovers())
    go = reply(tool_calls=[("browser_use", {"action": "go_to_url", "url": site.url("/")})])
    llm = ScriptedLLM(
        [go, RuntimeError("gone"), go, reply(tool_calls=[("terminate", {"status": "success"})])]
    )
    agent = BrowserAgent(llm=llm)
    try:
        failed = await agent.run("look")
        assert (failed.state, failed.stop_reason) == (AgentState.ERROR, StopReason.ERROR)
        assert not agent.browser.active
        again = await agent.run("look again")
        assert again.stop_reason is StopReason.TERMINATED and agent.browser.active
        system = "".join(m.content or "" for m in llm.requests[3].system_msgs)
        assert STATE_HEADER in system and "Title: Index" in system  # the page, read in the new browser
    finally:
        await agent.aclose()
    assert set(browser_leftovers()) == before


# -- the command line ---------------------------------------------------------------------------------


def _opener(site: Site) -> Answer:
    def answer(n: int, body: dict[str, Any]) -> dict[str, Any]:
        assert body["model"] == "browsing-model"  # [llm.browser], over [llm]
        if n == 1:
            return _completion(
                "I open the page.", _call(1, "browser_use", action="go_to_url", url=site.url("/"))
            )
        system = _system(body)
        assert f"Current URL: {site.url('/')}" in system and "Title: Index" in system, system
        return _completion(f"I see {_ref(system, 'link')!r}.", _call(2, "terminate", status="success"))

    return answer


def test_agentfsm_run_agent_browser_end_to_end(site: Site, clean_env: Path) -> None:
    with model_server(_opener(site)) as (base, bodies):
        (clean_env / "agentfsm.toml").write_text(
            f'[llm]\nmodel = "openai/other-model"\napi_base = "{base}"\n\n'
            '[llm.browser]\nmodel = "openai/browsing-model"\n\n'
            '[browser]\nallowed_hosts = ["127.0.0.1"]\n'
        )
        run = ["run", "open the index", "--agent", "browser", "--json", "--checkpoint", "run.jsonl"]
        proc = subprocess.run(
            [sys.executable, "-m", "agentfsm", *run], capture_output=True, text=True, timeout=120
        )
        with (clean_env / "agentfsm.toml").open("a") as config:  # servers for the mcp and manus agents
            config.write('\n[mcp.servers.other]\ncommand = "not-for-the-browser-agent"\n')
        resumed = subprocess.run(
            [sys.executable, "-m", "agentfsm", "resume", "run.jsonl", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["state"], result["stop_reason"], result["steps"]) == ("FINISHED", "terminated", 2)
    assert result["output"].startswith("I see 'e")
    assert len(bodies) == 2
    # `resume` rebuilds a BrowserAgent from the checkpoint, which finished: its result, nothing run.
    assert resumed.returncode == 0, resumed.stderr
    assert "the run already finished" in resumed.stderr and json.loads(resumed.stdout) == result
    assert [tool["function"]["name"] for tool in bodies[0]["tools"]] == ["browser_use", "terminate"]
    assert _system(bodies[0]) == SYSTEM_PROMPT


def test_the_browser_agent_on_the_command_line(clean_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagram", "--agent", "browser"]) == 0
    assert "OBSERVING --> FINISHED: observe_done [terminated] / terminated" in capsys.readouterr().out
    model = ["--model", "openai/m", "--api-base", "http://127.0.0.1:9/v1"]  # refused before any request
    assert main(["run", "t", "--agent", "browser", *model, "--mcp-server", "x=http://127.0.0.1:9/mcp"]) == 2
    assert "the browser agent takes no MCP servers (got x)" in capsys.readouterr().err
    assert main(["run", "t", "--agent", "browser", *model, "--require-approval", "bash"]) == 2
    err = capsys.readouterr().err
    assert "require_approval names tools the browser agent does not have: bash; its tools: browser_use" in err
    # A checkpoint or trace of a BrowserAgent is resumed and replayed on one.
    kind = recorded_kind("agentfsm.agent.browser.BrowserAgent")
    assert (kind, agent_class_named(kind), options_class_named(kind)) == (
        "browser",
        BrowserAgent,
        BrowserOptions,
    )


@pytest.mark.parametrize("kind", ["browser", "manus"])
async def test_a_trace_with_page_states_replays_offline(site: Site, tmp_path: Path, kind: str) -> None:
    """The page state is read while the run runs; replay takes it from the recorded requests."""
    from agentfsm import Manus
    from agentfsm.agent.replay import replay
    from agentfsm.sandbox import SandboxSettings

    steps = [
        reply(tool_calls=[("browser_use", {"action": "go_to_url", "url": site.url("/form")})]),
        reply(tool_calls=[("browser_use", {"action": "find", "text": "Name"})]),
        reply("done", tool_calls=[("terminate", {"status": "success"})]),
    ]
    llm = ScriptedLLM(steps)
    agent = (
        BrowserAgent(llm=llm) if kind == "browser" else Manus(llm=llm, sandbox=SandboxSettings(mode="local"))
    )
    trace = tmp_path / "run.jsonl"
    try:
        result = await agent.run("look", trace=trace)
    finally:
        await agent.aclose()
    assert result.stop_reason is StopReason.TERMINATED
    assert sum(STATE_HEADER in (m.content or "") for r in llm.requests for m in r.system_msgs) == 2

    replayed = await replay(trace)  # no browser, no model: each request checked against the trace
    assert replayed.result is not None and replayed.ended_early is None
    assert (replayed.result.stop_reason, replayed.result.steps, replayed.result.output) == (
        result.stop_reason,
        3,
        "done",
    )


def test_a_durable_worker_runs_the_browser_agent(site: Site, clean_env: Path) -> None:
    """`agentfsm submit --agent browser` on the queue of an `agentfsm worker` (SQLite): the worker
    builds a BrowserAgent from its configuration, which browses and is sent the page."""
    db = f"sqlite:///{clean_env / 'runs.db'}"
    before = set(browser_leftovers())
    with model_server(_opener(site)) as (base, bodies):
        (clean_env / "agentfsm.toml").write_text(
            f'[llm]\napi_base = "{base}"\n\n[llm.browser]\nmodel = "openai/browsing-model"\n'
        )
        log = clean_env / "worker.log"
        with open(log, "w") as err:
            worker = subprocess.Popen(
                [sys.executable, "-m", "agentfsm", "worker", "--db", db, "--worker-id", "browsing"],
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        try:
            deadline = time.monotonic() + 60
            while "worker browsing runs queue" not in log.read_text():
                assert worker.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
            cli = [sys.executable, "-m", "agentfsm"]
            submitted = subprocess.run(
                [*cli, "submit", "open the index", "--db", db, "--agent", "browser"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert submitted.returncode == 0, submitted.stderr
            run_id = submitted.stdout.strip()
            done = subprocess.run(
                [*cli, "result", run_id, "--db", db, "--wait", "--json"],
                capture_output=True,
                text=True,
                timeout=120,
            )
        finally:
            worker.send_signal(signal.SIGINT)
            worker.wait(30)
    assert done.returncode == 0, done.stderr + log.read_text()
    result = json.loads(done.stdout)
    assert (result["stop_reason"], result["steps"]) == ("terminated", 2)
    assert len(bodies) == 2 and _system(bodies[0]) == SYSTEM_PROMPT
    assert set(browser_leftovers()) == before  # the run's agent, and its browser, closed when it ended
