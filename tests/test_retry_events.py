"""Retries of a model call on the run's one event stream: an `LLMRetry` per retry between the call's
`LLMCallStarted` and its `LLMCall`, for both adapters (`LLM`: litellm; `OpenAICompatible`: aiohttp),
streamed and not, over real HTTP against llmock on 127.0.0.1; the `chat` span's span events; the
live view and `--stream`; and traces, checkpoints and replay, which a retry leaves as they were.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from llmock.scenarios import Reply, StreamFault
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rich.console import Console
from telemetry_support import exporter
from test_streaming import adapter
from test_streaming import make_llm as streaming_llm

from agentfsm import (
    LLM,
    LLMRetry,
    OpenAICompatible,
    RunResult,
    TextDelta,
    ToolCallAgent,
    ToolCallDelta,
    Transition,
)
from agentfsm.agent.replay import replay
from agentfsm.cli.live import LiveView
from agentfsm.model.retry_report import ERROR_TEXT_LIMIT, heard_by, one_line
from agentfsm.recording.checkpoint import read_checkpoint
from agentfsm.run.events import LLMCall, LLMCallStarted

pytestmark = pytest.mark.http

ANSWER = "The answer is 42, and that is all."
UNAVAILABLE = {"litellm": "ServiceUnavailableError", "native": "ProviderError"}
RATE_LIMITED = {"litellm": "RateLimitError", "native": "ProviderError"}

__all__ = ["adapter", "exporter"]  # the fixtures, used by name


@pytest.fixture(params=[False, True], ids=["whole", "streamed"])
def stream(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def make_llm(llmock: Any, adapter: str, **options: Any) -> LLM | OpenAICompatible:
    """The streaming tests' model, waiting as long as a Retry-After asks (up to 5 s)."""
    options.setdefault("backoff_base", 0.02)
    options.setdefault("backoff_max", 5.0)
    return streaming_llm(llmock, adapter, **options)


async def streamed_run(agent: ToolCallAgent, task: str) -> tuple[list[Any], RunResult]:
    """Every event `run_stream` yields, and the result it ends with."""
    events = [event async for event in agent.run_stream(task)]
    result = events.pop()
    assert isinstance(result, RunResult)
    return events, result


def calls_and_retries(events: list[Any]) -> list[str]:
    """The model call's events in order, without the transitions and the deltas."""
    return [type(e).__name__ for e in events if not isinstance(e, Transition | TextDelta | ToolCallDelta)]


def chat_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    (chat,) = [s for s in exporter.get_finished_spans() if s.name == "chat llmock-test-model"]
    return chat


async def test_a_503_then_success_is_one_retry_between_the_call_s_start_and_its_end(
    adapter: str, stream: bool, llmock: Any, exporter: InMemorySpanExporter
) -> None:
    llmock.fail(503, times=1, retry_after=0.05)  # llmock's 503 asks for a second by default
    llmock.reply(ANSWER)
    agent = ToolCallAgent(llm=make_llm(llmock, adapter, stream=stream))

    events, result = await streamed_run(agent, "the answer?")

    assert result.output == ANSWER
    assert [r.status for r in llmock.requests] == [503, 200]
    assert calls_and_retries(events) == ["LLMCallStarted", "LLMRetry", "LLMCall"]
    (retry,) = [e for e in events if isinstance(e, LLMRetry)]
    assert (retry.agent, retry.run_id, retry.step) == (agent.name, result.run_id, 1)
    assert (retry.attempt, retry.error_type, retry.status_code) == (1, UNAVAILABLE[adapter], 503)
    assert retry.error.startswith(f"{UNAVAILABLE[adapter]}: HTTP 503")
    assert "\n" not in retry.error and len(retry.error) <= ERROR_TEXT_LIMIT
    assert retry.wait_s == 0.05  # the server's Retry-After
    deltas = [i for i, e in enumerate(events) if isinstance(e, TextDelta)]
    if stream:  # the attempt that failed sent nothing: every piece is the second attempt's, after it
        assert deltas and min(deltas) > events.index(retry)
        assert {events[i].attempt for i in deltas} == {2}
    else:
        assert deltas == []

    chat = chat_span(exporter)
    assert [(e.name, dict(e.attributes or {})) for e in chat.events] == [
        (
            "agentfsm.llm.retry",
            {
                "agentfsm.retry.attempt": 1,
                "error.type": UNAVAILABLE[adapter],
                "exception.message": retry.error,
                "agentfsm.retry.wait_s": retry.wait_s,
                "http.response.status_code": 503,
            },
        )
    ]
    assert (chat.attributes or {})["agentfsm.llm.attempts"] == 2
    assert "error.type" not in (chat.attributes or {})  # the call succeeded
    assert heard_by() is None  # the run's listener is gone with its call


