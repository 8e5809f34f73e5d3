"""The inspector's data and server: recorded tables, the drawing, the run list, a run read whole,
and the server over real HTTP on 127.0.0.1 with its rules (host, token, keys, one-line problems).

The page itself, in Chromium, is `tests/test_ui_browser.py`'s.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from agentfsm import Terminate, ToolCallAgent, tool
from agentfsm.agent.table import AGENT_TABLE
from agentfsm.errors import InspectorError, TraceError
from agentfsm.fsm.drawing import edge_labels, to_svg
from agentfsm.messages import ToolCall
from agentfsm.testing import ScriptedLLM, reply
from agentfsm.ui.reader import Reader
from agentfsm.ui.reading import find_runs, redacted
from agentfsm.ui.server import Inspector, needs_token

pytestmark = pytest.mark.http


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def approved(a: int, b: int) -> int:
    """Add two integers, once a person agrees."""
    return a + b


async def record(folder: Path, steps: int = 2, *, name: str = "run", approval: bool = False) -> ToolCallAgent:
    """A run of `steps` add calls and an answer, with its trace and checkpoint in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    calls = [ToolCall.create(f"c{i}", "add", {"a": i, "b": 1}) for i in range(steps)]
    script = [reply(f"step {i}", tool_calls=[call]) for i, call in enumerate(calls)]
    script.append(reply("the sum is 2"))
    tools = [tool(add), Terminate()]
    if approval:
        tools.append(tool(needs_approval=True)(approved))
    agent = ToolCallAgent(llm=ScriptedLLM(script), tools=tools, max_steps=steps + 5)
    await agent.run("add one and one", trace=folder / f"{name}.jsonl", checkpoint=folder / f"{name}.ckpt")
    return agent


# -- the table as data, and drawn -----------------------------------------------------------------


def test_a_table_describes_itself_as_data_in_priority_order():
    described = AGENT_TABLE.describe()
    assert json.loads(json.dumps(described)) == described
    roles = {s["name"]: s["role"] for s in described["states"]}
    assert roles == {
        "IDLE": "rest",
        "THINKING": "phase",
        "ACTING": "phase",
        "OBSERVING": "phase",
        "FINISHED": "final",
        "ERROR": "final",
    }
    assert [(e["trigger"], e["source"], e["dest"], e["guard"]) for e in described["edges"]] == [
        (e.trigger, e.source, e.dest, e.guard.name if e.guard else None) for e in AGENT_TABLE.edges
    ]
    assert described["edges"][0]["effect"] == "step := 1"


async def test_a_trace_records_its_agents_own_table(tmp_path: Path):
    agent = await record(tmp_path, approval=True)
    header = json.loads((tmp_path / "run.jsonl").read_text().splitlines()[0])
    assert header["table"] == agent.table.describe()
    assert "AWAITING_APPROVAL" in {s["name"] for s in header["table"]["states"]}


def test_the_drawing_has_every_state_and_edge_named_in_columns_from_the_initial_state():
    described = AGENT_TABLE.describe()
    svg = to_svg(described)
    for state in described["states"]:
        assert f'data-state="{state["name"]}"' in svg
    assert set(re.findall(r'data-edge="(\d+)"', svg)) == {str(i) for i in range(len(described["edges"]))}
    assert 'data-state="RUNNING"' in svg  # the group, drawn around its members
    x = {
        name: float(at)
        for name, at in re.findall(r'data-state="(\w+)"><rect x="([\d.]+)"', svg)
        if name != "RUNNING"
    }
    assert x["IDLE"] < x["THINKING"] < x["ACTING"] < x["OBSERVING"] < x["FINISHED"] == x["ERROR"]
    labels = edge_labels(described)
    assert "think_done [otherwise]" in labels and "observe_done [stuck] / stuck" in labels


def test_the_drawing_escapes_names_it_did_not_choose():
    described = AGENT_TABLE.describe()
    described["states"][0]["name"] = described["initial"] = "<img src=x onerror=alert(1)>"
    for edge in described["edges"]:
        for end in ("source", "dest"):
            if edge[end] == "IDLE":
                edge[end] = described["initial"]
    svg = to_svg(described)
    assert "<img" not in svg and "&lt;img src=x onerror=alert(1)&gt;" in svg


