"""The stream-silence watchdog and upstream failures, end to end.

A real gateway process relays to the scripted upstream (``app/testing/upstream/``)
while the upstream misbehaves: it stalls, sends only heartbeats, thinks, trickles,
truncates, breaks mid-event, sends a malformed event, is unreachable or too slow,
or the client walks away. Every task sets its own short stream limits
(``stream_idle_timeout_s`` / ``stream_first_event_timeout_s``), so the shared gateway
keeps its defaults. Timing assertions only bound from below (the watchdog did not
cut early) and generously from above (it did cut, long before upstream would have
ended by itself); nothing asserts a speed except the disconnect propagation bound
the issue asks for (< 1 s).
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import anthropic
import httpx
import openai
import pytest

from app.testing.upstream import UpstreamServer
from app.wire.sse import SSEDecoder
from tests.support import GatewayProcess, free_port

IDLE = 0.3  # stream_idle_timeout_s of the tasks below
FIRST = 2.0  # stream_first_event_timeout_s, unless a test is about it
LONG = 30.0  # how long the scripted upstream misbehaves: far beyond any limit here
CLIENT_TIMEOUT = 8.0  # a test whose watchdog never fires fails after this, not after LONG

WIRES = ("chat", "responses", "anthropic")
TEXT = "Hello from the taskgate mock upstream."
USER = [{"role": "user", "content": "hi"}]


def request_for(wire: str, stream: bool = True) -> tuple[str, dict[str, Any]]:
    """Path and body of a minimal request on ``wire``."""
    if wire == "chat":
        body: dict[str, Any] = {"model": "mock-model", "messages": USER}
        if stream:
            body["stream_options"] = {"include_usage": True}
        path = "/v1/chat/completions"
    elif wire == "responses":
        body, path = {"model": "mock-model", "input": "hi"}, "/v1/responses"
    else:
        body, path = {"model": "mock-model", "max_tokens": 50, "messages": USER}, "/v1/messages"
    if stream:
        body["stream"] = True
    return path, body


def auth(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@dataclass
class Relayed:
    """What the client received: status, raw bytes, decoded SSE events, timings."""

    status: int
    body: bytes
    events: list[tuple[str, str]] = field(default_factory=list)
    elapsed: float = 0.0  # request start to end of body
    first_byte_at: float | None = None  # request start to the first body chunk

    def json_events(self) -> list[tuple[str, Any]]:
        out = []
        for event, data in self.events:
            try:
                out.append((event, json.loads(data)))
            except ValueError:
                out.append((event, data))
        return out


def relay(gateway_url: str, token: str, wire: str, stream: bool = True,
          timeout: float = CLIENT_TIMEOUT) -> Relayed:
    """One request through the gateway with raw httpx, read to the end (at most
    ``timeout`` seconds in all, heartbeats or not)."""
    path, body = request_for(wire, stream)
    started = time.monotonic()
    chunks: list[bytes] = []
    first: float | None = None
    with httpx.stream("POST", gateway_url + path, json=body, headers=auth(token), timeout=timeout) as r:
        for chunk in r.iter_raw():
            if first is None:
                first = time.monotonic() - started
            chunks.append(chunk)
            if time.monotonic() - started > timeout:
                raise AssertionError(f"stream still open after {timeout} s: {b''.join(chunks)[-300:]!r}")
        status = r.status_code
    raw = b"".join(chunks)
    decoder = SSEDecoder()
    events = decoder.feed(raw) + decoder.flush()
    return Relayed(status, raw, events, time.monotonic() - started, first)


def terminal_error(wire: str, got: Relayed) -> dict[str, Any]:
    """Assert the stream ends with taskgate's terminal error event in ``wire``'s own
    format and nothing after it; return the error object (``code`` for OpenAI formats)."""
    events = got.json_events()
    if wire == "chat":
        assert got.body.endswith(b"\n\ndata: [DONE]\n\n"), got.body[-300:]
        (event, data), done = events[-2], events[-1]
        assert done == ("", "[DONE]")
        assert event == ""
        assert set(data) == {"error"}, data
        err = data["error"]
        assert set(err) == {"message", "type", "code", "param"} and err["param"] is None
        assert isinstance(err["message"], str) and err["message"]
        assert [d for _, d in events].count("[DONE]") == 1  # upstream's own [DONE] never came
        return err
    if wire == "responses":
        event, data = events[-1]
        assert event == "response.failed" and data["type"] == "response.failed", events[-3:]
        response = data["response"]
        assert response["status"] == "failed"
        # the failure continues upstream's response: same id, next sequence number,
        # as the openai SDK's stream accumulator requires
        created = [d for e, d in events if e == "response.created"]
        assert len(created) == 1
        assert response["id"] == created[0]["response"]["id"]
        numbers = [d["sequence_number"] for _, d in events[:-1] if isinstance(d, dict) and "sequence_number" in d]
        assert data["sequence_number"] == max(numbers) + 1
        err = response["error"]
        assert set(err) == {"code", "message"} and err["message"]
        return err
    event, data = events[-1]
    assert event == "error", events[-3:]
    assert data["type"] == "error" and set(data["error"]) == {"type", "message"}
    assert data["error"]["type"] == "api_error" and data["error"]["message"]
    assert not any(e == "message_stop" for e, _ in events)
    return data["error"]


def assert_completed_normally(wire: str, got: Relayed) -> None:
    """The stream ended with upstream's own terminal event and carries the whole text."""
    assert got.status == 200
    events = got.json_events()
    last_event, last = events[-1]
    if wire == "chat":
        assert last == "[DONE]"
        text = "".join(d["choices"][0]["delta"].get("content") or ""
                       for _, d in events if isinstance(d, dict) and d.get("choices"))
    elif wire == "responses":
        assert last_event == "response.completed"
        text = "".join(d["delta"] for e, d in events if e == "response.output_text.delta")
    else:
        assert last_event == "message_stop"
        text = "".join(d["delta"]["text"] for e, d in events if e == "content_block_delta")
    assert text == TEXT
    assert b"taskgate closed it" not in got.body and b"stream_truncated" not in got.body


