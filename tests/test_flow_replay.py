"""A flow's trace replayed offline: the planner and the agents answered from the recorded replies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentfsm import ToolCallAgent, tool
from agentfsm.agent.replay import TraceReplayer
from agentfsm.cli import commands as cli_main
from agentfsm.errors import ReplayError
from agentfsm.flow import PlanningFlow
from agentfsm.flow.replay import FlowReplayer, replay_flow
from agentfsm.testing import ScriptedLLM, reply

pytestmark = pytest.mark.usefixtures("clean_env")

FAIL = reply(tool_calls=[("no_such_tool", {})])


def create(*steps: str) -> object:
    return reply(tool_calls=[("planning", {"command": "create", "title": "T", "steps": list(steps)})])


def update(*steps: str) -> object:
    return reply(tool_calls=[("planning", {"command": "update", "steps": list(steps)})])


def counting_tool() -> tuple[object, list[int]]:
    ran: list[int] = []

    @tool
    def record(n: int) -> str:
        """Records `n`."""
        ran.append(n)
        return f"recorded {n}"

    return record, ran


async def traced_flow(path: Path) -> tuple[object, list[int]]:
    """Two agents, a tool call, a step that hits max_steps twice, a replan: traced to `path`."""
    record, ran = counting_tool()
    planner = ScriptedLLM(
        [create("[coder] record", "[coder] hard"), update("[writer] other way"), reply("summary")]
    )
    coder = ToolCallAgent(
        llm=ScriptedLLM([reply("recording", [("record", {"n": 4})]), reply("recorded four"), FAIL, FAIL]),  # type: ignore[list-item]
        tools=[record],  # type: ignore[list-item]
        name="coder",
        max_steps=2,
    )
    writer = ToolCallAgent(llm=ScriptedLLM([reply("other way done")]), name="writer")  # type: ignore[list-item]
    flow = PlanningFlow(agents={"coder": coder, "writer": writer}, planner_llm=planner)
    result = await flow.execute("task", trace=path)
    return result, ran


async def test_a_flow_trace_replays_to_the_same_plan_outcomes_and_summary(tmp_path: Path) -> None:
    path = tmp_path / "flow.jsonl"
    recorded, ran = await traced_flow(path)
    assert recorded.replans == 1 and ran == [4]  # type: ignore[attr-defined]

    replayed = await replay_flow(path)

    assert replayed.result is not None and ran == [4]  # nothing ran again
    mine, theirs = replayed.result.model_dump(mode="json"), recorded.model_dump(mode="json")  # type: ignore[attr-defined]
    for key in ("stop_reason", "summary", "replans", "plan"):
        assert mine[key] == theirs[key]
    assert [(r["step_id"], r["agent"], r["result"]["stop_reason"]) for r in mine["runs"]] == [
        (r["step_id"], r["agent"], r["result"]["stop_reason"]) for r in theirs["runs"]
    ]
    assert [(t.source, t.dest) for t in replayed.transitions][-2:] == [
        ("EXECUTING", "FINALIZING"),
        ("FINALIZING", "DONE"),
    ]


async def test_a_flow_replays_through_the_agents_replay_path_edge_by_edge(tmp_path: Path) -> None:
    """One replay path: a flow's replayer is the agent's `TraceReplayer` with a flow's hooks, so it
    steps as an agent's does (`transitions()`, each edge checked as it is taken), and its edges are
    the recorded ones, the agents' checked beside them."""
    path = tmp_path / "flow.jsonl"
    await traced_flow(path)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    recorded = [(r["source"], r["dest"]) for r in records if r["kind"] == "transition" and "agent" not in r]

    replayer = FlowReplayer(path)
    assert isinstance(replayer, TraceReplayer) and replayer.model is replayer.flow
    seen = []
    async for transition in replayer.transitions():
        seen.append((transition.source, transition.dest))
        assert replayer.edges.replayed == len(seen)  # checked as it came
    assert seen == recorded and replayer.ended_early is None
    assert {name: edges.replayed for name, edges in replayer.agent_edges.items()} == {
        name: len(edges.recorded) for name, edges in replayer.agent_edges.items()
    }


async def test_a_replay_that_diverges_says_where_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "flow.jsonl"
    await traced_flow(path)
    lines = path.read_text().splitlines()
    # the coder's tool result recorded otherwise: the coder's next request is not the recorded one
    changed = []
    for line in lines:
        record = json.loads(line)
        if record.get("agent") == "coder" and record["kind"] == "tool":
            record["observation"] = "recorded five"
        changed.append(json.dumps(record))
    path.write_text("\n".join(changed) + "\n")
    with pytest.raises(ReplayError) as diverged:
        await replay_flow(path)
    assert str(diverged.value) == "coder: llm call 2 (step 2): the request's messages differ from the trace's"

    # a recorded planner request that differs from the one the replay builds
    changed = []
    for line in lines:
        record = json.loads(line)
        if record["kind"] == "llm" and "agent" not in record and record["request"]["tool_choice"] == "none":
            record["request"]["tool_choice"] = "auto"
        changed.append(json.dumps(record))
    path.write_text("\n".join(changed) + "\n")
    with pytest.raises(ReplayError, match=r"planner: llm call 3 .*tool_choice differ"):
        await replay_flow(path)