# -- the run list ---------------------------------------------------------------------------------


async def test_the_list_holds_each_recording_under_a_folder_and_each_file_given(tmp_path: Path):
    await record(tmp_path / "runs" / "a")
    (tmp_path / "runs" / "notes.json").write_text('{"not": "a run"}\n')
    given = tmp_path / "given.txt"
    given.write_text("hello\n")
    rows = find_runs([tmp_path / "runs", given, tmp_path / "missing.jsonl"])
    assert sorted(rows) == ["0/a/run.ckpt", "0/a/run.jsonl", "1/given.txt", "2/missing.jsonl"]
    trace = rows["0/a/run.jsonl"]
    assert (trace.kind, trace.state, trace.step, trace.stop_reason, trace.problem) == (
        "trace",
        "FINISHED",
        3,
        "final_answer",
        None,
    )
    assert trace.request == "add one and one" and trace.agent == "toolcall"
    checkpoint = rows["0/a/run.ckpt"]
    assert (checkpoint.kind, checkpoint.state, checkpoint.run_id) == ("checkpoint", "FINISHED", trace.run_id)
    assert rows["1/given.txt"].problem == (
        f"{given} is no agentfsm trace or checkpoint: its first line is no recording's header"
    )
    assert rows["2/missing.jsonl"].problem == f"{tmp_path / 'missing.jsonl'} does not exist"


async def test_a_damaged_trace_is_a_row_with_one_line_saying_what_is_wrong(tmp_path: Path):
    await record(tmp_path)
    lines = (tmp_path / "run.jsonl").read_text().splitlines()
    last = json.loads(lines[-2])  # the last transition
    assert last["kind"] == "transition"
    last["step"] = "three"
    (tmp_path / "bad.jsonl").write_text("\n".join([*lines[:-2], json.dumps(last)]) + "\n")
    problem = find_runs([tmp_path / "bad.jsonl"])["0/bad.jsonl"].problem
    assert problem is not None and "\n" not in problem
    assert 'the trace is damaged: its transition record\'s step is "three"' in problem


async def test_damage_found_when_a_run_is_opened_shows_on_its_row_from_then_on(tmp_path: Path):
    await record(tmp_path)
    lines = (tmp_path / "run.jsonl").read_text().splitlines()
    middle = json.loads(lines[3])
    middle["kind"] = "nonsense"
    (tmp_path / "run.jsonl").write_text("\n".join([*lines[:3], json.dumps(middle), *lines[4:]]) + "\n")
    reader = Reader([tmp_path])
    assert next(r for r in await reader.rows() if r.key == "0/run.jsonl").problem is None
    with pytest.raises(TraceError, match='its record\'s kind is "nonsense"'):
        await reader.view("0/run.jsonl")
    row = reader._rows["0/run.jsonl"]
    assert row.problem is not None and "nonsense" in row.problem
    with pytest.raises(InspectorError, match="nonsense"):
        await reader.view("0/run.jsonl")


def test_secrets_in_a_recorded_config_never_show():
    config = {"llm": {"model": "m", "api_key": "sk-1", "headers": {"Authorization": "Bearer x"}}, "token": ""}
    assert redacted(config) == {
        "llm": {"model": "m", "api_key": "(hidden)", "headers": {"Authorization": "(hidden)"}},
        "token": "",
    }


# -- a run read whole ------------------------------------------------------------------------------


