"""The inspector over an app's `Runs` (`agentfsm.ui.serve(runs)`): runs followed as they go and steered
from the page, over real HTTP on 127.0.0.1 and in Chromium.

Over HTTP: the run's events as server-sent events, to the run's end; an approval, a rejection and a
cancel through the manager's own verbs, a stale decision refused naming its pause; an action from
another origin, or not as JSON, refused. In Chromium: a run drawn transition by transition while it
goes (the page never reloaded), its streamed text shown as it comes; a call approved with edited
arguments from the page, and the run going on to its end with the tool run once with them; a
tool's question answered through the form its schema makes; a paused run cancelled from the page;
runs forked from a past transition, an agent's and a flow's (its agent's memory edited).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from browser_support import require_chromium
from durable_agents import approval_agent, asking_agent, elicit_agent
from flow_runs_support import FlowWorld
from runs_support import until

from agentfsm import Runs, Terminate, ToolCallAgent, tool
from agentfsm.browser.settings import DEFAULT_EXECUTABLE
from agentfsm.durable import AgentSpec
from agentfsm.messages import Role, ToolCall
from agentfsm.testing import FunctionLLM, ModelRequest, reply
from agentfsm.ui import serve
from agentfsm.ui.server import Inspector

pytestmark = pytest.mark.http

GATES: dict[str, asyncio.Event] = {}
"""The gated agent's model waits on its run's gate before each reply (the test opens it)."""


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def gated_agent(spec: AgentSpec) -> ToolCallAgent:
    """Two add calls and an answer, streamed; each reply waits for the test to open the gate."""
    gate = GATES[spec.options["gate"]]

    async def decide(request: ModelRequest) -> Any:
        await gate.wait()
        gate.clear()
        done = sum(1 for m in request.messages if m.role is Role.TOOL)
        if done < 2:
            return reply(f"adding {done}", [ToolCall.create(f"c{done}", "add", {"a": done, "b": 1})])
        return reply("the sum is done")

    return ToolCallAgent(llm=FunctionLLM(decide, stream=True), tools=[tool(add), Terminate()], name="gated")


ASKED: list[list[Any]] = []
"""The messages the noting agent's model was sent, call by call."""


def noting_agent(spec: AgentSpec) -> ToolCallAgent:
    """One add call, then an answer quoting the last tool result it was sent."""

    def decide(request: ModelRequest) -> Any:
        ASKED.append(list(request.messages))
        results = [m for m in request.messages if m.role is Role.TOOL]
        if not results:
            return reply(tool_calls=[ToolCall.create("c1", "add", {"a": 2, "b": 3})])
        return reply(f"the result was: {results[-1].content}")

    return ToolCallAgent(llm=FunctionLLM(decide), tools=[tool(add), Terminate()], name="noting")


def http_agent(spec: AgentSpec) -> ToolCallAgent:
    """An agent whose model is a real HTTP server's (llmock's), retrying quickly."""
    from agentfsm.model.openai_compatible import OpenAICompatible

    llm = OpenAICompatible(
        "openai/test-model",
        api_base=spec.options["api_base"],
        api_key="test",
        backoff_base=0.01,
        backoff_max=0.2,
    )
    return ToolCallAgent(llm=llm, tools=[Terminate()], name="over-http")


FLOWS = FlowWorld()
"""What the flows' tools did (`flow_runs_support`): a flow's task names its steps."""

AGENTS = {
    "flow": FLOWS.factories()["flow"],
    "approval": approval_agent,
    "asking": asking_agent,
    "gated": gated_agent,
    "noting": noting_agent,
    "http": http_agent,
    "elicit": elicit_agent,
}


@pytest_asyncio.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Runs, Inspector]]:
    async with Runs(tmp_path / "runs", agents=AGENTS) as runs:
        inspector = await serve(runs)
        try:
            yield runs, inspector
        finally:
            await inspector.stop()


def _spec(agent: str, tmp_path: Path, **options: Any) -> AgentSpec:
    return AgentSpec(agent=agent, options={"effects": str(tmp_path / f"{agent}.txt"), **options})


async def post(inspector: Inspector, verb: str, body: dict[str, Any], **headers: str) -> tuple[int, Any]:
    base = str(inspector.url)
    sent = {"Origin": base.rstrip("/"), **headers}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{base}api/run/{verb}", json=body, headers=sent) as response,
    ):
        return response.status, await response.json()


# -- over HTTP ---------------------------------------------------------------------------------------