async def test_a_flow_paused_for_approval_and_resumed_with_its_trace_replays_as_one_run(
    tmp_path: Path,
) -> None:
    path = tmp_path / "flow.jsonl"
    record, ran = counting_tool()
    planner = ScriptedLLM([create("[coder] record"), reply("summary")])
    coder = ToolCallAgent(
        llm=ScriptedLLM([reply("recording", [("record", {"n": 1})]), reply("recorded")]),  # type: ignore[list-item]
        tools=[record],  # type: ignore[list-item]
        name="coder",
        require_approval=["record"],
    )
    flow = PlanningFlow(agents={"coder": coder}, planner_llm=planner)
    assert (await flow.execute("task", trace=path)).paused
    flow.approve(arguments={"n": 2})
    result = await flow.resume(trace=path)
    assert result.ok and ran == [2]

    replayed = await replay_flow(path)
    assert replayed.result is not None and replayed.result.ok and ran == [2]
    assert replayed.result.plan == result.plan
    assert ("EXECUTING", "AWAITING_AGENT") in [(t.source, t.dest) for t in replayed.transitions]


async def test_a_reviewed_and_edited_plan_replays_with_the_recorded_decision(tmp_path: Path) -> None:
    path = tmp_path / "flow.jsonl"
    planner = ScriptedLLM([create("[coder] planned"), reply("summary")])
    coder = ToolCallAgent(llm=ScriptedLLM([reply("edited done")]), name="coder")  # type: ignore[list-item]
    flow = PlanningFlow(agents={"coder": coder}, planner_llm=planner, review=True)
    assert (await flow.execute("task", trace=path)).paused
    flow.edit_plan(["[coder] edited"])
    result = await flow.resume(trace=path)
    assert result.ok

    replayed = await replay_flow(path)
    assert replayed.result is not None and replayed.result.plan == result.plan
    assert [s.text for s in replayed.result.plan.steps] == ["edited"]  # type: ignore[union-attr]


def test_agentfsm_replay_replays_a_flow_trace(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    import asyncio

    path = tmp_path / "flow.jsonl"
    recorded, _ = asyncio.run(traced_flow(path))
    assert cli_main.main(["replay", str(path)]) == 0
    out, err = capfd.readouterr()
    assert "REPLANNING" in out and "1. [✓] [coder] record" in out
    assert out.rstrip().splitlines()[-1] == "summary"  # the flow's answer ends stdout
    assert err.rstrip().splitlines()[-1] == "FINISHED  stop_reason=completed  replans=1"
    assert cli_main.main(["replay", str(path), "--json"]) == 0
    result = json.loads(capfd.readouterr().out)
    assert result["summary"] == recorded.summary == "summary"  # type: ignore[attr-defined]
    assert cli_main.main(["replay", str(path), "--step"]) == 2
    assert "--step replays an agent's: drop --step" in capfd.readouterr().err


@pytest.mark.parametrize("who", ["flow", "agent"])
async def test_approvals_by_the_flow_s_or_the_agent_s_approver_replay(tmp_path: Path, who: str) -> None:
    from collections.abc import Sequence

    from agentfsm.agent.approval import Decision
    from agentfsm.messages import ToolCall

    async def approver(calls: Sequence[ToolCall]) -> list[Decision]:
        return [Decision.reject("no") for _ in calls]

    path = tmp_path / "flow.jsonl"
    record, ran = counting_tool()
    coder = ToolCallAgent(
        llm=ScriptedLLM([reply("recording", [("record", {"n": 1})]), reply("it was refused")]),  # type: ignore[list-item]
        tools=[record],  # type: ignore[list-item]
        name="coder",
        require_approval=["record"],
        approver=approver if who == "agent" else None,
    )
    planner = ScriptedLLM([create("[coder] record"), reply("summary")])
    flow = PlanningFlow(
        agents={"coder": coder}, planner_llm=planner, approver=approver if who == "flow" else None
    )
    result = await flow.execute("task", trace=path)
    assert result.ok and ran == []

    replayed = await replay_flow(path)
    assert replayed.result is not None and replayed.result.plan == result.plan
    waited = ("EXECUTING", "AWAITING_AGENT") in [(t.source, t.dest) for t in replayed.transitions]
    assert waited is (who == "flow")
