"""`mcp-serve` asks the client the questions its agent's tools ask (AWAITING_INPUT), as it asks
approvals: on 2026-07-28 the call answers ``input_required`` with one elicitation per question and
the retry resumes the run with the answers; on the handshake revisions the server sends
``elicitation/create`` mid-call. Before, a run paused for input came back to the client as a
paused RunResult that nothing could resume, its agent closed under it.

In process (the SDK's `Client` on the server's `Server`): what is checked is the server's side."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError
from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult

from agentfsm import RunResult, Terminate, Tool, ToolCallAgent, ToolResult
from agentfsm.mcp.serve import AgentServer
from agentfsm.questions import InputRequired, Question
from agentfsm.run.result import AgentState, StopReason
from agentfsm.testing import ScriptedLLM, reply

NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
MESSAGE = "What is your name?"


class Greeter(Tool):
    """Asks for the user's name, then greets them (or says why not)."""

    name = "greet"
    description = "Greet the user, whose name it asks for."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    asks_for_input = True

    async def execute(self, **kwargs: Any) -> ToolResult:
        question = Question(key="name", message=MESSAGE, schema=NAME)
        return ToolResult(input_required=InputRequired(questions=(question,)))

    async def resume(self, asked: InputRequired, answers: Any, **kwargs: Any) -> Any:
        given = answers["name"]
        if given.action != "accept":
            return ToolResult(error=f"the user would not say ({given.action})")
        return f"hi, {given.content['name']}"


class Agents:
    """The server's factory: agents that call `greet`, then terminate; each one kept, to look at."""

    def __init__(self) -> None:
        self.built: list[ToolCallAgent] = []

    def __call__(self, name: str, max_steps: int | None) -> ToolCallAgent:
        script = ScriptedLLM(
            [reply(tool_calls=[("greet", {})]), reply(tool_calls=[("terminate", {"status": "success"})])]
        )
        agent = ToolCallAgent(llm=script, tools=[Greeter(), Terminate()])
        self.built.append(agent)
        return agent

    def observation(self) -> str:
        """What the model read of `greet` (without the observation's heading line)."""
        (agent,) = self.built
        content = next(m.content for m in agent.memory.messages if m.name == "greet")
        assert content is not None
        return content.removeprefix("Observed output of cmd `greet` executed:\n")


def _server(agents: Agents, pause_timeout: float = 600.0) -> AgentServer:
    return AgentServer(agents, agents=["toolcall"], default_agent="toolcall", pause_timeout=pause_timeout)


def _answering(answer: ElicitResult, asked: list[Any]) -> Any:
    async def callback(context: Any, params: Any) -> ElicitResult:
        asked.append(params)
        return answer

    return callback


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_tool_s_question_is_asked_of_the_client_and_its_answer_goes_back_to_the_tool(
    mode: str,
) -> None:
    agents, asked = Agents(), list[Any]()
    server = _server(agents)
    callback = _answering(ElicitResult(action="accept", content={"name": "Ada"}), asked)
    async with Client(server.server, mode=mode, elicitation_callback=callback) as client:  # type: ignore[arg-type]
        result = await client.call_tool("run_agent", {"task": "greet me"})
    await server.aclose()
    assert not result.is_error and result.structured_content is not None
    assert (result.structured_content["state"], result.structured_content["stop_reason"]) == (
        "FINISHED",
        "terminated",
    )
    (params,) = asked
    assert isinstance(params, ElicitRequestFormParams)
    assert params.message == MESSAGE and params.requested_schema == NAME
    assert agents.observation() == "hi, Ada"