async def test_a_managed_run_lists_with_its_status_and_streams_its_events_to_its_end(
    served: tuple[Runs, Inspector], tmp_path: Path
):
    runs, inspector = served
    run_id = await runs.submit("record 7", _spec("approval", tmp_path))
    await until(runs, run_id, "paused", timeout=12)
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{inspector.url}api/runs") as response:
            rows = (await response.json())["runs"]
        assert [(r["key"], r["state"], r["live"]) for r in rows] == [(f"app/{run_id}", "paused", True)]
        async with session.get(f"{inspector.url}api/run", params={"key": f"app/{run_id}"}) as response:
            summary = await response.json()
        assert summary["status"]["pause"] == 1
        assert [c["id"] for c in summary["status"]["pending_approval"]] == ["c1"]
        assert summary["states"][-1] == "AWAITING_APPROVAL" and summary["table_source"] == "recorded"
        async with session.get(f"{inspector.url}api/run/events", params={"key": f"app/{run_id}"}) as stream:
            assert stream.headers["Content-Type"] == "text/event-stream"
            seen: list[str] = []

            async def read() -> None:
                async for line in stream.content:
                    text = line.decode().strip()
                    if text.startswith("data: {") and text != "data: {}":
                        seen.append(json.loads(text[6:])["kind"])
                    if text == "event: end":
                        return

            reading = asyncio.create_task(read())
            while "run_paused" not in seen:
                await asyncio.sleep(0.02)
            status, answer = await post(
                inspector, "approve", {"key": f"app/{run_id}", "call_id": "c1", "pause": 1}
            )
            assert (status, answer) == (200, {"done": "approve", "run_id": run_id})
            await asyncio.wait_for(reading, 30)
    assert seen[0] == "transition" and seen.count("run_paused") == 1 and "llm_call" in seen
    result = await runs.result(run_id, wait=True, timeout=30)
    assert result is not None and result.stop_reason == "terminated"
    assert (tmp_path / "approval.txt").read_text().split() == ["7"]  # the approved call, once


async def test_a_stale_decision_is_refused_naming_its_pause(served: tuple[Runs, Inspector], tmp_path: Path):
    runs, inspector = served
    run_id = await runs.submit("record 7", _spec("approval", tmp_path))
    await until(runs, run_id, "paused", timeout=12)
    key = f"app/{run_id}"
    status, _ = await post(inspector, "reject", {"key": key, "call_id": "c1", "pause": 1, "reason": "no"})
    assert status == 200
    status, answer = await post(inspector, "approve", {"key": key, "call_id": "c1", "pause": 1})
    assert status == 409 and "was for pause 1 of run" in answer["problem"]
    assert not (tmp_path / "approval.txt").exists()  # rejected: the tool never ran


async def test_an_action_from_another_page_or_not_as_json_is_refused(
    served: tuple[Runs, Inspector], tmp_path: Path
):
    runs, inspector = served
    run_id = await runs.submit("record 7", _spec("approval", tmp_path))
    await until(runs, run_id, "paused", timeout=12)
    body = {"key": f"app/{run_id}", "call_id": "c1", "pause": 1}
    status, answer = await post(inspector, "approve", body, Origin="http://attacker.example")
    assert (status, answer) == (
        403,
        {"problem": "an action must come from the inspector's own page, not from http://attacker.example"},
    )
    async with aiohttp.ClientSession() as session:
        form = {"key": body["key"], "call_id": "c1"}
        origin = {"Origin": str(inspector.url).rstrip("/")}
        async with session.post(f"{inspector.url}api/run/approve", data=form, headers=origin) as response:
            assert response.status == 403
            assert (await response.json())["problem"].startswith("an action is a JSON body")
    assert (await runs.status(run_id)).state == "paused"
    status, answer = await post(inspector, "approve", {**body, "arguments": "n=8"})
    assert status == 400 and answer["problem"] == "the action's arguments must be a JSON dict, got 'n=8'"
    status, answer = await post(inspector, "approve", {"key": "0/elsewhere.jsonl", "call_id": "c1"})
    assert status == 404 and "cannot be steered" in answer["problem"]


async def test_a_paused_run_is_cancelled_for_good(served: tuple[Runs, Inspector], tmp_path: Path):
    runs, inspector = served
    run_id = await runs.submit("record 7", _spec("approval", tmp_path))
    await until(runs, run_id, "paused", timeout=12)
    assert (await post(inspector, "cancel", {"key": f"app/{run_id}"}))[0] == 200
    status = await runs.status(run_id)
    assert status.state == "cancelled" and status.result is not None