def upstream_released(upstream: UpstreamServer, timeout: float = 3.0) -> None:
    """Every upstream exchange of the test is over: streams and requests closed."""
    upstream.wait_for(lambda: upstream.open_streams == 0 and upstream.open_requests == 0, timeout=timeout)


def kinds(admin, task_id: str) -> list[str]:
    return [e["kind"] for e in admin.events(task_id)]


def wait_events(admin, task_id: str, kind: str, n: int, timeout: float = 5.0) -> list[dict]:
    """Wait for ``n`` events of ``kind`` (accounting runs after the client has its answer)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [e for e in admin.events(task_id) if e["kind"] == kind]
        if len(found) >= n or time.monotonic() > deadline:
            assert len(found) == n, found
            return found
        time.sleep(0.02)


def wait_accounted(admin, task_id: str, timeout: float = 5.0) -> dict:
    """Wait for the usage of a completed response to be recorded (accounting ran)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task = admin.task(task_id)
        if task["output_tokens"] > 0:
            return task
        time.sleep(0.02)
    raise AssertionError(f"usage never recorded on {task_id}: {admin.task(task_id)}")


def watched_task(admin, idle: float = IDLE, first: float = FIRST, **kw: Any) -> tuple[str, str]:
    return admin.create_task(stream_idle_timeout_s=idle, stream_first_event_timeout_s=first, **kw)


# ------------------------------------------------------------ silence after content


