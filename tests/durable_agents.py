"""The agents the durable tests' workers run, built from their `AgentSpec` as any worker builds them.

``record``: three calls of a side-effecting tool (each appends its number to the
file ``options["effects"]``, fsynced: the tool's own counter), then `terminate`;
the model is a `FunctionLLM` answering from the conversation alone, so a worker
that recovers a run answers as the one that died would have. ``record`` takes
``options["kill"]``: ``before:N`` / ``after:N`` SIGKILLs the worker inside the call
``record(n=N)``, before or after its side effect (once per run: a marker file
beside the effects file says it happened). ``approval``: one call of ``record``
that needs approval, then `terminate`. ``remote``: the `OpenAICompatible` model at
``options["api_base"]`` with the ``add`` tool (tools/fast_server.py's script). ``asking``: one call
of a tool that asks a question (the run pauses in AWAITING_INPUT), then `terminate`.
``elicit``: an `MCPAgent` over tests/mcp_elicit_server.py on stdio (``options["revision"]``:
modern or legacy), one call of its ``greet`` (the server asks a name), then `terminate`.
``human``: one call of `ask_human` (no callback: on a worker, a question the run pauses
for), then `terminate` with what it heard. ``batch``: three calls of ``mark`` in one reply, run
concurrently (`parallel_tool_calls`), then `terminate`; each call waits until the others began (so they
overlap, or time out), and takes ``kill`` as ``record`` does (``options["approval"]``: they need approval).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from agentfsm import AskHuman, Terminate, Tool, ToolCallAgent, ToolResult, tool
from agentfsm.durable import AgentSpec
from agentfsm.messages import Role, ToolCall
from agentfsm.questions import Answer, InputRequired, Question
from agentfsm.testing import FunctionLLM, ModelRequest, reply

TASK = "record 1, 2 and 3, then finish"


def script(request: ModelRequest) -> object:
    done = sum(1 for m in request.messages if m.role is Role.TOOL)
    if done == 0:
        calls = [ToolCall.create("c1", "record", {"n": 1}), ToolCall.create("c2", "record", {"n": 2})]
        return reply("recording 1 and 2", calls)
    if done == 2:
        return reply("recording 3", [ToolCall.create("c3", "record", {"n": 3})])
    return reply("done", [ToolCall.create("c4", "terminate", {"status": "success"})])


def _once(marker: Path) -> bool:
    """True the first time it is asked for `marker` (made durable before the kill)."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.fsync(fd)
    os.close(fd)
    return True


def _recorder(effects: Path, kill: str, *, needs_approval: bool = False):
    mode, _, arg = kill.partition(":")

    @tool(needs_approval=needs_approval)
    def record(n: int) -> str:
        """Append `n` to the effects file (the side effect that must not happen twice)."""
        marker = effects.with_suffix(f".killed-{n}")
        if mode == "before" and n == int(arg) and _once(marker):
            os.kill(os.getpid(), signal.SIGKILL)
        with open(effects, "a") as out:
            out.write(f"{n}\n")
            out.flush()
            os.fsync(out.fileno())
        if mode == "after" and n == int(arg) and _once(marker):
            os.kill(os.getpid(), signal.SIGKILL)
        return f"recorded {n}"

    return record


def record_agent(spec: AgentSpec) -> ToolCallAgent:
    effects = Path(spec.options["effects"])
    record = _recorder(effects, spec.options.get("kill", "none"))
    return ToolCallAgent(llm=FunctionLLM(script), tools=[record, Terminate()], name="recorder", max_steps=5)


def approval_agent(spec: AgentSpec) -> ToolCallAgent:
    def approve_script(request: ModelRequest) -> object:
        if not any(m.role is Role.TOOL for m in request.messages):
            return reply("recording 7", [ToolCall.create("c1", "record", {"n": 7})])
        return reply("done", [ToolCall.create("c2", "terminate", {"status": "success"})])

    effects = spec.options.get("effects") or os.environ["DURABLE_EFFECTS"]  # the command line sets no options
    record = _recorder(Path(effects), "none", needs_approval=True)
    return ToolCallAgent(
        llm=FunctionLLM(approve_script), tools=[record, Terminate()], name="approver", max_steps=5
    )


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


_REMOTE_MODELS: dict[str, Any] = {}
"""The remote agents' models, one a server, shared by the runs: a run's agent does not close the
model it was given, and the worker's event loop's end closes their connections."""


def remote_agent(spec: AgentSpec) -> ToolCallAgent:
    from agentfsm import OpenAICompatible

    base = spec.options["api_base"]
    llm = _REMOTE_MODELS.get(base)
    if llm is None:
        llm = _REMOTE_MODELS[base] = OpenAICompatible(
            model="openai/bench-model", api_base=base, api_key="test"
        )
    return ToolCallAgent(llm=llm, tools=[add, Terminate()], name="remote", max_steps=4)