async def test_a_429_waits_its_retry_after_and_says_so(
    adapter: str, stream: bool, llmock: Any, exporter: InMemorySpanExporter
) -> None:
    llmock.rate_limit(times=2, retry_after=0.2)
    llmock.reply(ANSWER)
    agent = ToolCallAgent(llm=make_llm(llmock, adapter, stream=stream))

    events, result = await streamed_run(agent, "the answer?")

    assert result.output == ANSWER
    records = llmock.requests
    assert [r.status for r in records] == [429, 429, 200]
    assert records[1].started_at - records[0].ended_at >= 0.2  # the wait the event announced
    assert calls_and_retries(events) == ["LLMCallStarted", "LLMRetry", "LLMRetry", "LLMCall"]
    retries = [e for e in events if isinstance(e, LLMRetry)]
    assert [(r.attempt, r.wait_s, r.status_code, r.error_type) for r in retries] == [
        (1, 0.2, 429, RATE_LIMITED[adapter]),
        (2, 0.2, 429, RATE_LIMITED[adapter]),
    ]
    chat = chat_span(exporter)
    assert [(e.attributes or {})["agentfsm.retry.attempt"] for e in chat.events] == [1, 2]
    assert [(e.attributes or {})["agentfsm.retry.wait_s"] for e in chat.events] == [0.2, 0.2]
    assert {(e.attributes or {})["error.type"] for e in chat.events} == {RATE_LIMITED[adapter]}
    assert (chat.attributes or {})["agentfsm.llm.attempts"] == 3


async def test_no_retry_event_when_the_first_attempt_succeeds(
    adapter: str, stream: bool, llmock: Any, exporter: InMemorySpanExporter
) -> None:
    llmock.reply(ANSWER)
    agent = ToolCallAgent(llm=make_llm(llmock, adapter, stream=stream))

    events, result = await streamed_run(agent, "the answer?")

    assert result.output == ANSWER
    assert calls_and_retries(events) == ["LLMCallStarted", "LLMCall"]
    chat = chat_span(exporter)
    assert chat.events == ()
    assert "agentfsm.llm.attempts" not in (chat.attributes or {})


async def test_a_stream_cut_mid_way_is_a_retry_between_the_two_attempts_pieces(
    adapter: str, llmock: Any
) -> None:
    llmock.add(Reply(text=ANSWER, times=2))
    llmock.add(StreamFault("disconnect", after_chunks=4))
    agent = ToolCallAgent(llm=make_llm(llmock, adapter, stream=True))

    events, result = await streamed_run(agent, "the answer?")

    assert result.output == ANSWER
    (retry,) = [e for e in events if isinstance(e, LLMRetry)]
    at = events.index(retry)
    before = [e for e in events[:at] if isinstance(e, TextDelta)]
    after = [e for e in events[at:] if isinstance(e, TextDelta)]
    assert before and {e.attempt for e in before} == {1} and retry.attempt == 1
    assert "".join(e.text for e in after) == ANSWER and {e.attempt for e in after} == {2}
    assert retry.status_code is None  # the server answered 200; the stream broke


async def test_a_call_that_runs_out_of_attempts_has_a_retry_per_retry_and_its_error(
    adapter: str, llmock: Any, exporter: InMemorySpanExporter
) -> None:
    llmock.fail(503, times=None, retry_after=0.01)
    agent = ToolCallAgent(llm=make_llm(llmock, adapter, max_attempts=3))

    events, result = await streamed_run(agent, "the answer?")

    assert result.error is not None and "after 3 attempts" in result.error
    assert calls_and_retries(events) == ["LLMCallStarted", "LLMRetry", "LLMRetry", "LLMCall"]
    assert [e.attempt for e in events if isinstance(e, LLMRetry)] == [1, 2]
    chat = chat_span(exporter)
    assert [e.name for e in chat.events] == ["agentfsm.llm.retry", "agentfsm.llm.retry", "exception"]
    assert (chat.attributes or {})["agentfsm.llm.attempts"] == 3


async def test_traces_checkpoints_and_replay_are_the_same_with_and_without_a_retry(
    adapter: str, llmock: Any, tmp_path: Path
) -> None:
    outcomes = {}
    for retried in (False, True):
        if retried:
            llmock.fail(503, times=1, retry_after=0.01)
        llmock.reply(ANSWER)
        agent = ToolCallAgent(llm=make_llm(llmock, adapter))
        trace, checkpoint = tmp_path / f"{retried}.jsonl", tmp_path / f"{retried}.ckpt"
        result = await agent.run("the answer?", trace=trace, checkpoint=checkpoint)
        assert result.output == ANSWER
        lines = trace.read_text(encoding="utf-8").splitlines()
        kinds = [line.split('"kind": "', 1)[1].split('"', 1)[0] for line in lines]
        replayed = await replay(trace)
        assert replayed.result.output == ANSWER and replayed.result.stop_reason == result.stop_reason
        restored = read_checkpoint(checkpoint)
        outcomes[retried] = (
            kinds,
            len(checkpoint.read_text(encoding="utf-8").splitlines()),
            sorted(restored),
        )
    assert outcomes[True] == outcomes[False]  # no record more, none other


