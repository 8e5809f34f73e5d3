"""The public hook that decides whether a special tool ends the run, and its old private name."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from agentfsm import AgentState, StopReason, ToolCall, ToolCallAgent
from agentfsm.testing import ScriptedLLM, reply

DONE = reply(tool_calls=[("terminate", {"status": "success"})])


class SecondTimeLucky(ToolCallAgent):
    """Lets `terminate` end the run only the second time it is called."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.asked: list[str] = []

    def should_finish_execution(self, call: ToolCall) -> bool:
        self.asked.append(call.name)
        return len(self.asked) > 1


async def test_an_override_of_should_finish_execution_keeps_the_run_going_until_it_says_so() -> None:
    agent = SecondTimeLucky(llm=ScriptedLLM([DONE, DONE, reply("never reached")]))

    result = await agent.run("finish twice")

    assert agent.asked == ["terminate", "terminate"]
    assert (result.state, result.stop_reason) == (AgentState.FINISHED, StopReason.TERMINATED)
    assert agent.current_step == 2


def test_a_subclass_with_the_old_private_name_is_warned_and_still_honoured() -> None:
    with pytest.warns(DeprecationWarning, match=r"Legacy\._should_finish_execution is deprecated"):

        class Legacy(ToolCallAgent):
            def _should_finish_execution(self, call: ToolCall) -> bool:
                return False

    agent = Legacy(llm=ScriptedLLM([DONE, reply("the answer after all")]))
    result = agent.run_sync("finish")

    assert (result.state, result.stop_reason, result.output) == (
        AgentState.FINISHED,
        StopReason.FINAL_ANSWER,
        "the answer after all",
    )


def test_a_subclass_with_the_new_name_is_not_warned() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        class Modern(ToolCallAgent):
            def should_finish_execution(self, call: ToolCall) -> bool:
                return True

    assert Modern(llm=ScriptedLLM([DONE])).run_sync("go").stop_reason is StopReason.TERMINATED