AGENTS = {"record": record_agent, "approval": approval_agent, "remote": remote_agent}


def repeat_agent(spec: AgentSpec) -> ToolCallAgent:
    """``options["calls"]`` replies (default 2) that each call ``record`` as ``call_1`` (models reuse
    ids), needing approval unless ``options["approval"]`` is false, then `terminate`."""
    calls = int(spec.options.get("calls", 2))
    approval = bool(spec.options.get("approval", True))
    record = _recorder(Path(spec.options["effects"]), "none", needs_approval=approval)

    def repeat_script(request: ModelRequest) -> object:
        done = sum(1 for m in request.messages if m.role is Role.TOOL)
        if done < calls:
            return reply(f"recording {done + 1}", [ToolCall.create("call_1", "record", {"n": done + 1})])
        return reply("done", [ToolCall.create("call_2", "terminate", {"status": "success"})])

    tools = [record, Terminate()]
    return ToolCallAgent(llm=FunctionLLM(repeat_script), tools=tools, name="repeat", max_steps=8)


AGENTS["repeat"] = repeat_agent


def slow_agent(spec: AgentSpec) -> ToolCallAgent:
    """Calls ``record`` with the step's number, step after step (0.2 s each), until its steps run out.
    ``options["pids"]``: each call also appends its number and its process id to ``.pids`` beside.
    ``options["kill"]``: ``before:N`` / ``after:N`` as ``record`` takes it (inside the call of step N)."""

    def step_script(request: ModelRequest) -> object:
        done = sum(1 for m in request.messages if m.role is Role.TOOL)
        return reply(None, [ToolCall.create(f"c{done + 1}", "slow_record", {"n": done + 1})])

    effects = Path(spec.options["effects"])
    mode, _, arg = str(spec.options.get("kill", "none")).partition(":")

    @tool
    async def slow_record(n: int) -> str:
        """Wait a little, then append `n` to the effects file."""
        import asyncio

        await asyncio.sleep(float(spec.options.get("delay", 0.2)))
        marker = effects.with_suffix(f".killed-{n}")
        if mode == "before" and n == int(arg) and _once(marker):
            os.kill(os.getpid(), signal.SIGKILL)
        with open(effects, "a") as out:
            out.write(f"{n}\n")
            out.flush()
            os.fsync(out.fileno())
        if mode == "after" and n == int(arg) and _once(marker):
            os.kill(os.getpid(), signal.SIGKILL)
        if spec.options.get("pids"):  # which process ran the call
            with open(effects.with_suffix(".pids"), "a") as out:
                out.write(f"{n} {os.getpid()}\n")
        return f"recorded {n}"

    steps = int(spec.options.get("steps", 50))
    return ToolCallAgent(
        llm=FunctionLLM(step_script), tools=[slow_record, Terminate()], name="slow", max_steps=steps
    )


AGENTS["slow"] = slow_agent


class AskAge(Tool):
    """Asks for a name and an age, then appends what it was given to the effects file (the answer the
    tool received, as it received it)."""

    name = "ask_age"
    description = "Ask the user for their name and age."
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    asks_for_input = True
    SCHEMA: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name"],
    }

    def __init__(self, effects: Path) -> None:
        super().__init__()
        self.effects = effects

    async def execute(self, **kwargs: Any) -> ToolResult:
        question = Question(key="person", message="Who are you?", schema=self.SCHEMA)
        return ToolResult(input_required=InputRequired(questions=(question,), token="t1"))

    async def resume(self, asked: InputRequired, answers: Mapping[str, Answer], **kwargs: Any) -> Any:
        given = answers["person"]
        with open(self.effects, "a") as out:
            out.write(json.dumps({"token": asked.token, **given.model_dump(mode="json")}) + "\n")
            out.flush()
            os.fsync(out.fileno())
        if given.action != "accept":
            return ToolResult(error=f"no answer ({given.action})")
        return f"hello {given.content}"


def asking_agent(spec: AgentSpec) -> ToolCallAgent:
    """One call of ``ask_age`` (a question the run pauses for), then `terminate` with what it heard."""

    def ask_script(request: ModelRequest) -> object:
        heard = [m.content or "" for m in request.messages if m.role is Role.TOOL]
        if not heard:
            return reply("asking", [ToolCall.create("c1", "ask_age", {})])
        return reply(heard[-1], [ToolCall.create("c2", "terminate", {"status": "success"})])

    effects = spec.options.get("effects") or os.environ["DURABLE_EFFECTS"]  # the command line sets no options
    return ToolCallAgent(
        llm=FunctionLLM(ask_script), tools=[AskAge(Path(effects)), Terminate()], name="asker", max_steps=5
    )


AGENTS["asking"] = asking_agent