async def test_breakpoints_sent_to_a_run_are_checked_and_step_needs_a_held_run(
    served: tuple[Runs, Inspector], tmp_path: Path
):
    runs, inspector = served
    GATES["checked"] = gate = asyncio.Event()
    run_id = await runs.submit("add twice", AgentSpec(agent="gated", options={"gate": "checked"}))
    key = f"app/{run_id}"
    status, answer = await post(inspector, "breakpoints", {"key": key, "breakpoints": [{"stat": "ACTING"}]})
    assert status == 400 and answer["problem"].startswith("a breakpoint has text fields")
    status, answer = await post(inspector, "step", {"key": key})
    assert status == 409 and answer["problem"].startswith(f"run '{run_id}' is not held at a breakpoint")
    first = await anext(aiter(runs.events(run_id)))  # its first edge: its agent is built
    assert first.kind == "transition"
    status, answer = await post(inspector, "breakpoints", {"key": key, "breakpoints": [{"state": "NAPPING"}]})
    assert status == 409 and answer["problem"].startswith("no state 'NAPPING' in this agent's machine")
    status, _ = await post(inspector, "breakpoints", {"key": key, "breakpoints": [{"state": "OBSERVING"}]})
    assert status == 200
    gate.set()
    while (await runs.status(run_id)).held is None:
        await asyncio.sleep(0.01)
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{inspector.url}api/run", params={"key": key}) as response,
    ):
        summary = await response.json()
    assert summary["status"]["held"] == "OBSERVING: ACTING -> OBSERVING on act_done"
    assert summary["status"]["breakpoints"] == [{"state": "OBSERVING"}]
    await runs.cancel(run_id)


async def test_a_fork_is_refused_naming_why_for_a_bad_body_the_last_transition_or_a_file_s_run(
    served: tuple[Runs, Inspector], tmp_path: Path
):
    runs, inspector = served
    parent = await runs.submit("add 2 and 3", "noting")
    await runs.result(parent, wait=True, timeout=30)
    key = f"app/{parent}"
    status, answer = await post(inspector, "fork", {"key": key, "at": "3"})
    assert status == 400 and answer["problem"] == "a fork names its transition: {key, at, messages}"
    status, answer = await post(inspector, "fork", {"key": key, "at": 4})
    assert status == 409 and answer["problem"].startswith(f"transition 4 of run '{parent}' ended it")
    status, answer = await post(inspector, "fork", {"key": key, "at": 1, "messages": [{"role": "nobody"}]})
    assert status == 400 and answer["problem"].startswith("the fork's messages are not messages")
    status, answer = await post(inspector, "fork", {"key": "0/run.jsonl", "at": 1})
    assert (status, answer["problem"]) == (404, "no run '0/run.jsonl' among the paths given")
    assert [s.run_id for s in await runs.list()] == [parent]  # nothing was started


async def test_a_flow_s_run_forks_over_http_with_an_agent_s_memory_edited(served: tuple[Runs, Inspector]):
    runs, inspector = served
    FLOWS.done.clear()
    parent = await runs.submit("note a; note b", "flow", run_id="flowparent")
    assert (await runs.result(parent, wait=True, timeout=30)) is not None and FLOWS.done == ["a", "b"]
    base, key = str(inspector.url), "app/flowparent"
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base}api/run", params={"key": key}) as response:
            assert (await response.json())["fork"] == {"into": "app"}
        async with session.get(f"{base}api/run/fork", params={"key": key, "at": "2"}) as response:
            point = await response.json()
    assert (point["state"], point["messages"], list(point["agents"])) == ("EXECUTING", [], ["worker"])
    edited = [
        {**m, "content": "noted z"} if m["role"] == "tool" and "noted a" in m["content"] else m
        for m in point["agents"]["worker"]
    ]
    status, answer = await post(inspector, "fork", {"key": key, "at": 2, "agents": {"nobody": edited}})
    assert status == 409 and answer["problem"].startswith("flow run 'flowparent' has no agent 'nobody'")
    status, answer = await post(inspector, "fork", {"key": key, "at": 2, "agents": {"worker": [{"x": 1}]}})
    assert status == 400 and answer["problem"].startswith("the fork's messages are not messages")
    status, answer = await post(inspector, "fork", {"key": key, "at": 2, "agents": {"worker": edited}})
    assert status == 200 and answer["key"] == f"app/{answer['run_id']}"
    result = await runs.result(answer["run_id"], wait=True, timeout=30)
    assert result is not None and result.stop_reason == "completed" and FLOWS.done == ["a", "b", "b"]
    assert "noted z" in [m.content for m in FLOWS.asked[-2]]  # step 2's agent read the edited result
    trace = await runs.trace(answer["run_id"])
    assert trace is not None and json.loads(trace.splitlines()[0])["forked_from"]["memory_edited"] is True


