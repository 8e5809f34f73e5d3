"""A table of broken replies from the model's server: every run still ends defined, memory whole.

What a provider, a proxy or a model gets wrong on the wire: a body that is not JSON, an HTML
error page, a reply without choices, tool calls whose arguments are not JSON, name no tool we
have, fail the tool's schema, or come without a name. Each row is one run against a server on
127.0.0.1 that sends the broken reply, then (if the run goes on) a terminate call, once through
each adapter (`LLM` and `OpenAICompatible`), with the same expectations. Checked for
every row: `run()` returns a `RunResult` (no exception escapes), in the state the row expects,
with its error naming the cause when it ends in ERROR, and memory holds no orphan tool message
or unanswered call. The figures are printed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import assert_pairs_complete
from fault_server import FaultServer, Plan, Raw, Reply

from agentfsm import LLM, AgentState, OpenAICompatible, Terminate, ToolCallAgent, tool

pytestmark = pytest.mark.http

TERMINATE = Reply(tool=("terminate", {"status": "success"}))


def _completion(message: dict[str, Any], finish: str = "tool_calls") -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-x",
            "object": "chat.completion",
            "created": 0,
            "model": "fault-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    ).encode()


def _call(name: str | None, arguments: str) -> bytes:
    function = {"arguments": arguments} if name is None else {"name": name, "arguments": arguments}
    return _completion(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": function}],
        }
    )


ROWS: list[tuple[str, Raw, AgentState, str, int]] = [
    # A body the adapter cannot read is a transient provider error: retried (the retry gets terminate).
    ("a body that is not JSON", Raw(b"{not json"), AgentState.FINISHED, "", 2),
    (
        "an HTML error page with 200",
        Raw(b"<html><body>Bad Gateway</body></html>"),
        AgentState.FINISHED,
        "",
        2,
    ),
    ("an HTML error page with 502", Raw(b"<html>502</html>", status=502), AgentState.FINISHED, "", 2),
    (
        "a reply without choices",
        Raw(json.dumps({"id": "x", "object": "chat.completion"}).encode()),
        AgentState.FINISHED,
        "",
        2,
    ),
    ("arguments nested 5,000 deep", Raw(_call("add", "[" * 5000 + "]" * 5000)), AgentState.FINISHED, "", 2),
    # A 4xx is the request's fault: not retried, the run ends in ERROR naming it.
    ("an HTML error page with 400", Raw(b"<html>400</html>", status=400), AgentState.ERROR, "LLMError", 1),
    ("empty choices", Raw(json.dumps({"id": "x", "choices": []}).encode()), AgentState.ERROR, "LLMError", 1),
    # The model's own mistakes are observations it reads, and the run goes on.
    (
        "arguments that are not JSON",
        Raw(_call("add", "{a: 1")),
        AgentState.FINISHED,
        "Invalid JSON format",
        2,
    ),
    (
        "arguments that are a JSON list",
        Raw(_call("add", "[1, 2]")),
        AgentState.FINISHED,
        "expected a JSON object",
        2,
    ),
    ("a tool we do not have", Raw(_call("rm_rf", "{}")), AgentState.FINISHED, "Unknown tool 'rm_rf'", 2),
    (
        "arguments that fail the schema",
        Raw(_call("add", '{"a": "x"}')),
        AgentState.FINISHED,
        "Invalid arguments for add",
        2,
    ),
    (
        "neither text nor calls",
        Raw(_completion({"role": "assistant", "content": None}, "stop")),
        AgentState.FINISHED,
        "",
        2,
    ),
]


@tool
def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


@pytest.mark.parametrize("adapter", [LLM, OpenAICompatible], ids=["litellm", "native"])
async def test_broken_replies_end_every_run_defined_with_memory_whole(
    adapter: type[LLM] | type[OpenAICompatible],
) -> None:
    plans = {f"row-{i}": Plan([raw, TERMINATE]) for i, (_, raw, _, _, _) in enumerate(ROWS)}
    wrong: list[str] = []
    async with FaultServer(plans) as server:
        llm = adapter("openai/fault-model", api_base=server.base_url, api_key="t", timeout=5, max_attempts=2,
                  backoff_base=0.01, backoff_max=0.05)  # fmt: skip
        for i, (name, _, state, says, requests) in enumerate(ROWS):
            agent = ToolCallAgent(llm=llm, tools=[add, Terminate()], max_steps=4)
            result = await agent.run(f"row-{i} add")
            assert_pairs_complete(agent.memory.messages)
            observed = "\n".join(m.content or "" for m in agent.memory.messages if m.role.value == "tool")
            told = result.error or "" if state is AgentState.ERROR else observed
            if result.state is not state or says not in told or server.journal[f"row-{i}"] != requests:
                wrong.append(
                    f"{name}: {result.state} {result.stop_reason} {result.error!r} / {observed[:120]!r}"
                )
    print(
        f"\n{len(ROWS)} kinds of broken reply on the wire, through {adapter.__name__}: "
        f"{len(wrong)} not ended as expected"
    )
    assert wrong == [], "\n".join(wrong)
