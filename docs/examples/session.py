"""A conversation kept in a session: a new agent, as a new process would build, goes on from it."""

import asyncio

from agentfsm import LLMResponse, ToolCallAgent
from agentfsm.recording.session import FileSession
from agentfsm.testing import FunctionLLM, ModelRequest, reply


def model(request: ModelRequest) -> LLMResponse:
    """Answers with the name it was told earlier in the conversation, if any."""
    told = [m.content for m in request.messages if m.role == "user" and "my name is" in str(m.content)]
    return reply(f"You are {str(told[0]).rsplit(' ', 1)[-1]}." if told else "I don't know your name.")


async def main() -> None:
    session = FileSession("trip.json")  # the app's own store implements `Session` (load, save, clear)
    first = ToolCallAgent(llm=FunctionLLM(model))
    await first.run("my name is Ada", session=session)
    second = ToolCallAgent(llm=FunctionLLM(model))  # a new agent: its memory comes from the session
    print((await second.run("what is my name?", session=session)).output)
    print((await ToolCallAgent(llm=FunctionLLM(model)).run("what is my name?")).output)  # no session


asyncio.run(main())