async def test_a_flow_s_plan_is_reviewed_over_http_bound_to_its_pause(served: tuple[Runs, Inspector]):
    runs, inspector = served
    FLOWS.done.clear()
    reviewed = AgentSpec(agent="flow", options={"review": True})
    approved = await runs.submit("note a", reviewed, run_id="approved")
    cancelled = await runs.submit("note c", reviewed, run_id="cancelled")
    for run_id in (approved, cancelled):
        await until(runs, run_id, "paused", timeout=12)
    base = str(inspector.url)
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{base}api/run", params={"key": "app/approved"}) as response,
    ):
        plan = (await response.json())["status"]["plan"]
    assert "[worker] note a" in plan and plan.startswith("Plan: ")
    for body, status_code, problem in (
        ({"verdict": "maybe", "pause": 1}, 400, "a plan's verdict is 'approve', 'edit' or 'cancel'"),
        ({"verdict": "edit", "steps": "note x", "pause": 1}, 400, "a plan's steps are a list of step texts"),
        ({"verdict": "edit", "pause": 1}, 409, "a plan is edited with its new `steps`, and only then"),
        ({"verdict": "approve", "pause": 3}, 409, "the decision of call 'the plan' was for pause 3"),
    ):
        status, answer = await post(inspector, "review", {"key": "app/approved", **body})
        assert (status, answer["problem"][: len(problem)]) == (status_code, problem), answer
    status, answer = await post(
        inspector, "review", {"key": "app/approved", "verdict": "approve", "pause": 1}
    )
    assert (status, answer) == (200, {"done": "review", "run_id": "approved"})
    status, answer = await post(
        inspector, "review", {"key": "app/cancelled", "verdict": "cancel", "pause": 1}
    )
    assert status == 200
    done = await runs.result(approved, wait=True, timeout=30)
    ended = await runs.result(cancelled, wait=True, timeout=30)
    assert done is not None and done.stop_reason == "completed" and FLOWS.done == ["a"]
    assert ended is not None and ended.stop_reason == "plan_cancelled"


async def test_a_flow_s_trace_and_checkpoint_among_the_paths_fork_into_the_app_s_runs(tmp_path: Path):
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    FLOWS.done.clear()
    flow = FLOWS.factories()["flow"](AgentSpec(agent="flow"))
    ended = await flow.execute(
        "note a; note b", trace=recorded / "flow.jsonl", checkpoint=recorded / "flow.ckpt"
    )
    assert ended.summary == "summary: all done" and FLOWS.done == ["a", "b"]
    async with Runs(tmp_path / "runs", agents=AGENTS) as runs:
        inspector = await serve(runs, recorded)
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"{inspector.url}api/runs") as response,
            ):
                rows = {r["kind"]: r["key"] for r in (await response.json())["runs"]}
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"{inspector.url}api/run", params={"key": rows["flow trace"]}) as response,
            ):
                assert (await response.json())["fork"]["agents"] == sorted(AGENTS)
            forks = []
            for kind in ("flow trace", "flow checkpoint"):
                status, answer = await post(inspector, "fork", {"key": rows[kind], "at": 2, "agent": "flow"})
                assert status == 200, answer
                forks.append(answer["run_id"])
            for fork in forks:
                result = await runs.result(fork, wait=True, timeout=30)
                assert result is not None and result.stop_reason == "completed"
                assert (await runs.status(fork)).task == "note a; note b"
            assert FLOWS.done == ["a", "b", "b", "b"]  # step 2 once in each fork, step 1 never again
        finally:
            await inspector.stop()


# -- in Chromium --------------------------------------------------------------------------------------


@pytest_asyncio.fixture
async def page() -> AsyncIterator[Any]:
    require_chromium()
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=DEFAULT_EXECUTABLE)
        errors: list[str] = []
        try:
            opened = await browser.new_page(viewport={"width": 1300, "height": 900})
            opened.on("pageerror", lambda error: errors.append(str(error)))
            yield opened
        finally:
            await browser.close()
        assert errors == []


async def _opened_paused(runs: Runs, inspector: Inspector, page: Any, *submitted: Any) -> str:
    """A run submitted (`submitted`: `Runs.submit`'s task and spec), paused, and its page opened."""
    run_id = await runs.submit(*submitted)
    await until(runs, run_id, "paused", timeout=12)
    await page.goto(f"{inspector.url}#/run/app%2F{run_id}")
    return run_id