@pytest.mark.parametrize("wire", WIRES)
def test_silence_after_content_is_cut_with_the_wire_formats_terminal_error(gateway, admin, upstream, wire):
    task_id, token = watched_task(admin)
    upstream.script("stall", after_events=1, stall_s=LONG)
    got = relay(gateway.url, token, wire)
    assert got.status == 200
    err = terminal_error(wire, got)
    if wire == "chat":
        assert err["type"] == "upstream_stalled" and err["code"] == "stream_idle_timeout"
    elif wire == "responses":
        assert err["code"] == "stream_idle_timeout"
    assert "0.3 s" in err["message"]
    # the first content event was relayed before the cut
    assert TEXT[:8] in got.body.decode()
    assert got.elapsed >= IDLE  # not cut before the idle limit
    # upstream's connection was closed by the gateway
    (seen,) = upstream.requests
    upstream.wait_for(lambda: seen.disconnected, timeout=3)
    upstream_released(upstream)
    # the task history says what happened; the request stays counted
    event = admin.wait_for_event(task_id, "stream_stalled")
    assert event["reason"] == "stream_idle_timeout"
    detail = event["detail"]
    path, _ = request_for(wire)
    assert detail["endpoint"] == path and detail["model"] == "mock-model"
    assert detail["code"] == "stream_idle_timeout"
    assert 0 < detail["bytes_relayed"] <= len(got.body)
    assert detail["events_relayed"] >= 2
    assert IDLE * 0.9 <= detail["seconds_since_last_data"] < CLIENT_TIMEOUT
    assert detail["seconds_since_first_content"] >= detail["seconds_since_last_data"]
    task = admin.task(task_id)
    assert task["admitted_requests"] == 1 and task["stalls"] == 1 and task["status"] == "active"


def test_chat_sdk_raises_api_error_on_a_stall(gateway, admin, upstream):
    _, token = watched_task(admin)
    upstream.script("stall", after_events=1, stall_s=LONG)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0, timeout=CLIENT_TIMEOUT)
    pieces: list[str] = []
    with pytest.raises(openai.APIError) as exc:
        for chunk in client.chat.completions.create(model="mock-model", messages=USER, stream=True):
            if chunk.choices:
                pieces.append(chunk.choices[0].delta.content or "")
    assert type(exc.value) is openai.APIError  # not a connection or timeout error
    assert exc.value.code == "stream_idle_timeout" and exc.value.type == "upstream_stalled"
    assert "".join(pieces) and TEXT.startswith("".join(pieces))
    # the streaming helper agents use raises the same
    with pytest.raises(openai.APIError) as exc:
        with client.chat.completions.stream(model="mock-model", messages=USER) as stream:
            stream.get_final_completion()
    assert type(exc.value) is openai.APIError and exc.value.code == "stream_idle_timeout"
    upstream_released(upstream)


def test_responses_sdk_sees_response_failed_on_a_stall(gateway, admin, upstream):
    _, token = watched_task(admin)
    upstream.script("stall", after_events=1, stall_s=LONG)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0, timeout=CLIENT_TIMEOUT)
    # create(stream=True) does not raise: the last event is response.failed
    events = list(client.responses.create(model="mock-model", input="hi", stream=True))
    assert events[0].type == "response.created"
    failed = events[-1]
    assert failed.type == "response.failed"
    assert failed.response.status == "failed" and failed.response.error.code == "stream_idle_timeout"
    assert failed.response.id == events[0].response.id
    # the stream helper accepts the failure as part of the same response, then has no final response
    with client.responses.stream(model="mock-model", input="hi") as stream:
        seen = list(stream)
        assert seen[-1].type == "response.failed"
        assert seen[-1].response.error.code == "stream_idle_timeout"
        assert any(e.type == "response.output_text.delta" for e in seen)
        with pytest.raises(RuntimeError, match="response.completed"):
            stream.get_final_response()
    upstream_released(upstream)


def test_anthropic_sdk_raises_api_status_error_on_a_stall(gateway, admin, upstream):
    _, token = watched_task(admin)
    upstream.script("stall", after_events=1, stall_s=LONG)
    client = anthropic.Anthropic(base_url=gateway.url, api_key=token, max_retries=0, timeout=CLIENT_TIMEOUT)
    pieces: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as exc:
        with client.messages.stream(model="mock-model", max_tokens=50, messages=USER) as stream:
            for text in stream.text_stream:
                pieces.append(text)
    body = exc.value.body
    assert body["type"] == "error" and body["error"]["type"] == "api_error"
    assert set(body["error"]) == {"type", "message"}
    assert "went silent" in body["error"]["message"]
    assert "".join(pieces) and TEXT.startswith("".join(pieces))
    with pytest.raises(anthropic.APIStatusError):
        for _ in client.messages.create(model="mock-model", max_tokens=50, messages=USER, stream=True):
            pass
    upstream_released(upstream)


# ------------------------------------------------------------- heartbeats, think


