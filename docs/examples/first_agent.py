"""A first agent: one tool of your own and `terminate`, on a scripted model (no key, no network)."""

import asyncio

from agentfsm import Terminate, ToolCallAgent, tool
from agentfsm.testing import ScriptedLLM, reply


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny in {city}"


# The model's replies, in order: call the tool, then end the run. With a real model, pass
# `llm=LLM("openai/gpt-4o-mini")` (or `OpenAICompatible(...)`) instead.
llm = ScriptedLLM(
    [
        reply(tool_calls=[("get_weather", {"city": "Paris"})]),
        reply("It is sunny in Paris.", tool_calls=[("terminate", {"status": "success"})]),
    ]
)


async def main() -> None:
    agent = ToolCallAgent(llm=llm, tools=[get_weather, Terminate()], max_steps=10)
    result = await agent.run("What's the weather in Paris?")
    print(result.state)  # AgentState.FINISHED or AgentState.ERROR
    print(result.stop_reason)  # which edge ended the run
    print(result.output)  # the final text
    print(result.usage.llm_calls, "model calls,", result.usage.tool_calls, "tool calls")


asyncio.run(main())