async def test_on_2026_07_28_the_pause_answers_input_required_keyed_by_call_and_question() -> None:
    agents = Agents()
    server = _server(agents)
    async with Client(
        server.server, elicitation_callback=_answering(ElicitResult(action="decline"), [])
    ) as client:
        session = client.session
        paused = await session.call_tool("run_agent", {"task": "greet me"}, allow_input_required=True)
        assert isinstance(paused, InputRequiredResult) and paused.request_state
        ((key, request),) = paused.input_requests.items()
        (agent,) = agents.built
        (call,) = agent.run_state.turn.pending_calls
        assert key == f"{call.id}/name" and agent.fsm_state == "AWAITING_INPUT"
        assert isinstance(request, ElicitRequest) and request.params.message == MESSAGE
        done = await session.call_tool(
            "run_agent",
            {"task": "greet me"},
            input_responses={key: ElicitResult(action="accept", content={"name": "Grace"})},
            request_state=paused.request_state,
        )
        assert not done.is_error and done.structured_content["stop_reason"] == "terminated"
    await server.aclose()
    assert agents.observation() == "hi, Grace"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_a_declined_or_cancelled_question_reaches_the_tool_as_such(mode: str, action: str) -> None:
    agents = Agents()
    server = _server(agents)
    callback = _answering(ElicitResult(action=action), [])  # type: ignore[arg-type]
    async with Client(server.server, mode=mode, elicitation_callback=callback) as client:  # type: ignore[arg-type]
        result = await client.call_tool("run_agent", {"task": "greet me"})
    await server.aclose()
    assert result.structured_content["stop_reason"] == "terminated"
    assert agents.observation() == f"Error: the user would not say ({action})"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_client_without_elicitation_gets_the_question_cancelled_and_the_run_goes_on(
    mode: str,
) -> None:
    agents = Agents()
    server = _server(agents)
    async with Client(server.server, mode=mode) as client:  # type: ignore[arg-type]
        result = await client.call_tool("run_agent", {"task": "greet me"})
    await server.aclose()
    assert result.structured_content["stop_reason"] == "terminated"
    assert agents.observation() == "Error: the user would not say (cancel)"


async def test_on_2025_a_question_never_answered_cancels_the_run_at_the_timeout() -> None:
    agents = Agents()
    server = _server(agents, pause_timeout=0.3)
    never = asyncio.Event()

    async def silent(context: Any, params: Any) -> ElicitResult:
        await never.wait()
        raise AssertionError("unreachable")

    async with Client(server.server, mode="legacy", elicitation_callback=silent) as client:
        result = await asyncio.wait_for(client.call_tool("run_agent", {"task": "greet me"}), 5)
    await server.aclose()
    assert result.is_error and result.structured_content["stop_reason"] == "cancelled"


async def test_on_2026_07_28_a_question_never_answered_ends_at_the_timeout_with_no_other_call() -> None:
    agents = Agents()
    server = _server(agents, pause_timeout=0.2)
    async with Client(
        server.server, elicitation_callback=_answering(ElicitResult(action="decline"), [])
    ) as client:
        paused = await client.session.call_tool("run_agent", {"task": "t"}, allow_input_required=True)
        assert isinstance(paused, InputRequiredResult)
        await asyncio.sleep(0.5)
        (agent,) = agents.built
        assert agent.last_result is not None and agent.last_result.stop_reason == "cancelled"
        with pytest.raises(MCPError, match="Invalid or expired requestState"):
            await client.session.call_tool("run_agent", {"task": "t"}, request_state=paused.request_state)
    await server.aclose()


class _PausedForNothing:
    """A served agent whose run pauses with nothing to ask (a pause of its own): no retry could
    answer it, so the call must not leave the client a paused run to wait on."""

    approver: Any = None
    input_handler: Any = None
    pending_approval: ClassVar[list[Any]] = []
    pending_input: ClassVar[list[Any]] = []

    def __init__(self) -> None:
        self.cancelled = 0

    async def run(self, request: str) -> RunResult:
        return RunResult(run_id="r", state=AgentState.RUNNING, stop_reason=StopReason.AWAITING_INPUT, steps=1)

    async def resume(self) -> RunResult:
        raise AssertionError("nothing to resume with")

    async def cancel(self) -> RunResult:
        self.cancelled += 1
        return RunResult(
            run_id="r", state=AgentState.ERROR, stop_reason=StopReason.CANCELLED, steps=1, error="cancelled"
        )

    def approve(self, call_id: str | None = None) -> object:
        raise AssertionError("nothing to approve")

    def reject(self, call_id: str | None = None, reason: str | None = None) -> object:
        raise AssertionError("nothing to reject")

    def answer(self, call_id: str, content: Any = None, *, action: Any = "accept", key: Any = None) -> object:
        raise AssertionError("nothing to answer")


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_run_paused_with_nothing_to_ask_is_cancelled_not_returned_paused(mode: str) -> None:
    agent = _PausedForNothing()
    server = AgentServer(lambda name, steps: agent, agents=["toolcall"], default_agent="toolcall")
    async with Client(server.server, mode=mode) as client:  # type: ignore[arg-type]
        result = await client.call_tool("run_agent", {"task": "t"})
    await server.aclose()
    assert result.is_error and result.structured_content["stop_reason"] == "cancelled"
    assert agent.cancelled == 1
