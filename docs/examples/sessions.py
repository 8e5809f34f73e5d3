"""A conversation kept between runs: each run goes on from the messages the runs before it left."""

import asyncio
import re

from agentfsm import LLMResponse, ToolCallAgent
from agentfsm.memory import MemorySnapshot
from agentfsm.recording.session import FileSession
from agentfsm.testing import FunctionLLM, ModelRequest, reply


def remembering(request: ModelRequest) -> LLMResponse:
    """A stand-in model that answers from the whole conversation it is sent."""
    said = " ".join(m.content or "" for m in request.messages if m.role == "user")
    name = re.search(r"my name is (\w+)", said)
    if "what is my name" in (request.messages[-1].content or "").lower():
        return reply(f"You are {name.group(1)}." if name else "You have not told me.")
    return reply("Nice to meet you.")


def new_agent() -> ToolCallAgent:
    """A fresh agent, as a new process or a new request of an app would build one."""
    return ToolCallAgent(llm=FunctionLLM(remembering), tools=[], next_step_prompt=None)


class InMemorySession:
    """An app's own store: anything with `load`, `save` and `clear` is a `Session`."""

    def __init__(self) -> None:
        self.kept: MemorySnapshot | None = None

    async def load(self) -> MemorySnapshot | None:
        return self.kept

    async def save(self, memory: MemorySnapshot) -> None:
        self.kept = memory

    async def clear(self) -> None:
        self.kept = None


async def main() -> None:
    trip = FileSession("trip.json")  # one JSON file per conversation, replaced whole at each save
    first = await new_agent().run("Hello, my name is Ada.", session=trip)
    print("1:", first.output)
    second = await new_agent().run("What is my name?", session=trip)  # another agent, same session
    print("2:", second.output)
    print("3:", (await new_agent().run("What is my name?")).output)  # no session: a new conversation

    store = InMemorySession()
    await new_agent().run("Hi, my name is Grace.", session=store)
    answer = await new_agent().run("What is my name?", session=store)
    assert store.kept is not None
    print("4:", answer.output, f"({len(store.kept.messages)} messages kept)")
    await store.clear()
    print("5:", (await new_agent().run("What is my name?", session=store)).output)


asyncio.run(main())