async def _marked(page: Any, state: str) -> None:
    await page.locator(f'svg.machine g.state.current[data-state="{state}"]').wait_for(timeout=15_000)


async def test_the_page_follows_a_run_as_it_goes_with_its_streamed_text(
    served: tuple[Runs, Inspector], page: Any
):
    runs, inspector = served
    GATES["follow"] = gate = asyncio.Event()
    run_id = await runs.submit("add twice", AgentSpec(agent="gated", options={"gate": "follow"}))
    await page.goto(f"{inspector.url}#/run/app%2F{run_id}")
    await _marked(page, "THINKING")  # waiting for its model: the page shows where it is
    gate.set()
    await _marked(page, "THINKING")
    await page.locator("#position").filter(has_text="transition 4 of 4").wait_for()  # step 2 began
    tool_message = page.locator("#memory .message.role-tool")
    await tool_message.wait_for()
    assert "Observed output of cmd `add` executed:\n1" in await tool_message.inner_text()
    gate.set()
    await page.locator("#position").filter(has_text="transition 7 of 7").wait_for()
    gate.set()
    await _marked(page, "FINISHED")
    await page.locator("#position").filter(has_text="transition 8 of 8").wait_for()
    await page.locator("#summary").filter(has_text="final_answer").wait_for()
    result = await runs.result(run_id, wait=True, timeout=30)
    assert result is not None and result.output == "the sum is done"


async def test_a_call_is_approved_with_edited_arguments_from_the_page(
    served: tuple[Runs, Inspector], page: Any, tmp_path: Path
):
    runs, inspector = served
    run_id = await _opened_paused(runs, inspector, page, "record 7", _spec("approval", tmp_path))
    decision = page.locator('.decision[data-call="c1"]')
    await decision.wait_for()
    assert "record · c1 waits for a decision" in await decision.inner_text()
    await _marked(page, "AWAITING_APPROVAL")
    await decision.locator("textarea").fill('{"n": 8}')
    await decision.locator("button.approve").click()
    await _marked(page, "FINISHED")
    # nothing left to decide; watched from outside the page, whose CSP refuses the eval a polled
    # wait_for_function would run in it
    from playwright.async_api import expect

    await expect(page.locator("#steering")).to_be_empty(timeout=15_000)
    result = await runs.result(run_id, wait=True, timeout=30)
    assert result is not None and result.stop_reason == "terminated"
    assert (tmp_path / "approval.txt").read_text().split() == ["8"]  # run once, with the edited arguments


async def test_a_flow_s_plan_is_edited_on_the_page_and_the_new_steps_run(
    served: tuple[Runs, Inspector], page: Any
):
    runs, inspector = served
    FLOWS.done.clear()
    run_id = await _opened_paused(
        runs, inspector, page, "note a; note b", AgentSpec(agent="flow", options={"review": True})
    )
    review = page.locator("section.plan-review")
    await review.wait_for()
    assert "The plan waits for a decision" in await review.inner_text()
    steps = review.locator("textarea.plan-steps")
    assert (await steps.input_value()).splitlines() == ["[worker] note a", "[worker] note b"]
    await steps.fill("[worker] note edited\n\n")
    await review.locator("button.edit-plan").click()
    result = await runs.result(run_id, wait=True, timeout=30)
    assert result is not None and result.stop_reason == "completed"
    assert FLOWS.done == ["edited"]  # the edited plan ran, not the planned one
    await _marked(page, "DONE")  # the flow's own transitions followed, not its agent's
    await page.locator("#position").filter(has_text="transition 5 of 5").wait_for()


async def test_a_question_is_answered_through_the_form_its_schema_makes(
    served: tuple[Runs, Inspector], page: Any, tmp_path: Path
):
    runs, inspector = served
    await _opened_paused(runs, inspector, page, "who are you", _spec("asking", tmp_path))
    form = page.locator('form.question[data-call="c1"]')
    await form.wait_for()
    assert "Who are you?" in await form.inner_text()
    await form.locator('input[name="name"]').fill("Ada")
    await form.locator('input[name="age"]').fill("36")
    await form.locator("button.accept").click()
    await _marked(page, "FINISHED")
    answered = json.loads((tmp_path / "asking.txt").read_text())
    assert answered == {"token": "t1", "action": "accept", "content": {"name": "Ada", "age": 36}}