def test_an_error_s_text_is_one_bounded_line() -> None:
    page = "<html>\n  <body>\n" + "x" * 1000 + "\n</body></html>"
    text = one_line(f"ProviderError: HTTP 503: {page}")
    assert "\n" not in text and len(text) == ERROR_TEXT_LIMIT and text.endswith("…")
    assert one_line("a\n  b") == "a b"


# -- what a person sees ---------------------------------------------------------------------------


def retry_event(**fields: Any) -> LLMRetry:
    values: dict[str, Any] = {
        "agent": "toolcall",
        "run_id": "r",
        "step": 1,
        "attempt": 1,
        "error_type": "ProviderError",
        "error": "ProviderError: HTTP 503: Service Unavailable (http://127.0.0.1:9/v1/chat/completions)",
        "status_code": 503,
        "wait_s": 30.0,
    }
    return LLMRetry(**{**values, **fields})


async def test_the_live_view_shows_a_retry_as_it_happens() -> None:
    from agentfsm.testing import ScriptedLLM

    agent = ToolCallAgent(llm=ScriptedLLM([]))
    out = io.StringIO()
    view = LiveView(agent, console=Console(file=out, force_terminal=True, width=200, color_system=None))
    view.state = "THINKING"
    with view:
        view(LLMCallStarted(agent="toolcall", run_id="r", step=1))
        assert view.doing() == "waiting for the model"
        view(retry_event())
        waiting = view.doing()
        view(retry_event(attempt=2, wait_s=0.0, status_code=None, error_type="ProviderTimeoutError"))
        after_the_wait = view.doing()
        view(
            LLMCall(
                agent="toolcall",
                run_id="r",
                step=1,
                messages=(),
                system_msgs=(),
                tools=(),
                tool_choice="auto",
            )
        )
        returned = view.doing()
    assert waiting.startswith("retrying in ") and waiting.endswith(" s after HTTP 503")
    assert float(waiting.split()[2]) <= 30.0
    assert after_the_wait == "waiting for the model (attempt 3)"
    assert returned == "waiting for the model"
    printed = out.getvalue()
    assert "↻ attempt 1 failed: ProviderError: HTTP 503: Service Unavailable" in printed
    assert "retrying in 30.0 s" in printed


def test_run_stream_keeps_stdout_the_answer_alone_through_a_retry(llmock: Any, clean_env: Path) -> None:
    llmock.fail(503, times=1, retry_after=0.01)
    llmock.add(Reply(text=ANSWER))
    args = ["run", "answer", "--model", "openai/test-model", "--api-base", llmock.base_url("openai"),
            "--api-key", "test", "--stream", "--client", "native"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "agentfsm", *args], capture_output=True, text=True, timeout=120, env=os.environ
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{ANSWER}\n"
    assert "llm_retry" in proc.stderr and "503" in proc.stderr
    assert [r.status for r in llmock.requests] == [503, 200]


def test_the_bench_prints_what_a_listened_to_call_pays_for_its_retries_to_be_heard() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    import bench_otel

    cost = bench_otel._retry_hook_ns()
    assert cost > 0
    assert heard_by() is None  # set and unset: nothing left behind
    out: list[str] = []
    same = dict.fromkeys(bench_otel.VARIANTS, 100.0)
    in_process = {"us": same, "ratio": dict.fromkeys(same, 1.0), "spans_per_run": {}}
    bench_otel.lines({"paths": {"in process": in_process}, "hook_ns": 100, "retry_hook_ns": 190.4}, out)
    assert "  a listened-to call's retry listener, set and unset (no retry): 190 ns a call" in out


async def test_inside_a_durable_run_a_retry_is_heard_within_the_model_step(
    adapter: str, llmock: Any, tmp_path: Path
) -> None:
    """The retry happens inside the ``model`` step, whose one recorded reply is the second
    attempt's: the step does not run twice, and the run's listener hears the retry."""
    from agentfsm.durable import AgentSpec, DurableRuns, Worker

    llmock.fail(503, times=1, retry_after=0.05)
    llmock.reply(ANSWER)
    heard: list[Any] = []

    def build(spec: AgentSpec) -> ToolCallAgent:
        agent = ToolCallAgent(llm=make_llm(llmock, adapter), name="retrying")
        agent.on_event(heard.append)
        return agent

    db = f"sqlite:///{tmp_path / 'runs.db'}"
    async with Worker(db, agents={"retrying": build}, worker_id="solo", polling_s=0.05):
        runs = DurableRuns(db)
        try:
            run_id = await runs.submit("the answer?", AgentSpec(agent="retrying"))
            result = await runs.result(run_id, wait=True, timeout=30)
            trace = await runs.trace(run_id)
        finally:
            runs.close()
    assert result is not None and result.output == ANSWER
    assert [r.status for r in llmock.requests] == [503, 200]
    assert calls_and_retries(heard) == ["LLMCallStarted", "LLMRetry", "LLMCall"]
    (retry,) = [e for e in heard if isinstance(e, LLMRetry)]
    assert (retry.run_id, retry.attempt, retry.status_code) == (run_id, 1, 503)
    assert "retry" not in {json.loads(line)["kind"] for line in trace.splitlines()}  # traces skip it