async def test_a_run_reads_as_its_transitions_each_matched_to_its_edge(tmp_path: Path):
    await record(tmp_path, steps=2)
    view = await Reader([tmp_path]).view("0/run.jsonl")
    assert view.table_source == "recorded"
    ends = [(t["trigger"], t["source"], t["dest"]) for t in view.transitions]
    assert ends == [
        ("start", "IDLE", "THINKING"),
        ("think_done", "THINKING", "ACTING"),
        ("act_done", "ACTING", "OBSERVING"),
        ("observe_done", "OBSERVING", "THINKING"),
        ("think_done", "THINKING", "ACTING"),
        ("act_done", "ACTING", "OBSERVING"),
        ("observe_done", "OBSERVING", "THINKING"),
        ("think_done", "THINKING", "FINISHED"),
    ]
    edges = view.table["edges"]
    for t in view.transitions:
        edge = edges[t["edge"]]
        assert (edge["trigger"], edge["dest"]) == (t["trigger"], t["dest"])
    assert view.transitions[-1]["guards"] == [
        {"name": "token_limit", "held": False},
        {"name": "has_tool_calls", "held": False},
        {"name": "final_answer", "held": True},
    ]
    summary = view.summary()
    assert summary["count"] == 8 and summary["states"][-1] == "FINISHED"
    assert summary["taken"][str(view.transitions[1]["edge"])] == 2  # think_done [has_tool_calls], twice
    assert summary["result"]["stop_reason"] == "final_answer"
    assert len(summary["llm_calls"]) == 3 and summary["usage"]["input_tokens"] > 0
    assert [t["index"] for t in view.page(3, 2)] == [3, 4]


async def test_the_memory_at_a_transition_is_what_the_model_had_seen_and_the_results_since(tmp_path: Path):
    await record(tmp_path, steps=2)
    view = await Reader([tmp_path]).view("0/run.jsonl")
    into_acting = view.memory_at(4)  # THINKING -> ACTING of step 2
    roles = [m["role"] for m in into_acting["messages"]]
    assert roles[-3:] == ["assistant", "tool", "assistant"]
    assert into_acting["messages"][-1]["tool_calls"][0]["id"] == "c1"
    assert into_acting["messages"][-2]["tool_call_id"] == "c0"
    assert into_acting["system"][0]["role"] == "system"
    into_observing = view.memory_at(5)  # the step's tool has run
    assert into_observing["messages"][-1]["tool_call_id"] == "c1"
    assert "Observed output of cmd `add` executed:\n2" in into_observing["messages"][-1]["content"]
    start = view.memory_at(0)  # before any model call: the request
    assert start["messages"][-1] == {"role": "user", "content": "add one and one"}
    with pytest.raises(IndexError, match="transition 8 is not in this run of 8"):
        view.memory_at(8)


async def test_a_trace_without_its_table_is_drawn_on_the_default_one_or_on_the_edges_it_took(tmp_path: Path):
    await record(tmp_path)
    lines = (tmp_path / "run.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    del header["table"]
    (tmp_path / "old.jsonl").write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    reader = Reader([tmp_path])
    assert (await reader.view("0/old.jsonl")).table_source == "default"
    records = [json.loads(line) for line in lines]
    at = [i for i, r in enumerate(records) if r["kind"] == "transition"]
    into, out = records[at[1]], records[at[2]]  # as if through a state of an extended table
    assert (into["dest"], out["source"]) == ("ACTING", "ACTING")
    into["dest"] = out["source"] = "CHECKING"
    records[0] = header
    (tmp_path / "extended.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    view = await reader.view("0/extended.jsonl")
    assert view.table_source == "taken"
    assert "CHECKING" in {s["name"] for s in view.table["states"]}
    assert all(t["edge"] is not None for t in view.transitions)


async def test_a_checkpoint_shows_the_state_it_stands_in_and_its_memory(tmp_path: Path):
    await record(tmp_path)
    view = await Reader([tmp_path]).view("0/run.ckpt")
    assert [t["dest"] for t in view.transitions] == ["FINISHED"]
    memory = view.memory_at(0)["messages"]
    assert memory[0]["content"] == "add one and one" and memory[-1]["content"] == "the sum is 2"


# -- the server ------------------------------------------------------------------------------------


@pytest_asyncio.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Inspector, str]]:
    await record(tmp_path / "runs")
    inspector = Inspector(Reader([tmp_path / "runs"]))
    url = await inspector.start()
    try:
        yield inspector, url
    finally:
        await inspector.stop()