async def test_a_real_mcp_server_s_elicitation_is_answered_through_the_form_on_the_page(
    served: tuple[Runs, Inspector], page: Any
):
    """tests/mcp_elicit_server.py (stdio, started by the run's MCPAgent) asks for a name in the middle
    of its tool call: the run pauses, the page renders the question's schema as a form, and the
    answer given there reaches the server, whose tool result carries it."""
    runs, inspector = served
    run_id = await _opened_paused(
        runs, inspector, page, "greet me", AgentSpec(agent="elicit", options={"revision": "modern"})
    )
    form = page.locator('form.question[data-call="c1"]')
    await form.wait_for()
    assert "What is your name?" in await form.inner_text()
    await form.locator('input[name="name"]').fill("Ada")
    await form.locator("button.accept").click()
    await _marked(page, "FINISHED")
    result = await runs.result(run_id, wait=True, timeout=30)
    assert (
        result is not None and result.output == "Observed output of cmd `mcp_el_greet` executed:\nhello Ada"
    )


async def test_a_paused_run_is_cancelled_from_the_page(
    served: tuple[Runs, Inspector], page: Any, tmp_path: Path
):
    runs, inspector = served
    run_id = await _opened_paused(runs, inspector, page, "record 7", _spec("approval", tmp_path))
    await page.locator("button.cancel-run").click()
    await _marked(page, "ERROR")
    await page.locator("#summary").filter(has_text="cancelled").wait_for()
    assert (await runs.status(run_id)).state == "cancelled"


async def test_a_breakpoint_set_from_the_page_holds_the_run_which_steps_and_continues_from_it(
    served: tuple[Runs, Inspector], page: Any
):
    runs, inspector = served
    GATES["held"] = gate = asyncio.Event()
    run_id = await runs.submit("add twice", AgentSpec(agent="gated", options={"gate": "held"}))
    await page.goto(f"{inspector.url}#/run/app%2F{run_id}")
    await _marked(page, "THINKING")
    form = page.locator("form.add-breakpoint")
    await form.locator("#bp-kind").select_option("tool")
    await form.locator("#bp-value").fill("add")
    await form.locator("button").click()
    await page.locator(".holding ul.breakpoints li").filter(has_text="tool add").wait_for()
    assert [point.to_json() for point in runs.breakpoints(run_id)] == [{"tool": "add"}]

    gate.set()  # the model asks for add: the run is held before the call runs
    held = page.locator(".held-at")
    await held.filter(has_text="Held at tool add: THINKING -> ACTING on think_done").wait_for()
    await _marked(page, "ACTING")
    assert (await runs.status(run_id)).held is not None
    assert await page.locator("#memory .message.role-tool").count() == 0

    await page.locator("button.step").click()  # one edge: the call runs, the run waits in OBSERVING
    await held.filter(has_text="Held at step: ACTING -> OBSERVING on act_done").wait_for()
    await _marked(page, "OBSERVING")

    await page.locator(".holding ul.breakpoints li button.remove").click()
    await page.locator(".holding ul.breakpoints li").wait_for(state="detached")
    assert runs.breakpoints(run_id) == ()
    await page.locator("button.continue").click()
    await held.wait_for(state="detached")
    while (await runs.result(run_id)) is None:
        gate.set()  # the next replies: no breakpoint left, the run goes on to its end
        await asyncio.sleep(0.05)
    await _marked(page, "FINISHED")
    result = await runs.result(run_id)
    assert result is not None and result.output == "the sum is done"


async def test_a_run_is_forked_from_a_past_transition_with_a_tool_result_edited_on_the_page(
    served: tuple[Runs, Inspector], page: Any
):
    runs, inspector = served
    parent = await runs.submit("add 2 and 3", "noting", run_id="parent")
    first = await runs.result(parent, wait=True, timeout=30)
    assert first is not None and first.output == "the result was: Observed output of cmd `add` executed:\n5"
    await page.goto(f"{inspector.url}#/run/app%2Fparent/3")  # OBSERVING -> THINKING: the result in memory
    await page.locator("#position").filter(has_text="transition 4 of").wait_for()
    await page.locator("button.fork").click()
    editor = page.locator(".fork-editor")
    await editor.locator("h2").filter(has_text="Fork from transition #3 (THINKING, step 2)").wait_for()
    tool_result = editor.locator(".message.role-tool textarea.content")
    assert "executed:\n5" in await tool_result.input_value()
    await tool_result.fill("the sum is 6")
    await editor.locator("button.start-fork").click()
    await _marked(page, "FINISHED")
    await page.locator("#request a.parent").filter(has_text="parent at transition #3").wait_for()
    assert "(memory edited)" in await page.locator("#request").inner_text()
    fork_key = (await page.evaluate("location.hash")).removeprefix("#/run/app%2F").split("/")[0]
    result = await runs.result(fork_key, wait=True, timeout=30)
    assert result is not None and result.output == "the result was: the sum is 6"
    assert ASKED[-1][-1].content == "the sum is 6"  # the model was sent the edited memory
    await page.locator("#position").filter(has_text="transition 5 of 5").wait_for()  # 4 inherited, 1 own
    trace = await runs.trace(fork_key)
    assert trace is not None
    header = json.loads(trace.splitlines()[0])
    assert header["forked_from"] == {"run_id": "parent", "transition": 3, "memory_edited": True}