def human_agent(spec: AgentSpec) -> ToolCallAgent:
    """One call of `ask_human`, then `terminate` with the observation it got."""

    def human_script(request: ModelRequest) -> object:
        heard = [m.content or "" for m in request.messages if m.role is Role.TOOL]
        if not heard:
            return reply("asking", [ToolCall.create("c1", "ask_human", {"inquire": "Which colour?"})])
        return reply(heard[-1], [ToolCall.create("c2", "terminate", {"status": "success"})])

    return ToolCallAgent(
        llm=FunctionLLM(human_script), tools=[AskHuman(), Terminate()], name="human", max_steps=5
    )


AGENTS["human"] = human_agent


def elicit_agent(spec: AgentSpec) -> ToolCallAgent:
    """One call of the elicit server's ``greet`` (its question pauses the run), then `terminate`."""
    import sys

    from agentfsm.agent.mcp import MCPAgent
    from agentfsm.mcp import MCPServerSettings

    def greet_script(request: ModelRequest) -> object:
        heard = [m.content or "" for m in request.messages if m.role is Role.TOOL]
        if not heard:
            return reply("greeting", [ToolCall.create("c1", "mcp_el_greet", {})])
        return reply(heard[-1], [ToolCall.create("c2", "terminate", {"status": "success"})])

    server = Path(__file__).with_name("mcp_elicit_server.py")
    revision = str(spec.options.get("revision", "modern"))
    settings = MCPServerSettings(command=sys.executable, args=(str(server), revision, "stdio"), timeout=10)
    return MCPAgent(llm=FunctionLLM(greet_script), servers={"el": settings}, name="elicit", max_steps=5)


AGENTS["elicit"] = elicit_agent


BATCH_TASK = "mark 1, 2 and 3 at once, then finish"


def batch_agent(spec: AgentSpec) -> ToolCallAgent:
    """``mark(n)`` three times in one reply, run concurrently. Each call waits until ``together`` calls
    (default 3) are inside ``mark``, then waits ``delays[n - 1]`` seconds, appends n (and its start and end
    times, to ``.times`` beside) to the effects file, and returns. ``kill`` as ``record`` takes it;
    ``hang``: a marker file; the reply after the calls waits for good the first time it is asked for;
    ``second``: the tool the second call calls instead (``ask_age``, its answer appended to ``.asked``
    beside the effects file; ``terminate``, so the third is not run)."""
    import asyncio
    import time

    options = spec.options
    second = options.get("second", "mark")

    async def batch_script(request: ModelRequest) -> object:
        if not any(m.role is Role.TOOL for m in request.messages):
            calls = [ToolCall.create(f"p{n}", "mark", {"n": n}) for n in (1, 2, 3)]
            if second == "ask_age":
                calls[1] = ToolCall.create("p2", "ask_age", {})
            elif second == "terminate":
                calls[1] = ToolCall.create("p2", "terminate", {"status": "success"})
            return reply("marking 1, 2 and 3", calls)
        if options.get("hang") and _once(Path(options["hang"])):  # the first time: wait for good
            await asyncio.sleep(3600)
        return reply("done", [ToolCall.create("p4", "terminate", {"status": "success"})])

    effects = Path(options.get("effects") or os.environ["DURABLE_EFFECTS"])
    mode, _, arg = str(options.get("kill", "none")).partition(":")
    delays = [float(d) for d in options.get("delays", (0, 0, 0))]
    together = int(options.get("together", 3))
    inside: list[int] = []
    everyone = asyncio.Event()

    @tool(needs_approval=bool(options.get("approval")))
    async def mark(n: int) -> str:
        """Mark `n` (the side effect that must not happen twice), once the other calls began too."""
        began = time.time()
        inside.append(n)
        if len(inside) >= together:
            everyone.set()
        await asyncio.wait_for(everyone.wait(), 10)  # a call run alone times out: the calls must overlap
        await asyncio.sleep(delays[n - 1])
        if mode == "before" and n == int(arg) and _once(effects.with_suffix(f".killed-{n}")):
            os.kill(os.getpid(), signal.SIGKILL)
        with open(effects, "a") as out:
            out.write(f"{n}\n")
            out.flush()
            os.fsync(out.fileno())
        with open(effects.with_suffix(".times"), "a") as out:
            out.write(f"{n} {began} {time.time()}\n")
        if mode == "after" and n == int(arg) and _once(effects.with_suffix(f".killed-{n}")):
            os.kill(os.getpid(), signal.SIGKILL)
        return f"marked {n}"

    tools: list[Tool] = [mark, Terminate()]
    if second == "ask_age":
        tools.append(AskAge(effects.with_suffix(".asked")))
    return ToolCallAgent(
        llm=FunctionLLM(batch_script),
        tools=tools,
        name="batcher",
        max_steps=4,
        parallel_tool_calls=True,
    )


AGENTS["batch"] = batch_agent