@pytest.mark.parametrize("wire", WIRES)
def test_heartbeats_are_relayed_but_are_not_progress(gateway, admin, upstream, wire):
    task_id, token = watched_task(admin)
    upstream.script("heartbeats", after_events=1, interval_s=0.05, duration_s=LONG)
    got = relay(gateway.url, token, wire)
    err = terminal_error(wire, got)
    if wire != "anthropic":
        assert err["code"] == "stream_idle_timeout"
        assert got.body.count(b": ping\n\n") >= 2  # SSE comments relayed as they came
    else:
        # one ping belongs to the normal stream; the rest are the heartbeats
        assert sum(1 for e, _ in got.events if e == "ping") >= 3
    assert got.elapsed >= IDLE
    event = admin.wait_for_event(task_id, "stream_stalled")
    assert event["reason"] == "stream_idle_timeout"
    assert event["detail"]["seconds_since_last_data"] >= IDLE * 0.9
    upstream.wait_for(lambda: upstream.requests[0].disconnected, timeout=3)
    upstream_released(upstream)


@pytest.mark.parametrize("wire", WIRES)
def test_thinking_within_the_first_content_limit_is_not_cut(gateway, admin, upstream, wire):
    """Think longer than the idle limit, shorter than the first-content limit."""
    task_id, token = watched_task(admin, idle=0.2, first=3.0)
    upstream.script("think", think_s=0.5)
    got = relay(gateway.url, token, wire)
    assert_completed_normally(wire, got)
    assert got.elapsed >= 0.5
    wait_accounted(admin, task_id)
    assert "stream_stalled" not in kinds(admin, task_id)
    upstream_released(upstream)


@pytest.mark.parametrize("wire", WIRES)
def test_no_first_content_within_its_limit_is_cut_even_with_heartbeats(gateway, admin, upstream, wire):
    task_id, token = watched_task(admin, idle=5.0, first=0.5)
    upstream.script("think", think_s=LONG, heartbeat_interval_s=0.05)
    got = relay(gateway.url, token, wire)
    err = terminal_error(wire, got)
    if wire != "anthropic":
        assert err["code"] == "stream_first_event_timeout"
    assert "no content within 0.5 s" in err["message"]
    assert 0.5 <= got.elapsed < 5.0  # the idle limit (5 s) plays no part before content
    event = admin.wait_for_event(task_id, "stream_stalled")
    assert event["reason"] == "stream_first_event_timeout"
    assert event["detail"]["seconds_since_first_content"] is None
    upstream.wait_for(lambda: upstream.requests[0].disconnected, timeout=3)
    upstream_released(upstream)


@pytest.mark.parametrize("wire", WIRES)
def test_slow_steady_trickle_is_not_cut(gateway, admin, upstream, wire):
    """Each gap (0.1 s) is well under the idle limit (0.3 s); the whole stream is not."""
    task_id, token = watched_task(admin, idle=0.3, first=3.0)
    upstream.script("text", chunks=6, chunk_delay_s=0.1)
    got = relay(gateway.url, token, wire)
    assert_completed_normally(wire, got)
    assert got.elapsed >= 0.45  # five 0.1 s gaps: the stream outlasts the idle limit
    wait_accounted(admin, task_id)
    assert "stream_stalled" not in kinds(admin, task_id)


def test_zero_disables_each_limit(gateway, admin, upstream):
    task_id, token = watched_task(admin, idle=0, first=0)
    assert admin.task(task_id)["stream_idle_timeout_s"] == 0
    upstream.script("stall", after_events=1, stall_s=0.5)
    got = relay(gateway.url, token, "chat")
    assert_completed_normally("chat", got)
    assert got.elapsed >= 0.5
    upstream.script("think", think_s=0.5)
    got = relay(gateway.url, token, "anthropic")
    assert_completed_normally("anthropic", got)
    assert got.elapsed >= 0.5
    assert "stream_stalled" not in kinds(admin, task_id)
    # each limit on its own: idle 0 still leaves the first-content limit in force
    task_id, token = watched_task(admin, idle=0, first=0.3)
    upstream.script("think", think_s=LONG)
    assert terminal_error("responses", relay(gateway.url, token, "responses"))["code"] == "stream_first_event_timeout"
    # ... and first 0 still leaves the idle limit
    task_id, token = watched_task(admin, idle=0.3, first=0)
    upstream.script("stall", after_events=1, stall_s=LONG)
    assert terminal_error("chat", relay(gateway.url, token, "chat"))["code"] == "stream_idle_timeout"
    upstream_released(upstream)


