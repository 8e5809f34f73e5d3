"""A structured answer: the run's output is a validated pydantic model, given by the `final_result` tool."""

import asyncio

from pydantic import BaseModel

from agentfsm import ToolCallAgent
from agentfsm.testing import ScriptedLLM, reply


class City(BaseModel):
    name: str
    country: str
    population: int


async def main() -> None:
    paris = {"name": "Paris", "country": "France", "population": 2100000}
    llm = ScriptedLLM(
        [
            # the first try lacks a field: the problem comes back to the model as the call's observation
            reply(tool_calls=[("final_result", {"name": "Paris", "country": "France"})]),
            reply(tool_calls=[("final_result", paris)]),
        ]
    )
    agent = ToolCallAgent(llm=llm, output_type=City)
    result = await agent.run("Which is the largest city of France?")
    print(repr(result.parsed))  # the validated instance
    print(result.output)  # its JSON
    print(
        str(llm.requests[1].messages[-1].content).splitlines()[-1]
    )  # what the model was told of its first try


asyncio.run(main())