async def get(url: str, **kwargs: Any) -> tuple[int, Any, aiohttp.ClientResponse]:
    async with aiohttp.ClientSession() as session, session.get(url, **kwargs) as response:
        text = await response.text()
        body = json.loads(text) if response.content_type == "application/json" else text
        return response.status, body, response


async def test_the_server_answers_the_page_its_assets_and_the_runs(served: tuple[Inspector, str]):
    inspector, url = served
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", url) and inspector.port > 0
    status, page, response = await get(url)
    assert status == 200 and '<script src="/static/app.js"' in page
    assert "default-src 'none'" in response.headers["Content-Security-Policy"]
    for asset in ("app.js", "style.css"):
        assert (await get(f"{url}static/{asset}"))[0] == 200
    assert (await get(f"{url}static/../reading.py"))[0] == 404
    status, runs, _ = await get(f"{url}api/runs")
    assert status == 200 and {r["key"] for r in runs["runs"]} == {"0/run.jsonl", "0/run.ckpt"}
    status, run, _ = await get(f"{url}api/run", params={"key": "0/run.jsonl"})
    assert status == 200 and run["count"] == 8 and run["svg"].startswith("<svg")
    status, page_of, _ = await get(f"{url}api/run/transitions", params={"key": "0/run.jsonl", "offset": "6"})
    assert [t["index"] for t in page_of["transitions"]] == [6, 7]
    status, memory, _ = await get(f"{url}api/run/memory", params={"key": "0/run.jsonl", "at": "5"})
    assert status == 200 and memory["messages"][-1]["role"] == "tool"


async def test_a_run_is_named_by_its_key_in_the_list_never_by_a_path(served: tuple[Inspector, str]):
    _, url = served
    for key in ("/etc/passwd", "0/../../../etc/passwd", "9/run.jsonl"):
        status, body, _ = await get(f"{url}api/run", params={"key": key})
        assert (status, body) == (404, {"problem": f"no run {key!r} among the paths given"})
    status, body, _ = await get(f"{url}api/run/memory", params={"key": "0/run.jsonl", "at": "99"})
    assert (status, body) == (404, {"problem": "transition 99 is not in this run of 8"})
    assert (await get(f"{url}api/run/memory", params={"key": "0/run.jsonl", "at": "-1"}))[0] == 400


async def test_a_damaged_run_answers_its_one_line_problem(tmp_path: Path):
    (tmp_path / "bad.jsonl").write_text('{"kind": "header", "schema": 3, "run_id": "r"}\n')
    inspector = Inspector(Reader([tmp_path / "bad.jsonl"]))
    url = await inspector.start()
    try:
        status, body, _ = await get(f"{url}api/run", params={"key": "0/bad.jsonl"})
    finally:
        await inspector.stop()
    assert status == 422 and "\n" not in body["problem"]
    assert "the trace is damaged: its header record's agent is missing" in body["problem"]


async def test_a_request_for_another_host_name_is_refused(served: tuple[Inspector, str]):
    _, url = served
    status, body, _ = await get(f"{url}api/runs", headers={"Host": f"attacker.example:{served[0].port}"})
    assert status == 421 and "this inspector serves" in body
    assert (await get(url.replace("127.0.0.1", "localhost") + "api/runs"))[0] == 200


async def test_with_a_token_every_request_carries_it(tmp_path: Path):
    await record(tmp_path)
    inspector = Inspector(Reader([tmp_path]), token="s3cret")
    url = await inspector.start()
    base = url.split("?")[0]
    try:
        assert url.endswith("/?token=s3cret")
        status, body, _ = await get(f"{base}api/runs")
        assert (status, body) == (403, "open the URL the inspector printed: it carries its token")
        assert (await get(f"{base}api/runs", params={"token": "wrong"}))[0] == 403
        assert (await get(f"{base}api/runs", headers={"X-Agentfsm-Token": "s3cret"}))[0] == 200
        # the URL's token, then its cookie alone (a jar that keeps an IP address's cookies, as browsers do)
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
            async with session.get(url) as first:
                assert first.status == 200 and "HttpOnly" in first.headers["Set-Cookie"]
            async with session.get(f"{base}api/runs") as later:
                assert later.status == 200
    finally:
        await inspector.stop()


