"""`agentfsm run --otel` (and ``[telemetry]``) end to end: the CLI exports over OTLP/HTTP, configured by
the standard OTEL_* variables, to a small collector on 127.0.0.1 that decodes what it receives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

pytestmark = [pytest.mark.http, pytest.mark.usefixtures("clean_env")]


class Collector:
    """An OTLP/HTTP trace receiver on 127.0.0.1: every export request, decoded."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                collector.paths.append(self.path)
                collector.requests.append(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """(resource attributes, span) of every span received."""
        found = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    found += [(resource, span) for span in scope_spans.spans]
        return found


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def attributes(span: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in span.attributes}


@pytest.fixture
def collector() -> Iterator[Collector]:
    receiver = Collector()
    yield receiver
    receiver.close()


def agentfsm(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentfsm", *args],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1", **env},
    )


def run_args(llmock: Any, *extra: str) -> list[str]:
    return ["run", "add the numbers", "--model", "openai/test-model", "--api-base", llmock.base_url("openai"),
            "--api-key", "sk-test", "--json", *extra]  # fmt: skip


@pytest.mark.parametrize("how", ["flag", "config"])
def test_a_cli_run_exports_its_spans_to_the_otlp_endpoint_of_the_environment(
    how: str, collector: Collector, llmock: Any, tmp_path: Path
) -> None:
    llmock.reply("The answer is 42.")
    extra: tuple[str, ...] = ("--otel",)
    if how == "config":
        (tmp_path / "agentfsm.toml").write_text("[telemetry]\nenabled = true\ninclude_content = true\n")
        extra = ()
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_SERVICE_NAME": "agentfsm-cli-test",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=test",
    }
    proc = agentfsm(*run_args(llmock, *extra), env=env)

    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["stop_reason"] == "final_answer"  # stdout: the result alone
    assert set(collector.paths) == {"/v1/traces"}
    received = collector.spans()
    names = sorted(span.name for _, span in received)
    assert names == ["chat test-model", "invoke_agent toolcall"]
    resource = received[0][0]
    assert resource["service.name"] == "agentfsm-cli-test"
    assert resource["deployment.environment.name"] == "test"
    (run,) = [s for _, s in received if s.name == "invoke_agent toolcall"]
    (chat,) = [s for _, s in received if s.name == "chat test-model"]
    assert chat.parent_span_id == run.span_id and chat.trace_id == run.trace_id
    assert chat.kind == chat.SPAN_KIND_CLIENT and run.kind == run.SPAN_KIND_INTERNAL
    chat_attributes = attributes(chat)
    assert chat_attributes["gen_ai.provider.name"] == "openai"
    assert chat_attributes["gen_ai.usage.output_tokens"] > 0
    assert [e.name for e in run.events] == ["agentfsm.transition"] * 2  # IDLE -> THINKING -> FINISHED
    assert ("gen_ai.input.messages" in chat_attributes) is (how == "config")  # include_content there only


def test_otel_without_an_endpoint_listening_still_runs_and_exits_0(llmock: Any) -> None:
    llmock.reply("The answer is 42.")
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
    proc = agentfsm(*run_args(llmock, "--otel"), env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["stop_reason"] == "final_answer"


def test_a_misspelt_telemetry_key_is_a_config_error_naming_the_keys(tmp_path: Path) -> None:
    (tmp_path / "agentfsm.toml").write_text("[telemetry]\nenable = true\n")
    proc = agentfsm("run", "t", "--model", "openai/x", env={})
    assert proc.returncode == 2
    assert "unknown key 'enable' in [telemetry]" in proc.stderr and "include_content" in proc.stderr
