"""What a provider returns beside text and tool calls comes back on the next request, through
memory, traces, replay, checkpoints and resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from agentfsm import Message, Role, StopReason, ToolCallAgent
from agentfsm.agent.replay import Replayer, replay
from agentfsm.errors import ReplayError
from agentfsm.messages import ToolCall
from agentfsm.model.base import LLMResponse, Usage
from agentfsm.model.llm import LLM, load_litellm
from agentfsm.model.wire import to_wire
from agentfsm.recording.checkpoint import read_checkpoint
from agentfsm.recording.trace import read_trace
from agentfsm.testing import ModelRequest, ScriptedLLM

THINKING = {
    "reasoning_content": "The user wants a sum.",
    "thinking_blocks": [
        {"type": "thinking", "thinking": "The user wants a sum.", "signature": "EqQBCkYIBxgC"}
    ],
    "provider_specific_fields": {"citations": None},
}
SIGNED = {"provider_specific_fields": {"thought_signature": "CiQB0e2Kb7"}}
ANSWERED = {"reasoning_content": "Five it is."}


def thinking_script() -> list[LLMResponse]:
    call = ToolCall(id="call_a", name="add", arguments='{"a": 2, "b": 3}', provider_fields=SIGNED)
    usage = Usage(input_tokens=10, output_tokens=5, llm_calls=1)
    return [
        LLMResponse(tool_calls=(call,), usage=usage, model="m", provider_fields=THINKING),
        LLMResponse(content="5", usage=usage, model="m", provider_fields=ANSWERED),
    ]


def wire_of(request: ModelRequest) -> list[dict[str, Any]]:
    return to_wire(request.messages, request.system_msgs, vision=False)


def assert_sent_back(request: ModelRequest) -> None:
    """The assistant tool-call turn of `request` carries the thinking and the call its signature."""
    turn = next(m for m in wire_of(request) if m.get("tool_calls"))
    assert {key: turn[key] for key in THINKING} == THINKING
    assert turn["tool_calls"][0]["provider_specific_fields"] == SIGNED["provider_specific_fields"]


# -- the message and the wire ------------------------------------------------------------


def test_provider_fields_are_sent_back_as_keys_of_the_message_and_of_the_call() -> None:
    call = ToolCall(id="c", name="add", arguments="{}", provider_fields=SIGNED)
    message = Message.from_tool_calls([call], "thinking aloud", provider_fields=THINKING)
    wire = message.to_openai()
    assert wire == {
        "role": "assistant",
        "content": "thinking aloud",
        "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "add", "arguments": "{}"}, **SIGNED}
        ],
        **THINKING,
    }
    assert Message.assistant_message("hi", provider_fields=ANSWERED).to_openai() == {
        "role": "assistant",
        "content": "hi",
        **ANSWERED,
    }
    assert "provider_fields" not in Message.assistant_message("hi").to_openai()
    assert Message.assistant_message("hi", provider_fields={}).provider_fields is None


def test_messages_with_provider_fields_hash_compare_and_round_trip_as_json() -> None:
    call = ToolCall(id="c", name="add", provider_fields=SIGNED)
    message = Message.from_tool_calls([call], provider_fields=THINKING)
    same = Message.from_tool_calls(
        [ToolCall(id="c", name="add", provider_fields=SIGNED)], provider_fields=THINKING
    )
    assert hash(message) == hash(same) and message == same  # a trace numbers messages by value
    assert message != Message.from_tool_calls([call], provider_fields=ANSWERED)
    dumped = json.loads(message.model_dump_json())
    assert dumped["provider_fields"] == THINKING
    assert dumped["tool_calls"][0]["provider_fields"] == SIGNED
    assert Message.model_validate(dumped) == message
    assert Message.model_validate({"role": "user", "content": "x"}).provider_fields is None  # older dumps


# -- memory and the next request ---------------------------------------------------------


async def test_the_agent_keeps_provider_fields_on_both_kinds_of_assistant_message(toolbox) -> None:
    llm = ScriptedLLM(thinking_script())
    agent = ToolCallAgent(llm=llm, tools=toolbox)
    result = await agent.run("add 2 and 3")
    assert (result.stop_reason, result.output) == (StopReason.FINAL_ANSWER, "5")
    assistant = [m for m in agent.memory if m.role is Role.ASSISTANT]
    assert [m.provider_fields for m in assistant] == [THINKING, ANSWERED]
    assert assistant[0].tool_calls[0].provider_fields == SIGNED
    assert_sent_back(llm.requests[1])


async def test_an_approved_edit_keeps_the_calls_provider_fields(toolbox) -> None:
    llm = ScriptedLLM(thinking_script())
    agent = ToolCallAgent(llm=llm, tools=toolbox, require_approval=["add"])
    paused = await agent.run("add 2 and 3")
    assert paused.paused
    agent.approve("call_a", arguments={"a": 1, "b": 1})
    result = await agent.resume()
    assert result.output == "5"
    edited = llm.requests[1].messages[1]
    assert edited.tool_calls[0].arguments == '{"a": 1, "b": 1}'
    assert edited.tool_calls[0].provider_fields == SIGNED and edited.provider_fields == THINKING


# -- traces and replay -------------------------------------------------------------------


async def test_a_trace_records_provider_fields_and_replay_sends_them_back(toolbox, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    agent = ToolCallAgent(llm=ScriptedLLM(thinking_script()), tools=toolbox)
    result = await agent.run("add 2 and 3", trace=path)
    _, records = read_trace(path)
    calls = [r for r in records if r["kind"] == "llm"]
    assert [c["reply"]["provider_fields"] for c in calls] == [THINKING, ANSWERED]
    assert calls[0]["reply"]["tool_calls"][0]["provider_fields"] == SIGNED
    sent = calls[1]["request"]["messages"]
    assert sent[1]["provider_fields"] == THINKING and sent[1]["tool_calls"][0]["provider_fields"] == SIGNED
    replayer = Replayer(path)
    replayed = await replayer.run()  # it checks each rebuilt request against the recorded one
    assert replayed.result is not None and replayed.result.output == result.output
    memory = [m for m in replayer.agent.memory if m.role is Role.ASSISTANT]
    assert [m.provider_fields for m in memory] == [THINKING, ANSWERED]


async def test_replay_finds_a_reply_whose_provider_fields_were_altered(toolbox, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    await ToolCallAgent(llm=ScriptedLLM(thinking_script()), tools=toolbox).run("add 2 and 3", trace=path)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    first = next(r for r in lines if r["kind"] == "llm")
    first["reply"]["provider_fields"]["reasoning_content"] = "something else"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    with pytest.raises(ReplayError, match="request's messages differ"):
        await replay(path)  # what the model was sent back is checked too


# -- checkpoints and resume ----------------------------------------------------------------


async def test_a_resumed_run_sends_back_what_the_checkpoint_kept(toolbox, tmp_path: Path) -> None:
    path, saved = tmp_path / "run.checkpoint.jsonl", tmp_path / "saved.checkpoint.jsonl"
    first = ToolCallAgent(llm=ScriptedLLM(thinking_script()), tools=toolbox)
    async for transition in first.iter("add 2 and 3", checkpoint=path):
        if transition.dest == "ACTING":  # the journal is current once iter() yields the edge
            shutil.copy(path, saved)
    data = read_checkpoint(saved)
    assert data["run_state"]["turn"]["reply"]["provider_fields"] == THINKING
    llm = ScriptedLLM(thinking_script()[1:])
    second = ToolCallAgent(llm=llm, tools=toolbox)
    result = await second.resume(saved)
    assert result.output == "5"
    assert_sent_back(llm.requests[0])  # the tool-call turn came back from the journal whole
    assert [m.provider_fields for m in second.memory if m.role is Role.ASSISTANT] == [THINKING, ANSWERED]


# -- the litellm adapter -------------------------------------------------------------------


def test_llm_keeps_every_key_litellm_puts_beside_content_and_calls() -> None:
    litellm = load_litellm()
    response = litellm.ModelResponse(
        model="claude-x",
        choices=[
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "",
                    "reasoning_content": "",  # empty, and still wanted back (DeepSeek)
                    "thinking_blocks": THINKING["thinking_blocks"],
                    "provider_specific_fields": {"signature_delta": "x"},
                    "tool_calls": [
                        {
                            "id": "toolu_1",
                            "type": "function",
                            "function": {"name": "add", "arguments": "{}"},
                            **SIGNED,
                        }
                    ],
                },
            }
        ],
    )
    parsed = LLM("openai/unpriced-model")._reply(response)
    assert parsed.provider_fields == {
        "reasoning_content": "",
        "thinking_blocks": THINKING["thinking_blocks"],
        "provider_specific_fields": {"signature_delta": "x"},
    }
    assert parsed.tool_calls[0].provider_fields == SIGNED
    json.dumps(parsed.model_dump(mode="json"))  # plain JSON, nothing of litellm's
    plain = litellm.ModelResponse(
        model="m", choices=[{"index": 0, "message": {"role": "assistant", "content": "hi"}}]
    )
    assert LLM("openai/unpriced-model")._reply(plain).provider_fields is None