def test_only_a_loopback_address_is_served_without_a_token():
    assert [needs_token(h) for h in ("127.0.0.1", "::1", "localhost", "127.0.0.2")] == [False] * 4
    assert [needs_token(h) for h in ("0.0.0.0", "192.0.2.7", "example.org")] == [True] * 3


async def test_a_port_taken_is_one_line_naming_the_fix(served: tuple[Inspector, str]):
    inspector, _ = served
    second = Inspector(Reader([]), port=inspector.port)
    taken = r"cannot serve the inspector at 127\.0\.0\.1:\d+: .*choose another"
    with pytest.raises(InspectorError, match=taken):
        await second.start()


# -- the command ----------------------------------------------------------------------------------


async def test_agentfsm_ui_prints_its_url_serves_and_stops_on_ctrl_c(tmp_path: Path):
    await record(tmp_path)
    process = subprocess.Popen(
        [sys.executable, "-m", "agentfsm", "ui", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), 30)
        printed = r"agentfsm ui: 1 path\(s\) at (http://127\.0\.0\.1:\d+/) \(Ctrl-C stops\)\n"
        found = re.fullmatch(printed, line)
        assert found, line
        status, runs, _ = await get(f"{found[1]}api/runs")
        assert status == 200 and len(runs["runs"]) == 2
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "Traceback" not in err


def test_agentfsm_ui_refuses_a_missing_path_in_one_line(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-m", "agentfsm", "ui", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .endswith(
            f"no such file or folder: {tmp_path / 'nope'}; give traces, checkpoints or folders holding them"
        )
    )


# -- a flow's trace ---------------------------------------------------------------------------------


async def record_flow(folder: Path) -> None:
    from agentfsm.flow import PlanningFlow

    folder.mkdir(parents=True, exist_ok=True)
    steps = ["[coder] write it", "[coder] test it"]
    plan = reply(tool_calls=[("planning", {"command": "create", "title": "Ship", "steps": steps})])
    coder = ToolCallAgent(llm=ScriptedLLM([reply("written"), reply("tested")]), name="coder")
    flow = PlanningFlow(agents={"coder": coder}, planner_llm=ScriptedLLM([plan, reply("the summary")]))
    await flow.execute("ship the feature", trace=folder / "flow.jsonl")


async def test_a_flows_trace_shows_its_plan_and_each_step_opens_as_its_agents_run(tmp_path: Path):
    await record_flow(tmp_path)
    reader = Reader([tmp_path])
    flow = await reader.view("0/flow.jsonl")
    summary = flow.summary()
    assert summary["table_source"] == "recorded"
    assert "PLANNING" in {s["name"] for s in summary["table"]["states"]}
    assert summary["states"][-1] == "DONE"
    assert summary["plan"]["title"] == "Ship"
    assert [(s["id"], s["status"], s["attempts"], s["agent"]) for s in summary["plan"]["steps"]] == [
        (1, "completed", 1, "coder"),
        (2, "completed", 1, "coder"),
    ]
    assert [(r["agent"], r["flow_step"], r["key"]) for r in summary["agent_runs"]] == [
        ("coder", 1, "~coder~1"),
        ("coder", 2, "~coder~2"),
    ]
    second = await reader.view("0/flow.jsonl~coder~2")
    assert [t["dest"] for t in second.transitions][-1] == "FINISHED"
    assert second.summary()["request"] == "test it" and second.row.agent == "coder"
    memory = second.memory_at(len(second.transitions) - 1)["messages"]
    assert memory[-1] == {"role": "assistant", "content": "tested", "tool_calls": []}
    with pytest.raises(IndexError, match="the flow ran no agent 'coder' on step 3"):
        await reader.view("0/flow.jsonl~coder~3")
    with pytest.raises(KeyError):
        await reader.view("0/flow.jsonl~coder~x")
