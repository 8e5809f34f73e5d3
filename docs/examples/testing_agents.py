"""Testing an agent with the test models of `agentfsm.testing`: scripted replies, or a function."""

import asyncio

from agentfsm import LLMResponse, StopReason, Terminate, ToolCallAgent, tool
from agentfsm.testing import FunctionLLM, ModelRequest, ScriptedLLM, reply


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny in {city}"


async def scripted() -> None:
    llm = ScriptedLLM(
        [
            reply(tool_calls=[("get_weather", {"city": "Paris"})]),
            reply(tool_calls=[("terminate", {"status": "success"})]),
        ]
    )  # arguments may also be a raw (even malformed) JSON string
    result = await ToolCallAgent(llm=llm, tools=[get_weather, Terminate()]).run("weather?")
    assert result.stop_reason is StopReason.TERMINATED
    sent = llm.requests[1].messages  # the second request: the task, the call, and its result last
    assert sent[-1].role == "tool" and (sent[-1].content or "").endswith("Sunny in Paris")
    print("scripted:", result.stop_reason, "after", len(llm.requests), "requests")


def echo(request: ModelRequest) -> LLMResponse:
    # The step prompt follows the history as a user message, so the task is the one before it.
    return reply(f"you said {request.messages[-2].content}")


async def function() -> None:
    answer = await ToolCallAgent(llm=FunctionLLM(echo)).run("hello")
    assert answer.stop_reason is StopReason.FINAL_ANSWER
    print("function:", answer.output)


asyncio.run(scripted())
asyncio.run(function())
