"""Input: a tool call that asks a person something pauses in AWAITING_INPUT; answer, resume, replay.

The tools here are local ones that ask (no MCP): the agent layer's side, which MCP tools
use the same way (tests/test_mcp_elicitation.py).
"""

from __future__ import annotations

import gc
import json
from dataclasses import replace
from typing import Any, ClassVar

import pytest
from conftest import assert_pairs_complete

from agentfsm import AgentState, RunResult, StopReason, Terminate, Tool, ToolCallAgent, ToolResult, tool
from agentfsm.agent.awaiting_input import AWAITING_INPUT, with_input
from agentfsm.agent.replay import replay
from agentfsm.agent.table import AGENT_TABLE
from agentfsm.errors import KeyNotFoundError, WrongPhaseError, WrongValueError
from agentfsm.fsm.diagram import to_mermaid
from agentfsm.messages import ToolCall
from agentfsm.questions import Answer, InputRequired, Question
from agentfsm.recording.checkpoint import read_checkpoint
from agentfsm.run.events import Edit
from agentfsm.testing import ScriptedLLM, reply

TERMINATE = reply(tool_calls=[("terminate", {"status": "success"})])
GREET_AND_LOOK = reply("greeting", [("look", {"path": "a"}), ("greet", {"formal": True})])
NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


class Greeter(Tool):
    """Asks for the user's name (`rounds` times in a row), then greets them."""

    name = "greet"
    description = "Greet the user, whose name it asks for."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {"formal": {"type": "boolean"}}}
    asks_for_input = True

    def __init__(self, rounds: int = 1) -> None:
        super().__init__()
        self.rounds = rounds
        self.asked: list[str] = []
        self.abandoned: list[str] = []

    def _ask(self, round_: int) -> InputRequired:
        self.asked.append(f"round {round_}")
        question = Question(key=f"name{round_}", message=f"What is your name? ({round_})", schema=NAME)
        return InputRequired(questions=(question,), token=str(round_))

    async def execute(self, **kwargs: Any) -> ToolResult:
        return ToolResult(input_required=self._ask(1))

    async def resume(self, asked: InputRequired, answers: Any, **kwargs: Any) -> Any:
        round_ = int(asked.token)
        (given,) = answers.values()
        if given.action != "accept":
            return ToolResult(error=f"the user would not say ({given.action})")
        if round_ < self.rounds:
            return ToolResult(input_required=self._ask(round_ + 1))
        prefix = "Good day" if kwargs.get("formal") else "hi"
        return f"{prefix}, {given.content['name']}"

    def abandon(self, asked: InputRequired) -> None:
        self.abandoned.append(asked.token)


class Looker:
    def __init__(self) -> None:
        self.looked: list[str] = []

        @tool
        def look(path: str) -> str:
            """Read-only, runs once."""
            self.looked.append(path)
            return f"{path} exists"

        self.tool = look


def build(
    *script: Any, greeter: Greeter | None = None, **options: Any
) -> tuple[ToolCallAgent, Greeter, Looker]:
    greeter = greeter or Greeter()
    looker = Looker()
    agent = ToolCallAgent(llm=ScriptedLLM(list(script)), tools=[looker.tool, greeter, Terminate()], **options)
    return agent, greeter, looker


def edges(transitions: Any) -> list[tuple[str, str]]:
    return [(t.source, t.dest) for t in transitions]


def tool_texts(agent: ToolCallAgent) -> list[str]:
    return [m.content or "" for m in agent.memory.messages if m.role == "tool"]


def test_the_state_is_added_for_tools_that_may_ask():
    plain = ToolCallAgent(llm=ScriptedLLM([]))
    assert plain.table is AGENT_TABLE and AWAITING_INPUT.name not in plain.table.by_name
    agent, _, _ = build()
    assert agent.table is with_input(AGENT_TABLE)  # built once, shared
    assert agent.table.groups["RUNNING"] == ("THINKING", "ACTING", "OBSERVING", "AWAITING_INPUT")
    act_done = [
        (e.dest, e.guard.name if e.guard else None) for e in agent.table.edges if e.trigger == "act_done"
    ]
    assert act_done == [("AWAITING_INPUT", "needs_input"), ("OBSERVING", None)]
    mermaid = to_mermaid(agent.table)
    assert "ACTING --> AWAITING_INPUT: act_done [needs_input]" in mermaid
    assert "AWAITING_INPUT --> ACTING: answered" in mermaid
    assert agent.trace_config()["awaiting_input"] is True and "awaiting_input" not in plain.trace_config()