async def test_a_flow_s_run_is_forked_on_the_page_with_its_agent_s_memory_edited(
    served: tuple[Runs, Inspector], page: Any
):
    runs, inspector = served
    FLOWS.done.clear()
    parent = await runs.submit("note a; note b", "flow", run_id="flowpage")
    assert (await runs.result(parent, wait=True, timeout=30)) is not None and FLOWS.done == ["a", "b"]
    await page.goto(f"{inspector.url}#/run/app%2Fflowpage/2")  # EXECUTING -> EXECUTING: step 1 done
    await page.locator("#position").filter(has_text="transition 3 of").wait_for()
    await page.locator("button.fork").click()
    editor = page.locator(".fork-editor")
    await editor.locator("h2").filter(has_text="Fork from transition #2 (EXECUTING").wait_for()
    worker = editor.locator('.messages[data-agent="worker"]')
    await worker.locator("h3").filter(has_text="agent worker").wait_for()
    noted = worker.locator(".message.role-tool textarea.content").first
    assert "noted a" in await noted.input_value()
    await noted.fill("noted z")
    await editor.locator("button.start-fork").click()
    await _marked(page, "DONE")
    await page.locator("#request a.parent").filter(has_text="flowpage at transition #2").wait_for()
    fork_id = (await page.evaluate("location.hash")).removeprefix("#/run/app%2F").split("/")[0]
    result = await runs.result(fork_id, wait=True, timeout=30)
    assert result is not None and result.stop_reason == "completed" and FLOWS.done == ["a", "b", "b"]
    assert "noted z" in [m.content for m in FLOWS.asked[-2]]  # step 2's agent read the edit


@pytest.mark.usefixtures("clean_env")
async def test_a_model_call_s_retries_are_shown_from_the_run_s_events(
    served: tuple[Runs, Inspector], page: Any, llmock: Any
):
    runs, inspector = served
    llmock.rate_limit(times=2, retry_after=0.05)
    llmock.call_tool("terminate", {"status": "success"})
    options = {"api_base": llmock.base_url("openai")}
    run_id = await runs.submit("finish", AgentSpec(agent="http", options=options))
    result = await runs.result(run_id, wait=True, timeout=30)
    assert result is not None and result.ok
    assert [r.status for r in llmock.requests] == [429, 429, 200]
    await page.goto(f"{inspector.url}#/run/app%2F{run_id}")
    await page.locator("#calls summary").click()
    cell = page.locator('#calls tr[data-call="0"] td.retries')
    await cell.filter(has_text="2").wait_for()
    title = await cell.get_attribute("title")
    assert title is not None and title.splitlines()[0].startswith("attempt 1: ProviderError: HTTP 429")


async def test_a_trace_of_the_paths_is_forked_into_the_app_s_runs_by_the_agent_chosen(
    tmp_path: Path, page: Any
):
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    solo = noting_agent(AgentSpec(agent="noting"))
    assert (await solo.run("add 2 and 3", trace=recorded / "solo.jsonl")).ok
    async with Runs(tmp_path / "runs", agents=AGENTS) as runs:
        inspector = await serve(runs, recorded)
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"{inspector.url}api/runs") as response,
            ):
                (row,) = [r for r in (await response.json())["runs"] if r["kind"] == "trace"]
            await page.goto(f"{inspector.url}#/run/{row['key'].replace('/', '%2F')}/3")
            await page.locator("#position").filter(has_text="transition 4 of").wait_for()
            await page.locator("button.fork").click()
            editor = page.locator(".fork-editor")
            await (
                editor.locator("h2").filter(has_text="Fork from transition #3 (THINKING, step 2)").wait_for()
            )
            await editor.locator("select.fork-agent").select_option("noting")
            await editor.locator(".message.role-tool input.drop").check()  # the result goes, and its call
            asked = len(ASKED)
            await editor.locator("button.start-fork").click()
            await _marked(page, "FINISHED")
            fork_id = (await page.evaluate("location.hash")).removeprefix("#/run/app%2F").split("/")[0]
            result = await runs.result(fork_id, wait=True, timeout=30)
            assert result is not None and result.ok
            assert {m.role for m in ASKED[asked]} == {Role.USER}  # the call went with its result
            assert (await runs.status(fork_id)).task == "add 2 and 3"
            await page.locator("#request a.parent").wait_for()
        finally:
            await page.goto("about:blank")  # nothing of the page's left in flight
            await inspector.stop()


