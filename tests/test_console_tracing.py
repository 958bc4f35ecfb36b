"""OpenTelemetry traces against a real OTLP/HTTP receiver on loopback: a gateway started
with ``OTEL_EXPORTER_OTLP_ENDPOINT`` sends one span per proxied request, decoded here with
the OTel proto package (``ExportTraceServiceRequest``), with the GenAI attributes, the task
attributes, child spans for admission and the upstream exchange, tool-call and stop span
events; a client ``traceparent`` is continued, and the request upstream carries the
gateway's span as its parent."""

from __future__ import annotations

import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.support import GatewayProcess, free_port
from tests.test_loop_guard_e2e import chat_agent

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
USER = [{"role": "user", "content": "hi"}]


class Receiver:
    """An OTLP/HTTP trace receiver: ``POST /v1/traces`` with a protobuf body."""

    def __init__(self) -> None:
        self.spans: list = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                body = self.rfile.read(int(self.headers["content-length"]))
                assert self.path == "/v1/traces" and self.headers["content-type"] == "application/x-protobuf"
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        outer.spans.extend(scope.spans)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, predicate, timeout: float = 20, count: int = 1):
        """The received spans ``predicate`` holds for, once there are ``count`` of them
        (the SDK exports in batches)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [s for s in list(self.spans) if predicate(s)]
            if len(found) >= count:
                return found
            time.sleep(0.1)
        raise AssertionError(f"no such span among {[s.name for s in self.spans]}")


def attrs(span) -> dict:
    out = {}
    for kv in span.attributes:
        v = kv.value
        out[kv.key] = v.string_value or v.int_value or v.double_value or v.bool_value
    return out


@pytest.fixture(scope="module")
def traced(database_url, upstream):
    receiver = Receiver()
    gw = GatewayProcess(database_url, upstream.base_url, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
                        OTEL_BSP_SCHEDULE_DELAY="100", OTEL_SERVICE_NAME="taskgate-test")
    gw.start(timeout=60)
    yield gw, receiver
    gw.stop()
    receiver.server.shutdown()


def test_one_span_per_request_with_genai_and_task_attributes(traced, admin, upstream):
    gw, receiver = traced
    task, token = admin.create_task(id=f"otel-{os.getpid()}")
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=token, max_retries=0,
                           default_headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
    reply = client.chat.completions.create(model="gpt-4o-mini", messages=USER)
    (span,) = receiver.wait(lambda s: s.trace_id.hex() == TRACE_ID and s.name == "chat gpt-4o-mini")
    assert span.parent_span_id.hex() == PARENT_ID  # the client's trace continued
    a = attrs(span)
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == "gpt-4o-mini"
    assert a["gen_ai.provider.name"] == "openai"
    assert a["gen_ai.usage.input_tokens"] == reply.usage.prompt_tokens
    assert a["gen_ai.usage.output_tokens"] == reply.usage.completion_tokens
    assert a["taskgate.task.id"] == task and a["taskgate.admission.outcome"] == "admitted"
    assert a["taskgate.verdict"] == "completed" and a["taskgate.conversation.key"]
    assert a["http.response.status_code"] == 200
    children = receiver.wait(lambda s: s.parent_span_id == span.span_id and s.name == "taskgate.upstream")
    receiver.wait(lambda s: s.parent_span_id == span.span_id and s.name == "taskgate.admission")
    assert children[0].trace_id.hex() == TRACE_ID
    # upstream got a traceparent in the client's trace, naming the gateway's span
    sent = upstream.requests[-1].headers["traceparent"]
    assert sent == f"00-{TRACE_ID}-{span.span_id.hex()}-01", sent


def test_tool_calls_and_the_stop_are_span_events(traced, admin, upstream):
    gw, receiver = traced
    task, token = admin.create_task(id=f"otel-loop-{os.getpid()}", request_limit=30)
    upstream.script("tool_call")
    try:
        step = chat_agent(gw, token, stream=True)
        with pytest.raises(openai.APIStatusError):  # the refusal's status is the loop guard's to choose
            for _ in range(12):
                step()
    finally:
        upstream.reset()
    with_calls = receiver.wait(lambda s: attrs(s).get("taskgate.task.id") == task
                               and any(e.name == "gen_ai.tool.call" for e in s.events), count=5)
    time.sleep(0.5)  # one more export interval: nothing beyond the 5
    assert len([s for s in receiver.spans if attrs(s).get("taskgate.task.id") == task
                and any(e.name == "gen_ai.tool.call" for e in s.events)]) == 5
    event = next(e for e in with_calls[0].events if e.name == "gen_ai.tool.call")
    assert attrs(event)["gen_ai.tool.name"] == "read_file"
    (refused,) = receiver.wait(lambda s: attrs(s).get("taskgate.stop.reason") == "repeated_tool_call"
                               and attrs(s).get("taskgate.admission.outcome") == "refused"
                               and any(e.name == "taskgate.stop" for e in s.events))
    assert 400 <= attrs(refused)["http.response.status_code"] < 500