async def test_a_tool_that_asks_added_after_the_agent_was_made_pauses_the_run_too():
    """The table follows the tools at a run's start: nothing else needs to re-check it."""
    agent = ToolCallAgent(llm=ScriptedLLM([GREET_AND_LOOK, TERMINATE]), tools=[Looker().tool, Terminate()])
    assert AWAITING_INPUT.name not in agent.table.by_name
    agent.tools.add(Greeter())
    paused = await agent.run("greet me")
    assert paused.paused and paused.stop_reason is StopReason.AWAITING_INPUT
    assert agent.table is with_input(AGENT_TABLE) and agent.fsm_state == "AWAITING_INPUT"
    ((call, _),) = paused.pending_input
    assert call.name == "greet"


async def test_a_question_pauses_the_run_after_the_other_calls_and_an_answer_resumes_it():
    agent, _, looker = build(GREET_AND_LOOK, TERMINATE)
    seen: list[Any] = []
    agent.on_transition(seen.append)
    paused = await agent.run("greet me")
    assert paused.paused and paused.stop_reason is StopReason.AWAITING_INPUT
    assert agent.state is AgentState.RUNNING and agent.fsm_state == "AWAITING_INPUT"
    assert edges(seen)[-2:] == [("THINKING", "ACTING"), ("ACTING", "AWAITING_INPUT")]
    ((call, question),) = paused.pending_input
    assert (call.name, question.key, question.message, question.schema) == (
        "greet", "name1", "What is your name? (1)", NAME
    )  # fmt: skip
    assert paused.pending_input == tuple(agent.pending_input)
    assert RunResult.model_validate(paused.model_dump(mode="json")) == paused  # as `--json` prints it
    assert looker.looked == ["a"]  # the sibling ran before the pause
    with pytest.raises(KeyNotFoundError, match="no call 'nope' waits for input"):
        agent.answer("nope", {"name": "Ada"})
    edit = agent.answer(call.id, {"name": "Ada"})
    assert (edit.kind, edit.before, edit.after) == ("answer", "name1", Answer.accept({"name": "Ada"}))
    with pytest.raises(WrongValueError, match="has 0 unanswered questions"):
        agent.answer(call.id, {"name": "Bob"})
    result = await agent.resume()
    assert result.stop_reason is StopReason.TERMINATED and result.state is AgentState.FINISHED
    assert edges(seen)[2:6] == [
        ("ACTING", "AWAITING_INPUT"), ("AWAITING_INPUT", "ACTING"), ("ACTING", "OBSERVING"),
        ("OBSERVING", "THINKING"),
    ]  # fmt: skip
    assert looker.looked == ["a"]  # kept its observation: not run again
    assert tool_texts(agent)[:2] == [
        "Observed output of cmd `look` executed:\na exists",
        "Observed output of cmd `greet` executed:\nGood day, Ada",
    ]
    assert result.usage.tool_calls == 3  # look, greet (once, however many rounds), terminate
    assert_pairs_complete(agent.memory.messages)


async def test_answers_are_refused_outside_the_pause():
    agent, _, _ = build(TERMINATE)
    with pytest.raises(WrongPhaseError, match="questions are answered only in AWAITING_INPUT"):
        agent.answer("call_1", {"name": "Ada"})


async def test_an_input_handler_answers_inline_without_a_pause():
    asked: list[tuple[str, str]] = []

    async def handler(call: ToolCall, question: Question) -> Answer:
        asked.append((call.name, question.key))
        return Answer.accept({"name": f"Ada{len(asked)}"})

    agent, _, _ = build(GREET_AND_LOOK, TERMINATE, greeter=Greeter(rounds=2), input_handler=handler)
    events: list[Any] = []
    agent.on_event(events.append)
    result = await agent.run("greet me")
    assert result.stop_reason is StopReason.TERMINATED
    assert asked == [("greet", "name1"), ("greet", "name2")]  # two rounds of one call
    assert "Good day, Ada2" in tool_texts(agent)[1]
    answers = [(e.before, e.after) for e in events if isinstance(e, Edit)]
    assert answers == [("name1", Answer.accept({"name": "Ada1"})), ("name2", Answer.accept({"name": "Ada2"}))]


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_a_declined_or_cancelled_question_reaches_the_model_as_the_tools_observation(action):
    agent, _, _ = build(GREET_AND_LOOK, TERMINATE)
    paused = await agent.run("greet me")
    ((call, _),) = paused.pending_input
    with pytest.raises(WrongValueError, match="carries no content"):
        agent.answer(call.id, {"name": "x"}, action=action)
    agent.answer(call.id, action=action)
    result = await agent.resume()
    assert result.ok
    assert tool_texts(agent)[1] == f"Error: the user would not say ({action})"


async def test_past_max_input_rounds_the_call_is_an_error_naming_the_cap():
    async def handler(call: ToolCall, question: Question) -> Answer:
        return Answer.accept({"name": "Ada"})

    greeter = Greeter(rounds=5)
    agent, _, _ = build(GREET_AND_LOOK, TERMINATE, greeter=greeter, input_handler=handler, max_input_rounds=2)
    result = await agent.run("greet me")
    assert result.ok and greeter.asked == ["round 1", "round 2", "round 3"]
    assert tool_texts(agent)[1] == (
        "Error: `greet` asked for input 3 times in one call, more than the agent's `max_input_rounds` (2) "
        "allows; it was stopped. Raise `max_input_rounds` to allow more."
    )
    assert greeter.abandoned == ["3"]  # what the tool held for the third round is let go