def test_streamed_request_without_response_headers_is_bounded_by_the_first_content_limit(gateway, admin, upstream):
    """No headers at all is the same silence: a stream request gets 504 after the
    first-content limit, not after the 600 s non-streaming total."""
    task_id, token = watched_task(admin, idle=5.0, first=0.4)
    upstream.script("delay", delay_s=LONG)
    got = relay(gateway.url, token, "chat")
    assert got.status == 504 and json.loads(got.body)["error"]["code"] == "upstream_timeout"
    assert 0.4 <= got.elapsed < 5.0
    assert admin.wait_for_event(task_id, "upstream_timeout")["detail"]["endpoint"] == "/v1/chat/completions"
    upstream.wait_for(lambda: upstream.requests[0].disconnected, timeout=3)
    upstream_released(upstream)


# ------------------------------------------------------------ truncation, garbage


@pytest.mark.parametrize("scenario", ["truncate", "close_mid_event"])
@pytest.mark.parametrize("wire", WIRES)
def test_stream_ended_without_its_terminal_event_is_reported_as_truncated(gateway, admin, upstream, wire, scenario):
    task_id, token = watched_task(admin, idle=5.0, first=5.0)
    upstream.script(scenario)
    got = relay(gateway.url, token, wire)
    assert got.status == 200
    err = terminal_error(wire, got)
    if wire == "chat":
        assert err["code"] == "stream_truncated" and err["type"] == "upstream_error"
    elif wire == "responses":
        assert err["code"] == "stream_truncated"
    assert got.elapsed < 5.0  # reported at once, not by the watchdog
    event = admin.wait_for_event(task_id, "stream_truncated")
    assert event["reason"] == "stream_truncated"
    assert event["detail"]["endpoint"] == request_for(wire)[0] and event["detail"]["bytes_relayed"] > 0
    task = admin.task(task_id)
    assert task["stalls"] == 0 and task["admitted_requests"] == 1  # not a stall, still counted
    upstream_released(upstream)


def test_sdks_raise_on_a_stream_broken_mid_event(gateway, admin, upstream):
    """Half an event, then the connection drops: the SDKs must still parse taskgate's
    terminal error (the half event must not swallow it)."""
    _, token = watched_task(admin, idle=5.0, first=5.0)
    upstream.script("close_mid_event")
    oai = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0, timeout=CLIENT_TIMEOUT)
    with pytest.raises(openai.APIError) as exc:
        list(oai.chat.completions.create(model="mock-model", messages=USER, stream=True))
    assert type(exc.value) is openai.APIError and exc.value.code == "stream_truncated"
    events = list(oai.responses.create(model="mock-model", input="hi", stream=True))
    assert events[-1].type == "response.failed" and events[-1].response.error.code == "stream_truncated"
    ant = anthropic.Anthropic(base_url=gateway.url, api_key=token, max_retries=0, timeout=CLIENT_TIMEOUT)
    with pytest.raises(anthropic.APIStatusError) as aexc:
        with ant.messages.stream(model="mock-model", max_tokens=50, messages=USER) as stream:
            stream.get_final_message()
    assert aexc.value.body["error"]["type"] == "api_error"
    upstream_released(upstream)


@pytest.mark.parametrize("wire", WIRES)
def test_malformed_event_is_relayed_as_is_and_the_stream_completes(gateway, admin, upstream, wire):
    task_id, token = watched_task(admin)
    upstream.script("malformed")
    got = relay(gateway.url, token, wire)
    assert got.status == 200
    assert b'data: {"type": "broken", "delta": tru\n\n' in got.body
    last_event, last = got.events[-1]
    assert (last_event or last) == {"chat": "[DONE]", "responses": "response.completed",
                                    "anthropic": "message_stop"}[wire]
    assert b"taskgate closed it" not in got.body and b"stream_truncated" not in got.body
    assert not any(e in ("error", "response.failed") for e, _ in got.events)
    assert not any(d.startswith('{"error"') for _, d in got.events)
    wait_accounted(admin, task_id)  # the response was accounted as complete
    assert not {"stream_stalled", "stream_truncated"} & set(kinds(admin, task_id))
    # the gateway is fine afterwards
    upstream.script("text")
    assert_completed_normally(wire, relay(gateway.url, token, wire))


