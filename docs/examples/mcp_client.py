"""An MCP server's tools as the agent's: a stdio server started by the agent, one of whose tools asks
the person a question mid-call (elicitation), which pauses the run until it is answered."""

import asyncio
import sys
from pathlib import Path

from agentfsm import MCPAgent
from agentfsm.mcp import MCPServerSettings
from agentfsm.testing import ScriptedLLM, reply

# A small server, built with the MCP SDK: `price` answers at once, `order` asks how many first.
SERVER = '''
from typing import Annotated

from mcp.server.mcpserver import Elicit, ElicitationResult, MCPServer, Resolve
from pydantic import BaseModel

PRICES = {"tea": 3.5, "coffee": 4.0}
server = MCPServer("shop", log_level="WARNING")


class Quantity(BaseModel):
    count: int


def how_many() -> Elicit[Quantity]:
    return Elicit("How many packs of tea?", Quantity)


@server.tool()
def price(item: str) -> str:
    """The price of an item, in euros."""
    return f"{PRICES[item]:.2f} EUR"


@server.tool()
def order(item: str, quantity: Annotated[ElicitationResult[Quantity], Resolve(how_many)]) -> str:
    """Order an item; the shop asks the buyer how many."""
    if quantity.action != "accept":
        return f"no order ({quantity.action})"
    return f"ordered {quantity.data.count} x {item}: {quantity.data.count * PRICES[item]:.2f} EUR"


server.run()
'''


async def main() -> None:
    Path("shop_server.py").write_text(SERVER)
    llm = ScriptedLLM(
        [
            reply(tool_calls=[("mcp_shop_price", {"item": "tea"})]),
            reply(tool_calls=[("mcp_shop_order", {"item": "tea"})]),
            reply("Ordered.", tool_calls=[("terminate", {"status": "success"})]),
        ]
    )
    shop = MCPServerSettings(command=sys.executable, args=("shop_server.py",))  # stdio: the agent starts it
    async with MCPAgent(llm=llm, servers={"shop": shop}) as agent:
        result = await agent.run("buy tea")
        print("the model was offered:", llm.requests[0].tool_names)
        while result.paused:  # stop_reason "awaiting_input": the server asked a question
            for call, question in result.pending_input:
                print(f"{call.name} asks {question.message!r}, fields {list(question.schema['properties'])}")
                agent.answer(call.id, {"count": 2}, key=question.key)
            result = await agent.resume()
        for message in agent.memory.messages:
            if message.role == "tool":
                print(f"{message.name}: {(message.content or '').splitlines()[-1]}")
        print(result.stop_reason, "-", result.output)


asyncio.run(main())