async def test_cancelling_a_paused_run_lets_the_tool_go_and_closes_the_calls():
    agent, greeter, _ = build(GREET_AND_LOOK)
    await agent.run("greet me")
    result = await agent.cancel()
    assert result.stop_reason is StopReason.CANCELLED and greeter.abandoned == ["1"]
    assert_pairs_complete(agent.memory.messages)
    texts = tool_texts(agent)
    assert texts[0].endswith("a exists") and texts[1].startswith("Error: the run ended")


async def test_a_run_with_answered_questions_is_one_trace_that_replays(tmp_path, capsys):
    path = tmp_path / "run.jsonl"
    agent, greeter, looker = build(GREET_AND_LOOK, TERMINATE, greeter=Greeter(rounds=2))
    seen: list[Any] = []
    agent.on_transition(seen.append)
    paused = await agent.run("greet me", trace=path)
    at_pause = path.read_text()
    agent.answer(paused.pending_input[0][0].id, {"name": "Ada"})
    second = await agent.resume(trace=path)
    assert second.paused and second.pending_input[0][1].key == "name2"
    agent.answer(second.pending_input[0][0].id, {"name": "Grace"})
    result = await agent.resume(trace=path)
    assert result.ok and "Good day, Grace" in tool_texts(agent)[1]
    records = [json.loads(line) for line in path.read_text().splitlines()]
    answers = [(r["edit"], r["before"], r["after"]["content"]) for r in records if r["kind"] == "edit"]
    assert answers == [("answer", "name1", {"name": "Ada"}), ("answer", "name2", {"name": "Grace"})]
    asks = [r["input_required"]["questions"][0]["key"] for r in records if r.get("input_required")]
    assert asks == ["name1", "name2"]
    replayed = await replay(path)
    assert edges(replayed.transitions) == edges(seen)
    assert replayed.result is not None
    assert replace(replayed.result, run_id="") == replace(result, run_id="")
    assert looker.looked == ["a"] and greeter.asked == ["round 1", "round 2"]  # replay ran nothing
    from agentfsm.cli.commands import main

    assert main(["diagram", "--trace", str(path)]) == 0  # drawn over the machine with the state
    assert "ACTING --> AWAITING_INPUT: act_done [needs_input] (2×)" in capsys.readouterr().out
    cut = tmp_path / "paused.jsonl"
    cut.write_text(at_pause)
    replayed = await replay(cut)  # the trace as it was at the pause replays to the same pause
    assert replayed.result is not None and replayed.result.paused
    assert replace(replayed.result, run_id="") == replace(paused, run_id="")


async def test_a_paused_question_survives_a_restart_through_its_checkpoint(tmp_path):
    path = tmp_path / "run.json"
    first, greeter, looker = build(GREET_AND_LOOK)
    await first.run("greet me", checkpoint=path)
    state = read_checkpoint(path)["run_state"]
    assert state["state"] == "AWAITING_INPUT" and list(state["turn"]["input_requests"]) == ["call_2"]
    assert state["turn"]["started_calls"] == ["call_1"]  # the asking call may run again, with the answers
    del first
    gc.collect()
    second = ToolCallAgent(llm=ScriptedLLM([TERMINATE]), tools=[looker.tool, greeter, Terminate()])
    result = await second.resume(path)
    assert result.paused and [(c.id, q.key) for c, q in result.pending_input] == [("call_2", "name1")]
    second.answer("call_2", {"name": "Ada"})
    await second.flush_listeners()
    assert read_checkpoint(path)["run_state"]["turn"]["answers"] == {
        "call_2": {"name1": {"action": "accept", "content": {"name": "Ada"}}}
    }
    result = await second.resume()
    assert result.stop_reason is StopReason.TERMINATED and looker.looked == ["a"]
    assert "Good day, Ada" in tool_texts(second)[1]


async def test_resuming_with_a_question_unanswered_is_refused_naming_it() -> None:
    """A resume that would only pause again says what is missing instead (the approvals' rule too)."""
    greeter = Greeter()
    agent = ToolCallAgent(llm=ScriptedLLM([reply("asking", [("greet", {})]), reply("done")]), tools=[greeter])
    assert (await agent.run("greet me")).paused
    with pytest.raises(WrongPhaseError, match=r"waits in AWAITING_INPUT for answers to 'name1' of greet"):
        await agent.resume()
    (call, question) = agent.pending_input[0]
    agent.answer(call.id, {"name": "Ada"}, key=question.key)
    assert (await agent.resume()).ok