# ---------------------------------------------------------- upstream unreachable


@pytest.fixture(scope="module")
def unreachable_gateway(database_url: str) -> Iterator[GatewayProcess]:
    """A gateway whose providers (OpenAI and Anthropic) listen on a closed port."""
    with GatewayProcess(database_url, f"http://127.0.0.1:{free_port()}") as gw:
        yield gw


@pytest.fixture(scope="module")
def impatient_gateway(database_url: str, upstream: UpstreamServer) -> Iterator[GatewayProcess]:
    """A gateway that gives a non-streamed upstream response 0.5 s in total."""
    with GatewayProcess(database_url, upstream.base_url, TASKGATE_UPSTREAM_TIMEOUT_S="0.5") as gw:
        yield gw


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
def test_connect_error_is_502_in_each_endpoints_shape(unreachable_gateway, admin, stream):
    task_id, token = admin.create_task()
    for wire in WIRES:
        got = relay(unreachable_gateway.url, token, wire, stream=stream)
        assert got.status == 502, got.body
        body = json.loads(got.body)
        if wire == "anthropic":
            assert body["type"] == "error" and body["error"]["type"] == "api_error"
            message = body["error"]["message"]
        else:
            assert body["error"]["code"] == "upstream_unreachable" and body["error"]["param"] is None
            message = body["error"]["message"]
        assert "could not be reached" in message
    events = wait_events(admin, task_id, "upstream_unreachable", 3)
    assert {e["detail"]["endpoint"] for e in events} == {request_for(w)[0] for w in WIRES}
    assert all(e["reason"] == "upstream_unreachable" for e in events)
    task = admin.task(task_id)
    assert task["admitted_requests"] == 3 and task["stalls"] == 0
    # the official SDKs see it as a server error
    client = openai.OpenAI(base_url=unreachable_gateway.url + "/v1", api_key=token, max_retries=0)
    with pytest.raises(openai.InternalServerError) as exc:
        client.chat.completions.create(model="mock-model", messages=USER, stream=stream)
    assert exc.value.status_code == 502 and exc.value.code == "upstream_unreachable"


def test_non_streamed_total_timeout_is_504_in_each_endpoints_shape(impatient_gateway, admin, upstream):
    task_id, token = admin.create_task()
    upstream.script("delay", delay_s=LONG)
    for wire in WIRES:
        got = relay(impatient_gateway.url, token, wire, stream=False)
        assert got.status == 504, got.body
        assert 0.5 <= got.elapsed < 5.0
        body = json.loads(got.body)
        if wire == "anthropic":
            assert body["type"] == "error" and body["error"]["type"] == "timeout_error"
        else:
            assert body["error"]["code"] == "upstream_timeout"
    # upstream saw each request abandoned
    upstream.wait_for(lambda: len(upstream.disconnects) == 3, timeout=3)
    upstream_released(upstream)
    events = wait_events(admin, task_id, "upstream_timeout", 3)
    assert all(e["reason"] == "upstream_timeout" for e in events)
    assert {e["detail"]["endpoint"] for e in events} == {request_for(w)[0] for w in WIRES}
    assert admin.task(task_id)["admitted_requests"] == 3
    # a body that starts in time is not cut (the limit is total, and 0.2 s fits)
    upstream.script("delay", delay_s=0.2)
    assert relay(impatient_gateway.url, token, "chat", stream=False).status == 200


# --------------------------------------------------------------- client leaves