async def test_a_checkpoint_of_the_paths_is_forked_from_its_last_state(tmp_path: Path, page: Any):
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    solo = noting_agent(AgentSpec(agent="noting"))
    assert (await solo.run("add 2 and 3", checkpoint=recorded / "solo.ckpt")).ok
    lines = (recorded / "solo.ckpt").read_text().splitlines()
    (recorded / "solo.ckpt").write_text("\n".join(lines[:-1]) + "\n")  # as if killed before its end
    async with Runs(tmp_path / "runs", agents=AGENTS) as runs:
        inspector = await serve(runs, recorded)
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"{inspector.url}api/runs") as response,
            ):
                (row,) = [r for r in (await response.json())["runs"] if r["kind"] == "checkpoint"]
            await page.goto(f"{inspector.url}#/run/{row['key'].replace('/', '%2F')}")
            await page.locator("button.fork").click()
            editor = page.locator(".fork-editor")
            await editor.locator("h2").filter(has_text="(THINKING, step 2)").wait_for()
            await editor.locator("select.fork-agent").select_option("noting")
            await editor.locator("button.start-fork").click()
            await _marked(page, "FINISHED")
            fork_id = (await page.evaluate("location.hash")).removeprefix("#/run/app%2F").split("/")[0]
            result = await runs.result(fork_id, wait=True, timeout=30)
            assert (
                result is not None
                and result.output == "the result was: Observed output of cmd `add` executed:\n5"
            )
            trace = await runs.trace(fork_id)
            assert trace is not None and json.loads(trace.splitlines()[0])["begins_after"]["edges"] == 4
        finally:
            await page.goto("about:blank")
            await inspector.stop()


# -- agentfsm run --ui ------------------------------------------------------------------------------


@pytest.mark.usefixtures("clean_env")
async def test_agentfsm_run_ui_prints_the_page_and_waits_for_its_decision(llmock: Any, tmp_path: Path):
    import re
    import subprocess
    import sys

    llmock.call_tool("terminate", {"status": "success"})
    trace = tmp_path / "run.jsonl"
    args = ["run", "do the task", "--model", "openai/test-model", "--api-base", llmock.base_url("openai")]
    args += [
        "--api-key",
        "test-key",
        "--require-approval",
        "terminate",
        "--ui",
        "--json",
        "--trace",
        str(trace),
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "agentfsm", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stderr is not None
        line = await asyncio.wait_for(asyncio.to_thread(process.stderr.readline), 60)
        found = re.fullmatch(
            r"agentfsm: the run on the page at (http://127\.0\.0\.1:\d+/)#/run/app%2F(\w+)\n", line
        )
        assert found, line
        url, run_id = found[1], found[2]
        key = f"app/{run_id}"
        async with aiohttp.ClientSession() as session:
            for _ in range(300):  # until the run waits at its pause
                async with session.get(f"{url}api/run", params={"key": key}) as response:
                    status = (await response.json())["status"]
                if status["state"] == "paused":
                    break
                await asyncio.sleep(0.05)
            assert [c["name"] for c in status["pending_approval"]] == ["terminate"]
            body = {"key": key, "call_id": status["pending_approval"][0]["id"], "pause": status["pause"]}
            origin = {"Origin": url.rstrip("/")}
            async with session.post(f"{url}api/run/approve", json=body, headers=origin) as response:
                assert response.status == 200
        out, err = await asyncio.to_thread(process.communicate, timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    result = json.loads(out)
    assert (result["state"], result["stop_reason"]) == ("FINISHED", "terminated")
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert records[-1]["kind"] == "result" and records[-1]["result"]["stop_reason"] == "terminated"


@pytest.mark.usefixtures("clean_env")
def test_agentfsm_run_ui_refuses_a_checkpoint_in_one_line(tmp_path: Path):
    import subprocess
    import sys

    args = [
        "run",
        "do it",
        "--model",
        "openai/m",
        "--api-key",
        "k",
        "--ui",
        "--checkpoint",
        str(tmp_path / "c"),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "agentfsm", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "--ui runs the task in the inspector's own folder and shows it on the page: drop --checkpoint"
        )
    )
