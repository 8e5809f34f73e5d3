"""The system tools in a sandbox: a file in, a snippet and a shell command run there, a file out.

This example uses `mode="local"` so that it runs anywhere; `mode="docker"` runs the same code in
a hardened container (it needs a Docker engine and the sandbox image).
"""

import asyncio

from agentfsm import Bash, PythonExecute, Terminate, ToolCallAgent
from agentfsm.run.events import AgentEvent, ToolCallCompleted
from agentfsm.sandbox import SandboxSession, SandboxSettings
from agentfsm.testing import ScriptedLLM, reply

SQUARES = """
numbers = open("numbers.txt").read().split()
open("squares.txt", "w").write(" ".join(str(int(n) ** 2) for n in numbers))
print(len(numbers), "numbers squared")
"""


def show(event: AgentEvent) -> None:
    if isinstance(event, ToolCallCompleted):
        print(f"[{event.observation.call.name}] {event.observation.content.splitlines()[-1]}")


async def main() -> None:
    # One sandbox for the agent's tools, made by the first call that needs it.
    session = SandboxSession(SandboxSettings(mode="local", timeout=30))
    llm = ScriptedLLM(
        [
            reply(tool_calls=[("python_execute", {"code": SQUARES})]),
            reply(tool_calls=[("bash", {"command": "wc -w < squares.txt"})]),
            reply("Done.", tool_calls=[("terminate", {"status": "success"})]),
        ]
    )
    agent = ToolCallAgent(llm=llm, tools=[PythonExecute(session), Bash(session), Terminate()])
    agent.on_event(show)

    sandbox = await session.get()  # made now, so the input file can go in before the run
    await sandbox.write_file("numbers.txt", b"1 2 3 4")
    result = await agent.run("square the numbers in numbers.txt")
    print(result.stop_reason, "-", result.output)
    print("squares.txt:", (await sandbox.read_file("squares.txt")).decode())

    await session.close()  # the sandbox and everything in it: its processes, its temporary workspace


asyncio.run(main())