@pytest.mark.parametrize("wire", WIRES)
def test_client_disconnect_mid_stream_cancels_upstream(gateway, admin, upstream, wire):
    task_id, token = watched_task(admin, idle=0, first=0)  # no watchdog: only the client leaves
    upstream.script("stall", after_events=1, stall_s=LONG)
    path, body = request_for(wire)
    with httpx.Client(timeout=CLIENT_TIMEOUT) as client:
        with client.stream("POST", gateway.url + path, json=body, headers=auth(token)) as r:
            assert r.status_code == 200
            received = b""
            for chunk in r.iter_raw():
                received += chunk
                if TEXT[:8].encode() in received:
                    break
        closed_at = time.monotonic()
    (seen,) = upstream.requests
    upstream.wait_for(lambda: seen.disconnected, timeout=3)
    assert seen.disconnected_at - closed_at < 1.0
    upstream_released(upstream)
    # a departed client is neither a stall nor a truncation; the request stays counted
    time.sleep(0.2)
    assert not {"stream_stalled", "stream_truncated"} & set(kinds(admin, task_id))
    assert admin.task(task_id)["admitted_requests"] == 1


def test_client_disconnect_keeps_the_tool_calls_seen_so_far(gateway, admin, upstream):
    task_id, token = watched_task(admin, idle=0, first=0)
    # the first of two tool calls (5 argument deltas) arrives whole, then upstream goes silent
    upstream.script("stall", name="read_file", arguments={"path": "a.txt"}, text="", parallel=2,
                    after_events=5, stall_s=LONG)
    path, body = request_for("chat")
    with httpx.Client(timeout=CLIENT_TIMEOUT) as client:
        with client.stream("POST", gateway.url + path, json=body, headers=auth(token)) as r:
            received = b""
            for chunk in r.iter_raw():
                received += chunk
                if received.count(b'"arguments"') >= 5:
                    break
    upstream.wait_for(lambda: upstream.requests[0].disconnected, timeout=3)
    deadline = time.monotonic() + 5
    calls: list = []
    while not calls and time.monotonic() < deadline:
        calls = admin.http.get(f"/admin/tasks/{task_id}/tool-calls").json()["data"]
        time.sleep(0.05)
    assert [c["tool_name"] for c in calls] == ["read_file"]
    assert calls[0]["result_hash"] is None
    assert b"[DONE]" not in received  # the client really left mid-stream


def test_client_disconnect_while_waiting_for_a_body_cancels_upstream(gateway, admin, upstream):
    _, token = admin.create_task()
    upstream.script("delay", delay_s=LONG)
    _, body = request_for("chat", stream=False)
    payload = json.dumps(body).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{gateway.port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as sock:
        sock.sendall(head + payload)
        upstream.wait_for(lambda: upstream.requests, timeout=5)
        time.sleep(0.1)  # upstream is waiting; so is the gateway
    closed_at = time.monotonic()
    (seen,) = upstream.requests
    upstream.wait_for(lambda: seen.disconnected, timeout=3)
    assert seen.disconnected_at - closed_at < 1.0
    assert seen.status is None  # upstream never got to answer
    upstream_released(upstream)


# ----------------------------------------------------------------- stall ceiling


def test_repeated_stalls_stop_the_task(gateway, admin, upstream):
    task_id, token = watched_task(admin, max_stalls=2)
    upstream.script("stall", after_events=1, stall_s=LONG)
    terminal_error("chat", relay(gateway.url, token, "chat"))
    admin.wait_for_event(task_id, "stream_stalled")
    task = admin.task(task_id)
    assert task["status"] == "active" and task["stalls"] == 1
    terminal_error("anthropic", relay(gateway.url, token, "anthropic"))
    admin.wait_for_event(task_id, "stopped")
    task = admin.task(task_id)
    assert task["status"] == "stopped" and task["stop_reason"] == "repeated_stalls"
    assert task["stalls"] == 2 and task["admitted_requests"] == 2
    assert task["stop_detail"]["stalls"] == 2 and task["stop_detail"]["max_stalls"] == 2
    assert task["stop_detail"]["last_stall"]["endpoint"] == "/v1/messages"
    before = len(upstream.requests)
    got = relay(gateway.url, token, "chat")
    assert got.status == 400
    err = json.loads(got.body)["error"]
    assert err["type"] == "task_stopped" and err["code"] == "repeated_stalls"
    with pytest.raises(anthropic.ConflictError):
        anthropic.Anthropic(base_url=gateway.url, api_key=token, max_retries=0).messages.create(
            model="mock-model", max_tokens=5, messages=USER)
    assert len(upstream.requests) == before
    upstream_released(upstream)
