"""The same task for every framework: `n_calls` calls of `add`, then a final answer.

Each runner is ``async run(task) -> str`` built once by a factory; the fake
models are each framework's own in-process test model, deciding by the
number of tool results so far, so no framework pays for a script it
does not need. A factory returns None when its framework is not installed.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

Runner = Callable[[str], Awaitable[Any]]
SYSTEM = "You are an agent that can execute tool calls"


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


# -- the floor: a hand-written loop with the same message bookkeeping -------------


def bare(n_calls: int) -> Runner:
    tools = {"add": add}
    calls = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": "add", "arguments": json.dumps({"a": i, "b": 1})},
                }
            ],
        }
        for i in range(n_calls)
    ]
    answer = {"role": "assistant", "content": "done"}

    async def model(messages: list[dict[str, Any]]) -> dict[str, Any]:
        done = 0
        for message in reversed(messages):
            if message["role"] == "user":
                break
            done += message["role"] == "tool"
        return calls[done] if done < n_calls else answer

    async def run(task: str) -> str:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": task},
        ]
        for _ in range(30):
            reply = await model(messages)
            messages.append(reply)
            if not reply.get("tool_calls"):
                return str(reply["content"])
            for call in reply["tool_calls"]:
                fn = call["function"]
                result = tools[fn["name"]](**json.loads(fn["arguments"]))
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": str(result)})
        return "max steps"

    return run


# -- agentfsm ----------------------------------------------------------------------


def agentfsm_model(n_calls: int, final: str = "answer") -> Any:
    """A FunctionLLM with the task's policy; `final="terminate"` ends with the terminate tool.

    Like the bare loop's model, it picks from replies built once (with their call ids).
    """
    from agentfsm.messages import Role, ToolCall
    from agentfsm.testing import FunctionLLM, ModelRequest, reply

    calls = [
        reply(tool_calls=[ToolCall.create(f"call_{i}", "add", {"a": i, "b": 1})]) for i in range(n_calls)
    ]
    answer = (
        reply("done")
        if final == "answer"
        else reply(tool_calls=[ToolCall.create("call_end", "terminate", {"status": "success"})])
    )

    user, tool = Role.USER, Role.TOOL  # read once, as the bare loop's role strings are constants

    def decide(request: ModelRequest) -> Any:
        done = 0
        for message in reversed(request.messages):
            role = message.role
            if role is user:
                break
            done += role is tool
        return calls[done] if done < n_calls else answer

    return FunctionLLM(decide, record=False)


def agentfsm(n_calls: int) -> Runner:
    from agentfsm import Terminate, ToolCallAgent, ToolCollection, tool

    tools = ToolCollection(tool(add), Terminate())
    llm = agentfsm_model(n_calls)

    async def run(task: str) -> Any:
        agent = ToolCallAgent(llm=llm, tools=tools, next_step_prompt=None)
        return (await agent.run(task)).output

    return run


def agentfsm_reused(n_calls: int) -> Runner:
    """One agent for every run, as LangGraph's graph and pydantic-ai's `Agent` are reused:
    each run starts from `reset(clear_memory=True)` (a logged edge back to IDLE, memory emptied)."""
    from agentfsm import Terminate, ToolCallAgent, ToolCollection, tool

    agent = ToolCallAgent(
        llm=agentfsm_model(n_calls), tools=ToolCollection(tool(add), Terminate()), next_step_prompt=None
    )

    async def run(task: str) -> Any:
        agent.reset(clear_memory=True)
        return (await agent.run(task)).output

    return run


def guarantees_alone(n_calls: int) -> Runner:
    """The other floor: what a `ToolCallAgent` run does for the task, fused into one loop.

    The same model, tools, typed messages, memory (pairing checks, the pinned
    request), argument parsing and validation, `Observation`s, call records,
    usage, stuck detection, a state, a duration and a logger check per edge, and a
    `RunResult`: everything but the machine, the phases as awaited methods and the
    engine around them (listeners, edits, pauses, checkpoints, approvals). A measurement,
    not an engine: `agentfsm` minus this is what the engine costs around the work.
    """
    import hashlib
    import logging
    import os
    import time

    from agentfsm import Memory, Message, RunResult, Terminate, ToolCollection, tool
    from agentfsm.agent.turn import AgentRunState, Turn
    from agentfsm.run.result import AgentState, StopReason
    from agentfsm.run.state import Observation, RunState

    model = agentfsm_model(n_calls)
    tools = ToolCollection(tool(add), Terminate())
    memory = Memory()
    system = (Message.system_message(SYSTEM),)
    log_enabled = logging.getLogger("agentfsm").isEnabledFor
    entered = [0.0]

    def edge(run: RunState, dest: str) -> None:
        now = time.perf_counter()
        run.state, duration, entered[0] = dest, now - entered[0], now
        if log_enabled(logging.INFO):
            logging.getLogger("agentfsm").info("transition to %s in %.6f s", dest, duration)

    async def run(task: str) -> Any:
        memory.clear()
        state = AgentRunState()
        edge(state, "IDLE")
        state.run_id, state.request, state.step = os.urandom(6).hex(), task, 1
        memory.add_request(Message.user_message(task))
        edge(state, "THINKING")
        while True:
            state.turn = turn = Turn()
            reply = await model.ask_tool(memory.view(), system_msgs=system, tools=tools.to_params())
            turn.reply = reply
            state.usage.add(reply.usage)
            if reply.content:
                state.output = reply.content
            if not reply.tool_calls:
                memory.add_message(Message.assistant_message(reply.content))
                edge(state, "FINISHED")
                state.stop_reason = StopReason.FINAL_ANSWER
                break
            memory.add_message(Message.from_tool_calls(reply.tool_calls, reply.content))
            turn.pending_calls = list(reply.tool_calls)
            edge(state, "ACTING")
            for call in turn.pending_calls:
                started = time.perf_counter()
                turn.started_calls.append(call.id)
                try:
                    arguments = json.loads(call.arguments)
                    result = await tools.get(call.name)(**arguments)  # type: ignore[misc]
                    content, is_error = f"Observed output of cmd `{call.name}` executed:\n{result}", False
                except Exception as exc:
                    content, is_error = f"Error: {exc}", True
                observation = Observation(
                    call=call, content=content, is_error=is_error, duration_s=time.perf_counter() - started
                )
                turn.completed_calls[call.id] = observation
                turn.observations.append(observation)
            state.usage.tool_calls += len(turn.observations)
            edge(state, "OBSERVING")
            memory.add_messages(
                [
                    Message.tool_message(o.content, name=o.call.name, tool_call_id=o.call.id)
                    for o in turn.observations
                ]
            )
            parts = [reply.content or ""] + [f"{c.name}\x00{c.arguments}" for c in reply.tool_calls]
            signature = hashlib.blake2b("\x01".join(parts).encode(), digest_size=12).hexdigest()
            seen = state.seen[signature] = state.seen.get(signature, 0) + 1
            state.stuck_streak = state.stuck_streak + 1 if seen > 2 else 0
            if state.step >= 30 or state.stuck_streak >= 3:
                edge(state, "FINISHED")
                break
            state.step += 1
            edge(state, "THINKING")
        result = RunResult(
            run_id=state.run_id,
            state=AgentState.FINISHED,
            stop_reason=state.stop_reason or StopReason.MAX_STEPS,
            steps=state.step,
            output=state.output,
            usage=state.usage,
        )
        return result.output

    return run


def engine_alone(n_calls: int) -> Runner:
    """The floor of any agent on agentfsm: its engine and machine, with phases that only set
    what the guards read. The same model turns and transitions as `agentfsm` (a new agent per
    run, five transitions for one call), without messages, memory, a model or tools."""
    from agentfsm import BaseAgent, LLMResponse, ToolCall

    calls = [
        [ToolCall(id=f"call_{i}", name="add", arguments=json.dumps({"a": i, "b": 1}))] for i in range(n_calls)
    ]
    answer = LLMResponse(content="done")

    class EmptyPhases(BaseAgent):
        async def think(self) -> None:
            run = self.run_state
            if run.step <= n_calls:
                run.turn.pending_calls = calls[run.step - 1]
            else:
                run.turn.pending_calls, run.turn.reply, run.output = [], answer, "done"

        async def act(self) -> None:
            self.run_state.turn.observations = []

        async def observe(self) -> None:
            pass

    async def run(task: str) -> Any:
        return (await EmptyPhases(max_steps=30).run(task)).output

    return run


# -- LangGraph's prebuilt ReAct agent ----------------------------------------------------


def langgraph(n_calls: int) -> Runner | None:
    try:
        from langchain_core.language_models.chat_models import BaseChatModel
        from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
        from langchain_core.outputs import ChatGeneration, ChatResult
        from langchain_core.tools import tool as lc_tool
        from langgraph.prebuilt import create_react_agent
    except ImportError:
        return None

    class FakeToolModel(BaseChatModel):
        calls: int = 1

        @property
        def _llm_type(self) -> str:
            return "fake-tool-model"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            done = 0
            for message in reversed(messages):
                if isinstance(message, HumanMessage):
                    break
                done += isinstance(message, ToolMessage)
            if done < self.calls:
                message = AIMessage(
                    content="",
                    tool_calls=[
                        {
                            "name": "add",
                            "args": {"a": done, "b": 1},
                            "id": f"call_{done}",
                            "type": "tool_call",
                        }
                    ],
                )
            else:
                message = AIMessage(content="done")
            return ChatResult(generations=[ChatGeneration(message=message)])

        async def _agenerate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            return self._generate(messages, stop)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = create_react_agent(FakeToolModel(calls=n_calls), tools=[lc_tool(add)], prompt=SYSTEM)

    async def run(task: str) -> Any:
        return await graph.ainvoke({"messages": [("user", task)]})

    return run


# -- pydantic-ai's Agent with its FunctionModel -----------------------------------------------


def pydantic_ai(n_calls: int) -> Runner | None:
    try:
        from pydantic_ai import Agent
        from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
        from pydantic_ai.models.function import AgentInfo, FunctionModel
    except ImportError:
        return None

    def decide(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(isinstance(part, ToolReturnPart) for m in messages for part in m.parts)
        if done < n_calls:
            return ModelResponse(
                parts=[ToolCallPart("add", {"a": done, "b": 1}, tool_call_id=f"call_{done}")]
            )
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(decide), tools=[add], system_prompt=SYSTEM)

    async def run(task: str) -> Any:
        return (await agent.run(task)).output

    return run


FRAMEWORKS: dict[str, Callable[[int], Runner | None]] = {
    "bare loop": bare,
    "agentfsm": agentfsm,
    "agentfsm, one agent": agentfsm_reused,
    "agentfsm engine alone": engine_alone,
    "guarantees, no engine": guarantees_alone,
    "langgraph": langgraph,
    "pydantic-ai": pydantic_ai,
}
