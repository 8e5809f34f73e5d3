"""The API people reach for first: `run_sync()` and `resume_sync()`, `async with`,
`RunResult.exception`, typed tool dependencies (`deps=`)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentfsm import (
    AgentState,
    OpenAICompatible,
    StopReason,
    Terminate,
    Tool,
    ToolCallAgent,
    tool,
)
from agentfsm.errors import AgentBusyError, LLMError, RunningLoopError, ToolSetupError, WrongTypeError
from agentfsm.testing import FunctionLLM, ScriptedLLM, reply
from agentfsm.toolbox.call_context import current_call

DONE = reply(tool_calls=[("terminate", {"status": "success"})])


# -- run_sync ------------------------------------------------------------------------


def test_run_sync_runs_a_script_and_keeps_the_conversation() -> None:
    llm = ScriptedLLM([reply("first answer"), reply("second answer")])
    agent = ToolCallAgent(llm=llm)

    first = agent.run_sync("hello")
    second = agent.run_sync("and again")

    assert (first.state, first.stop_reason, first.output) == (
        AgentState.FINISHED,
        StopReason.FINAL_ANSWER,
        "first answer",
    )
    assert second.output == "second answer"
    sent = [m.content for m in llm.requests[1].messages]
    assert sent[:3] == ["hello", "first answer", "and again"]  # memory carried over


async def test_run_sync_inside_a_running_loop_says_to_await_run() -> None:
    agent = ToolCallAgent(llm=ScriptedLLM([DONE]))

    with pytest.raises(RunningLoopError, match=r"inside a running event loop; use `await agent.run\(...\)`"):
        agent.run_sync("hello")

    assert agent.state is AgentState.IDLE  # nothing started
    assert (await agent.run("hello")).stop_reason is StopReason.TERMINATED


@pytest.mark.http
@pytest.mark.parametrize("adapter", ["litellm", "native"])
def test_run_sync_twice_over_http_each_on_its_own_loop(llmock: Any, adapter: str) -> None:
    """Each call makes and ends an event loop; the model's connections of the first must not
    break the second (aiohttp sessions, litellm's clients)."""
    from agentfsm import LLM

    cls = LLM if adapter == "litellm" else OpenAICompatible
    llmock.reply("one")
    llmock.reply("two")
    agent = ToolCallAgent(
        llm=cls("openai/llmock-test-model", api_base=llmock.base_url("openai"), api_key="k")
    )

    results = [agent.run_sync("first"), agent.run_sync("second")]

    assert [(r.stop_reason, r.output) for r in results] == [
        (StopReason.FINAL_ANSWER, "one"),
        (StopReason.FINAL_ANSWER, "two"),
    ]
    assert len(llmock.requests) == 2


# -- async with ----------------------------------------------------------------------


@dataclass
class ClosingModel:
    """A scripted model that counts how often it was closed."""

    script: ScriptedLLM
    closed: int = 0
    token_budget: int | None = None

    async def ask_tool(self, messages: Any, **kwargs: Any) -> Any:
        return await self.script.ask_tool(messages, **kwargs)

    async def aclose(self) -> None:
        self.closed += 1


async def test_every_agent_is_an_async_context_manager_that_leaves_the_model_it_was_given_open() -> None:
    """Whoever makes a model closes it: the agent did not make it, and other agents may be using it."""
    llm = ClosingModel(ScriptedLLM([DONE, DONE]))

    async with ToolCallAgent(llm=llm) as agent:
        assert isinstance(agent, ToolCallAgent)
        result = await agent.run("go")
    async with ToolCallAgent(llm=llm) as other:
        again = await other.run("go")

    assert llm.closed == 0
    assert result.stop_reason is StopReason.TERMINATED and again.stop_reason is StopReason.TERMINATED


async def test_the_native_adapters_session_is_closed_by_its_maker_not_by_the_agent(llmock: Any) -> None:
    llmock.reply("hi")
    llm = OpenAICompatible("openai/llmock-test-model", api_base=llmock.base_url("openai"), api_key="k")

    async with ToolCallAgent(llm=llm) as agent:
        await agent.run("hello")
        session = llm._pools[asyncio.get_running_loop()].session

    assert not session.closed
    await llm.aclose()
    assert session.closed
    assert asyncio.get_running_loop() not in llm._pools


async def test_thirty_runs_sharing_one_native_model_each_in_async_with_all_answer() -> None:
    """One `OpenAICompatible` shared by 30 concurrent runs, each agent in ``async with``, on a
    server whose replies end at different times: every run answers (an agent closing the model
    on its way out cut the others' requests: 22 of 30 ended in `Session is closed`)."""
    from staggered_model_server import StaggeredModel

    server = StaggeredModel(step=0.02)
    base = await server.start()
    llm = OpenAICompatible("openai/staggered", api_base=base, api_key="k")

    async def one(number: int) -> Any:
        async with ToolCallAgent(llm=llm, max_steps=4) as agent:
            return await agent.run(f"task {number}")

    try:
        results = await asyncio.gather(*(one(n) for n in range(30)))
    finally:
        await llm.aclose()
        await server.stop()
    assert [r.error for r in results if r.error] == []
    assert [r.output for r in results] == [f"answer {n}" for n in range(30)]
    assert sorted(server.served) == sorted(list(range(30)) * 2)


class ClosingAgent(ToolCallAgent):
    """A tool-calling agent that counts how often it was closed."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1


async def test_async_with_closes_even_when_the_block_raises() -> None:
    agent = ClosingAgent(llm=ScriptedLLM([]))

    with pytest.raises(KeyError):
        async with agent:
            raise KeyError("app")

    assert agent.closed == 1


# -- RunResult.exception ---------------------------------------------------------------


async def test_the_exception_that_ended_the_run_is_on_the_result_and_off_its_json() -> None:
    boom = LLMError("the provider is down for good")
    result = await ToolCallAgent(llm=ScriptedLLM([boom])).run("hello")

    assert result.state is AgentState.ERROR
    assert result.exception is boom
    assert result.error == "LLMError: the provider is down for good"
    dumped = result.model_dump(mode="json")
    assert "exception" not in dumped and dumped["error"] == result.error
    assert "exception" not in json.loads(result.model_dump_json())
    assert type(result).model_validate_json(result.model_dump_json()).exception is None


async def test_a_listener_failure_and_a_cancellation_are_the_results_exception() -> None:
    agent = ToolCallAgent(llm=ScriptedLLM([DONE]))
    problem = OSError("disk full")

    def broken(_: object) -> None:
        raise problem

    unsubscribe = agent.on_event(broken)
    result = await agent.run("go")
    unsubscribe()
    assert (result.state, result.exception) == (AgentState.ERROR, problem)

    slow = ToolCallAgent(llm=ScriptedLLM([reply(tool_calls=[("wait", {})])]), tools=[waits, Terminate()])
    task = asyncio.create_task(slow.run("go"))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert slow.last_result is not None
    assert slow.last_result.stop_reason is StopReason.CANCELLED
    assert isinstance(slow.last_result.exception, asyncio.CancelledError)


async def test_no_exception_on_a_run_that_ended_well_or_by_the_machines_verdict() -> None:
    assert (await ToolCallAgent(llm=ScriptedLLM([DONE])).run("go")).exception is None
    required = ToolCallAgent(llm=ScriptedLLM([reply("no"), reply("still no")]), tool_choice="required")
    result = await required.run("go")
    assert (result.error, result.exception) == ("Tool calls required but none provided", None)


@tool(name="wait")
async def waits() -> str:
    """Wait a long time."""
    await asyncio.sleep(30)
    return "waited"


# -- typed tool dependencies -------------------------------------------------------------


@dataclass
class Shop:
    """What the app hands the tools of a run: never shown to the model."""

    prices: dict[str, float]
    asked: list[str] = field(default_factory=list)


@tool(deps_type=Shop)
async def price(item: str, shop: Shop, currency: str = "EUR") -> str:
    """The price of `item`."""
    shop.asked.append(item)
    return f"{shop.prices[item]} {currency}"


async def test_a_dependency_parameter_is_filled_in_and_never_in_the_schema() -> None:
    assert price.parameters == {
        "additionalProperties": False,
        "properties": {"item": {"type": "string"}, "currency": {"default": "EUR", "type": "string"}},
        "required": ["item"],
        "type": "object",
    }
    shop = Shop({"tea": 3.5})
    llm = ScriptedLLM([reply(tool_calls=[("price", {"item": "tea"})]), DONE])
    agent = ToolCallAgent(llm=llm, tools=[price, Terminate()])

    result = await agent.run("what does tea cost?", deps=shop)

    assert result.stop_reason is StopReason.TERMINATED
    assert shop.asked == ["tea"]
    assert llm.requests[1].messages[-1].content == "Observed output of cmd `price` executed:\n3.5 EUR"
    sent = next(t for t in llm.requests[0].tools if t["function"]["name"] == "price")
    assert "shop" not in json.dumps(sent)
    assert agent.deps is shop


async def test_a_model_that_names_the_dependency_is_refused_like_any_unknown_argument() -> None:
    shop = Shop({"tea": 3.5})
    llm = ScriptedLLM([reply(tool_calls=[("price", {"item": "tea", "shop": {"prices": {}}})]), DONE])

    await ToolCallAgent(llm=llm, tools=[price, Terminate()]).run("go", deps=shop)

    observation = llm.requests[1].messages[-1].content
    assert observation.startswith("Error: Invalid arguments for price: shop: Extra inputs are not permitted")
    assert shop.asked == []


async def test_a_run_without_the_tools_dependencies_is_refused_before_it_starts() -> None:
    llm = ScriptedLLM([DONE])
    agent = ToolCallAgent(llm=llm, tools=[price, Terminate()])

    with pytest.raises(WrongTypeError, match=r"tool 'price' takes the run's dependencies, a Shop; got None"):
        await agent.run("go")
    with pytest.raises(WrongTypeError, match=r"got 'shop': pass `deps=` a Shop"):
        agent.iter("go", deps="shop")

    assert (agent.state, llm.requests) == (AgentState.IDLE, [])


async def test_a_tool_class_reads_the_runs_dependencies_from_its_call() -> None:
    class Stock(Tool):
        name = "stock"
        deps_type = Shop

        async def execute(self, **kwargs: Any) -> str:
            call = current_call()
            assert call is not None
            return ", ".join(sorted(call.deps.prices))

    llm = ScriptedLLM([reply(tool_calls=[("stock", {})]), DONE])
    await ToolCallAgent(llm=llm, tools=[Stock(), Terminate()]).run("go", deps=Shop({"tea": 1, "jam": 2}))

    assert llm.requests[1].messages[-1].content == "Observed output of cmd `stock` executed:\njam, tea"


def test_deps_type_without_a_parameter_of_that_type_is_a_setup_error() -> None:
    def lookup(item: str) -> str:
        return item

    with pytest.raises(ToolSetupError, match=r"deps_type=Shop but no parameter is annotated `Shop`"):
        tool(deps_type=Shop)(lookup)


async def test_a_paused_run_keeps_its_deps_and_a_checkpoint_is_given_them_again(tmp_path: Any) -> None:
    shop = Shop({"tea": 3.5})
    needs_ok = tool(deps_type=Shop, needs_approval=True, name="price")(price.fn)
    llm = ScriptedLLM([reply(tool_calls=[("price", {"item": "tea"})]), DONE])
    agent = ToolCallAgent(llm=llm, tools=[needs_ok, Terminate()])
    checkpoint = tmp_path / "run.ckpt"

    paused = await agent.run("what does tea cost?", deps=shop, checkpoint=checkpoint)
    assert paused.paused
    restarted = ToolCallAgent(llm=ScriptedLLM([DONE]), tools=[needs_ok, Terminate()])
    with pytest.raises(WrongTypeError, match=r"tool 'price' takes the run's dependencies, a Shop; got None"):
        await restarted.resume(checkpoint)

    agent.approve()
    result = await agent.resume()  # in place: the deps it was given

    assert result.stop_reason is StopReason.TERMINATED
    assert shop.asked == ["tea"]


# -- resume_sync (after the dependencies: its test uses the shop) -----------------------


def test_resume_sync_continues_a_paused_run_then_one_from_its_checkpoint(tmp_path: Any) -> None:
    """A script's run paused for approval goes on with `resume_sync()` once approved; a run
    cancelled with its checkpoint goes on with `resume_sync(checkpoint)` on another agent."""
    ask = reply(tool_calls=[("price", {"item": "tea"})])
    shop = Shop({"tea": 3.5})
    needs_ok = tool(deps_type=Shop, needs_approval=True, name="price")(price.fn)
    agent = ToolCallAgent(llm=ScriptedLLM([ask, DONE]), tools=[needs_ok, Terminate()])

    paused = agent.run_sync("what does tea cost?", deps=shop)
    assert paused.paused and shop.asked == []
    agent.approve()
    result = agent.resume_sync()

    assert (result.stop_reason, result.steps) == (StopReason.TERMINATED, 2)
    assert shop.asked == ["tea"]  # the approved call ran, with the deps the run was given
    with pytest.raises(AgentBusyError, match="has no paused run to resume"):
        agent.resume_sync()  # refused before a loop is made

    checkpoint = tmp_path / "run.ckpt"

    async def cancelled_run() -> None:  # cancelled while the model thinks
        thinking = asyncio.Event()

        async def never(request: Any) -> Any:
            thinking.set()
            await asyncio.sleep(60)

        agent = ToolCallAgent(llm=FunctionLLM(never), tools=[Terminate()])
        task = asyncio.ensure_future(agent.run("finish", checkpoint=checkpoint))
        await asyncio.wait_for(thinking.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled_run())
    again = ToolCallAgent(llm=ScriptedLLM([DONE]), tools=[Terminate()])
    result = again.resume_sync(checkpoint)
    assert (result.state, result.stop_reason, result.steps) == (AgentState.FINISHED, StopReason.TERMINATED, 1)


async def test_resume_sync_inside_a_running_loop_says_to_await_resume() -> None:
    agent = ToolCallAgent(llm=ScriptedLLM([]))

    with pytest.raises(
        RunningLoopError, match=r"inside a running event loop; use `await agent.resume\(...\)`"
    ):
        agent.resume_sync()
