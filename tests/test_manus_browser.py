"""Manus with its browser: a model served over HTTP on 127.0.0.1 fills the suite's form by the refs
of the page state it is sent, and sees each screenshot as an image part of a user message."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from browser_support import Counter, Site, browser_leftovers, chromium_pid, require_chromium

from agentfsm import AgentState, Manus, OpenAICompatible, StopReason, tool
from agentfsm.agent.manus import NEXT_STEP_PROMPT
from agentfsm.sandbox import SandboxSettings
from agentfsm.testing import ScriptedLLM, reply

pytestmark = [pytest.mark.http, pytest.mark.asyncio(loop_scope="module")]

LOCAL = SandboxSettings(mode="local")
STATE_HEADER = "The browser's current page:"


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


def _completion(content: str | None, calls: list[dict[str, Any]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _ref(system: str, line_start: str) -> str:
    match = re.search(re.escape(line_start) + r".*?\[ref=([a-z0-9]+)\]", system)
    assert match is not None, f"no {line_start!r} in the page state sent:\n{system}"
    return match.group(1)


@dataclass
class FormFiller:
    """The model: it reads the page state in the system message and acts on the refs it finds there."""

    form: str
    bodies: list[dict[str, Any]] = field(default_factory=list)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(body)
        system = body["messages"][0]["content"]
        match len(self.bodies):
            case 1:
                return _completion(
                    "I open the form.", [_call(1, "browser_use", action="go_to_url", url=self.form)]
                )
            case 2:
                name, colour = _ref(system, 'textbox "Name"'), _ref(system, 'combobox "Colour"')
                return _completion(
                    "I fill it in.",
                    [
                        _call(2, "browser_use", action="input_text", ref=name, text="Ada"),
                        _call(3, "browser_use", action="select_dropdown_option", ref=colour, text="Green"),
                    ],
                )
            case 3:
                return _completion(
                    "I send it.",
                    [_call(4, "browser_use", action="click_element", ref=_ref(system, 'button "Send"'))],
                )
            case _:
                said = re.search(r"Hello (\w+), you chose (\w+)", system)
                assert said is not None, system
                return _completion(
                    f"{said.group(1)} chose {said.group(2)}.", [_call(5, "terminate", status="success")]
                )


@pytest_asyncio.fixture(loop_scope="module")
async def model_server(site: Site) -> AsyncIterator[tuple[FormFiller, str]]:
    filler = FormFiller(form=site.url("/form"))

    async def chat(request: web.Request) -> web.Response:
        return web.json_response(filler.answer(await request.json()))

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield filler, f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    finally:
        await runner.cleanup()


async def test_manus_fills_a_form_by_the_refs_of_its_page_state_and_sees_the_screenshots(
    model_server: tuple[FormFiller, str],
) -> None:
    filler, base = model_server
    before = set(browser_leftovers())
    llm = OpenAICompatible("openai/gpt-4o", api_base=base, api_key="none")  # a model that takes images
    agent = Manus(llm=llm, sandbox=LOCAL)
    try:
        result = await agent.run("Order something green for Ada on the form")
        assert (result.state, result.stop_reason, result.steps) == (
            AgentState.FINISHED,
            StopReason.TERMINATED,
            4,
        )
        assert result.output == "Ada chose Green."
        assert agent.browser.active  # kept after a run that went well: the next run has its pages
    finally:
        await llm.aclose()
        await agent.aclose()
    assert not agent.browser.active and set(browser_leftovers()) == before

    bodies = filler.bodies
    assert len(bodies) == 4
    systems = [body["messages"][0]["content"] for body in bodies]
    assert STATE_HEADER not in systems[0]  # no browser use yet: the step prompt alone
    for system in systems[1:]:
        head, _, state = system.partition(NEXT_STEP_PROMPT.strip())
        assert head.startswith("You are OpenManus") and state.lstrip().startswith(STATE_HEADER)
    assert f"Current URL: {filler.form}" in systems[1] and "Title: Form" in systems[1]
    assert 'textbox "Name"' in systems[2] and ": Ada" in systems[2]  # the state after the fill
    assert "Title: Result" in systems[3] and "Hello Ada, you chose Green" in systems[3]
    for body in bodies[1:]:
        messages = body["messages"]
        for message in messages:
            if message["role"] == "tool":
                assert isinstance(message["content"], str)  # never an image on a tool message
        images = [
            part
            for message in messages
            if message["role"] == "user" and isinstance(message["content"], list)
            for part in message["content"]
            if part["type"] == "image_url"
        ]
        assert images and all(p["image_url"]["url"].startswith("data:image/jpeg;base64,/9j/") for p in images)
    last = bodies[3]["messages"]
    assert last[-1]["role"] == "user" and last[-2]["role"] == "tool"  # the click's screenshot follows it
    # The page state was this request's only: nothing of it stays in memory or in the options.
    assert agent.next_step_prompt == agent.options.next_step_prompt == NEXT_STEP_PROMPT
    assert not any(STATE_HEADER in (m.content or "") for m in agent.memory.messages)


async def test_a_failed_run_closes_the_browser(site: Site) -> None:
    before = set(browser_leftovers())
    llm = ScriptedLLM(
        [
            reply(tool_calls=[("browser_use", {"action": "go_to_url", "url": site.url("/")})]),
            RuntimeError("gone"),
        ]
    )
    agent = Manus(llm=llm, sandbox=LOCAL)
    result = await agent.run("look")
    assert (result.state, result.stop_reason) == (AgentState.ERROR, StopReason.ERROR)
    assert not agent.browser.active and set(browser_leftovers()) == before


async def test_a_cancelled_run_closes_the_browser(site: Site) -> None:
    before = set(browser_leftovers())
    steps = [reply(tool_calls=[("browser_use", {"action": "go_to_url", "url": site.url("/")})])]
    steps.append(reply(tool_calls=[("browser_use", {"action": "wait", "seconds": 30})]))
    agent = Manus(llm=ScriptedLLM(steps), sandbox=LOCAL)
    task = asyncio.ensure_future(agent.run("look, then wait"))
    for _ in range(200):
        if agent.browser.active and agent.run_state.step == 2:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)  # in the wait
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert agent.state is AgentState.ERROR
    assert not agent.browser.active and set(browser_leftovers()) == before


async def test_the_page_state_follows_browser_use_only(site: Site) -> None:
    script = [
        reply(tool_calls=[("browser_use", {"action": "go_to_url", "url": site.url("/")})]),
        reply(tool_calls=[("python_execute", {"code": "print(1)"})]),
        reply(tool_calls=[("python_execute", {"code": "print(2)"})]),
        reply(tool_calls=[("terminate", {"status": "success"})]),
    ]
    llm = ScriptedLLM(script)
    async with Manus(llm=llm, sandbox=LOCAL) as agent:
        result = await agent.run("look, then compute")
        assert result.stop_reason is StopReason.TERMINATED
    systems = [request.system_msgs[0].content or "" for request in llm.requests]
    # Upstream's window: a browser_use call among the last three messages brings the page.
    assert [STATE_HEADER in system for system in systems] == [False, True, False, False]
    assert "Title: Index" in systems[1]


async def test_a_browser_killed_mid_run_is_an_observation_and_the_next_call_starts_another(
    site: Site,
) -> None:
    before = set(browser_leftovers())
    killed: list[int] = []

    @tool
    def kill_the_browser() -> str:
        """Kill the agent's Chromium."""
        assert agent.browser.workdir is not None
        pid = chromium_pid(agent.browser.workdir)
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)
        return "killed"

    go = ("browser_use", {"action": "go_to_url", "url": site.url("/form")})
    script = [reply(tool_calls=[go]), reply(tool_calls=[("kill_the_browser", {})]), reply(tool_calls=[go])]
    script += [reply(tool_calls=[go]), reply(tool_calls=[("terminate", {"status": "success"})])]
    llm = ScriptedLLM(script)
    agent = Manus(llm=llm, sandbox=LOCAL, extra_tools=[kill_the_browser])
    async with agent:
        result = await agent.run("open the form, twice")
        assert result.stop_reason is StopReason.TERMINATED and len(killed) == 1
        observed = [m.content for m in agent.memory.messages if m.name == "browser_use"]
        assert (
            observed[0] == f"Observed output of cmd `browser_use` executed:\nNavigated to {site.url('/form')}"
        )
        assert observed[1] == (
            "Error: go_to_url failed: the browser closed unexpectedly (it crashed or was killed); "
            "it was discarded, and the next browser_use call starts a new one"
        )
        assert observed[2] == observed[0]
        assert agent.browser.active
    assert set(browser_leftovers()) == before
