"""Tools three ways: a typed function, a `Tool` subclass, and a function given the app's objects."""

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentfsm import Terminate, Tool, ToolCallAgent, ToolResult, tool
from agentfsm.testing import ScriptedLLM, reply


@tool
def word_count(text: str) -> int:
    """Count the words in `text`."""  # the description the model reads
    return len(text.split())


class Shout(Tool):
    """A tool declared by hand: a JSON schema for its parameters, an async `execute`."""

    name = "shout"
    description = "Repeat a text in capitals."
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }

    async def execute(self, text: str) -> ToolResult:
        return ToolResult(output=text.upper(), system="shouted")


@dataclass
class Shop:
    prices: dict[str, float]  # in an app: its database, a client, the user's account


@tool(deps_type=Shop)
async def price(item: str, shop: Shop) -> str:
    """The price of an item."""  # the model sees `item` only: `shop` comes with the run
    return f"{shop.prices[item]:.2f} EUR"


async def main() -> None:
    calls: list[tuple[str, dict[str, Any] | str]] = [
        ("word_count", {"text": "to be or not"}),
        ("shout", {"text": "hello"}),
        ("price", {"item": "tea"}),
        ("shout", "{not json"),  # a malformed call is an observation for the model, not a crash
    ]
    llm = ScriptedLLM([reply(tool_calls=calls), reply(tool_calls=[("terminate", {"status": "success"})])])
    agent = ToolCallAgent(llm=llm, tools=[word_count, Shout(), price, Terminate()])
    print([declared["function"]["name"] for declared in agent.tools.to_params()])  # what the model sees
    await agent.run("go", deps=Shop(prices={"tea": 3.5}))
    for message in llm.requests[1].messages:
        if message.role == "tool":
            print((message.content or "").replace("\n", " | "))


asyncio.run(main())
