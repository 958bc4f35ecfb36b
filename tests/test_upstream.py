"""The scripted mock upstream, checked against the official SDKs and by raw HTTP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from app.testing.upstream import UpstreamServer, make_script

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server() -> Iterator[UpstreamServer]:
    with UpstreamServer() as srv:
        yield srv


@pytest.fixture
def upstream(server: UpstreamServer) -> UpstreamServer:
    server.wait_for(lambda: server.open_requests == 0, timeout=2.0)
    server.reset()
    return server


@pytest.fixture
def oai(upstream: UpstreamServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=upstream.base_url + "/v1", api_key="sk-test", max_retries=0) as client:
        yield client


@pytest.fixture
def claude(upstream: UpstreamServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=upstream.base_url, api_key="sk-ant-test", max_retries=0) as client:
        yield client


@pytest.fixture
def http(upstream: UpstreamServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=upstream.base_url, timeout=5.0) as client:
        yield client


def _chat(model: str = "gpt-test", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": MESSAGES, "stream": True, **extra}


def _sse_data(raw: bytes) -> list[str]:
    return [line[len("data: ") :] for line in raw.decode().split("\n") if line.startswith("data: ")]


# ------------------------------------------------------------------- OpenAI chat


def test_chat_text_non_stream(oai: openai.OpenAI, upstream: UpstreamServer) -> None:
    upstream.script("text", text="all done")
    r = oai.chat.completions.create(model="gpt-test", messages=MESSAGES)
    assert r.model == "gpt-test"
    assert r.choices[0].message.content == "all done"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage is not None and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_stream_with_usage(oai: openai.OpenAI, upstream: UpstreamServer) -> None:
    upstream.script("text", text="one two three four", chunks=4, input_tokens=11, output_tokens=7)
    chunks = list(
        oai.chat.completions.create(
            model="gpt-test", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    )
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(deltas) == "one two three four" and len(deltas) == 4
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (11, 7)


def test_chat_stream_tool_call_deltas_and_fresh_ids(oai: openai.OpenAI, upstream: UpstreamServer) -> None:
    upstream.script("tool_call", name="read_file", arguments={"path": "src/main.py"}, chunks=3)
    stream = oai.chat.completions.create(model="gpt-test", messages=MESSAGES, stream=True)
    calls = [tc for c in stream if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert calls[0].id and calls[0].id.startswith("call_")
    assert calls[0].function is not None and calls[0].function.name == "read_file"
    assert len(calls) == 4  # the head with id + name, then three argument fragments
    assert all(c.id is None and c.function is not None and c.function.name is None for c in calls[1:])
    assert json.loads("".join(c.function.arguments or "" for c in calls if c.function)) == {"path": "src/main.py"}

    with oai.chat.completions.stream(model="gpt-test", messages=MESSAGES) as helper:
        final = helper.get_final_completion()
    (tool_call,) = final.choices[0].message.tool_calls or []
    assert tool_call.id != calls[0].id
    assert final.choices[0].finish_reason == "tool_calls"


def test_chat_parallel_tool_calls_non_stream(oai: openai.OpenAI, upstream: UpstreamServer) -> None:
    upstream.script("tool_call", parallel=3)
    r = oai.chat.completions.create(model="gpt-test", messages=MESSAGES)
    calls = r.choices[0].message.tool_calls or []
    assert len(calls) == 3 and len({c.id for c in calls}) == 3
    assert all(json.loads(c.function.arguments) == {"path": "README.md"} for c in calls)  # type: ignore[union-attr]


def test_legacy_completions(oai: openai.OpenAI) -> None:
    r = oai.completions.create(model="davinci-test", prompt="x")
    assert r.choices[0].text and r.usage is not None
    chunks = list(oai.completions.create(model="davinci-test", prompt="x", stream=True))
    assert "".join(c.choices[0].text for c in chunks) == r.choices[0].text


# --------------------------------------------------------------- OpenAI Responses


def test_responses_text(oai: openai.OpenAI, upstream: UpstreamServer) -> None:
    upstream.script("text", text="responses say hi")
    r = oai.responses.create(model="gpt-test", input="hi")
    assert r.output_text == "responses say hi"
    assert r.status == "completed" and r.model == "gpt-test"
    assert r.usage is not None and r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens

    with oai.responses.stream(model="gpt-test", input="hi") as helper:
        deltas = [e.delta for e in helper if e.type == "response.output_text.delta"]
        final = helper.get_final_response()
    assert "".join(deltas) == "responses say hi" and len(deltas) > 1
    assert final.output_text == "responses say hi"


def test_responses_stream_events_and_tool_calls(oai: openai.OpenAI, upstream: UpstreamServer) -> None:
    upstream.script("tool_call", text="checking", parallel=2)
    events = list(oai.responses.create(model="gpt-test", input="hi", stream=True))
    types = [e.type for e in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-1] == "response.completed"
    assert types.count("response.function_call_arguments.done") == 2
    assert [e.sequence_number for e in events] == list(range(len(events)))

    with oai.responses.stream(model="gpt-test", input="hi") as helper:
        final = helper.get_final_response()
    calls = [o for o in final.output if o.type == "function_call"]
    assert [c.name for c in calls] == ["read_file", "read_file"]
    assert all(json.loads(c.arguments) == {"path": "README.md"} for c in calls)
    assert len({c.call_id for c in calls}) == 2
    assert final.output_text == "checking"

    r = oai.responses.create(model="gpt-test", input="hi")
    assert [o.type for o in r.output] == ["message", "function_call", "function_call"]


def test_responses_input_tokens(oai: openai.OpenAI, upstream: UpstreamServer) -> None:
    upstream.script("text", input_tokens=42)
    r = oai.responses.input_tokens.count(model="gpt-test", input="hi")
    assert r.input_tokens == 42 and r.object == "response.input_tokens"


# ---------------------------------------------------------------------- Anthropic


def test_messages_text(claude: anthropic.Anthropic, upstream: UpstreamServer) -> None:
    upstream.script("text", text="bonjour", output_tokens=3)
    m = claude.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES)
    assert m.model == "claude-test" and m.stop_reason == "end_turn"
    assert m.content[0].type == "text" and m.content[0].text == "bonjour"
    assert m.usage.output_tokens == 3

    with claude.messages.stream(model="claude-test", max_tokens=50, messages=MESSAGES) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "bonjour"
    assert final.usage.output_tokens == 3 and final.usage.input_tokens > 0


def test_messages_tool_use(claude: anthropic.Anthropic, upstream: UpstreamServer) -> None:
    upstream.script("tool_call", name="bash", arguments={"command": "ls -la", "timeout": 5}, parallel=2)
    m = claude.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES)
    assert m.stop_reason == "tool_use"
    blocks = [b for b in m.content if b.type == "tool_use"]
    assert [b.input for b in blocks] == [{"command": "ls -la", "timeout": 5}] * 2
    assert all(b.id.startswith("toolu_") for b in blocks)

    with claude.messages.stream(model="claude-test", max_tokens=50, messages=MESSAGES) as stream:
        fragments = [e.delta.partial_json for e in stream
                     if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
        final = stream.get_final_message()
    assert len(fragments) > 2
    streamed = [b for b in final.content if b.type == "tool_use"]
    assert [b.input for b in streamed] == [{"command": "ls -la", "timeout": 5}] * 2
    assert {b.id for b in streamed}.isdisjoint({b.id for b in blocks})
    assert final.stop_reason == "tool_use"


def test_messages_count_tokens(claude: anthropic.Anthropic) -> None:
    assert claude.messages.count_tokens(model="claude-test", messages=MESSAGES).input_tokens > 0


# ------------------------------------------------------------------- other endpoints


def test_models_and_embeddings(oai: openai.OpenAI) -> None:
    assert [m.id for m in oai.models.list()] == ["mock-model"]
    packed = oai.embeddings.create(model="emb-test", input=["a", "b"], dimensions=16)  # SDK asks for base64
    plain = oai.embeddings.create(model="emb-test", input=["a", "b"], dimensions=16, encoding_format="float")
    assert [len(d.embedding) for d in packed.data] == [16, 16]
    assert packed.data[0].embedding == pytest.approx(plain.data[0].embedding, rel=1e-5)
    assert packed.data[0].embedding != packed.data[1].embedding


def test_error_scenario_shapes(oai: openai.OpenAI, claude: anthropic.Anthropic, upstream: UpstreamServer) -> None:
    upstream.script("error", status=429, message="slow down", headers={"retry-after": "7"})
    with pytest.raises(openai.RateLimitError) as oe:
        oai.chat.completions.create(model="gpt-test", messages=MESSAGES, stream=True)
    assert oe.value.response.headers["retry-after"] == "7"
    assert oe.value.body == {"message": "slow down", "type": "rate_limit_error", "param": None,
                             "code": "rate_limit_exceeded"}

    upstream.script("error", status=529, message="overloaded")
    with pytest.raises(anthropic.APIStatusError) as ae:
        claude.messages.create(model="claude-test", max_tokens=5, messages=MESSAGES)
    assert ae.value.status_code == 529
    assert ae.value.body == {"type": "error", "error": {"type": "overloaded_error", "message": "overloaded"}}


def test_scenario_by_model_name_and_tool_cycle(oai: openai.OpenAI, upstream: UpstreamServer) -> None:
    r = oai.chat.completions.create(model="scenario:tool_call", messages=MESSAGES)
    assert r.model == "scenario:tool_call" and r.choices[0].message.tool_calls

    upstream.script("tool_cycle", calls=[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}])
    names = [
        (oai.chat.completions.create(model="gpt-test", messages=MESSAGES).choices[0].message.tool_calls
         or [])[0].function.name  # type: ignore[union-attr]
        for _ in range(4)
    ]
    assert names == ["a", "b", "a", "b"]


def test_make_script_validates() -> None:
    assert make_script("loop").scenario == "tool_call"
    with pytest.raises(ValueError, match="unknown scenario"):
        make_script("nope")
    with pytest.raises(ValueError, match="stal_s"):
        make_script("stall", {"stal_s": 1})


# --------------------------------------------------------- recording and control API


def test_recording_and_response_headers(http: httpx.Client, upstream: UpstreamServer) -> None:
    r = http.post("/v1/chat/completions?trace=1", json=_chat(stream=False), headers={"X-Session-Id": "abc"})
    assert r.headers["x-request-id"].startswith("req_")
    assert "x-ratelimit-remaining-requests" in r.headers
    (rec,) = upstream.requests
    assert (rec.method, rec.path, rec.wire, rec.stream, rec.status) == \
        ("POST", "/v1/chat/completions?trace=1", "chat", False, 200)
    assert rec.headers["x-session-id"] == "abc"
    assert rec.json == _chat(stream=False) and json.loads(rec.body) == rec.json
    assert rec.finished and not rec.disconnected


def test_control_api(http: httpx.Client, upstream: UpstreamServer) -> None:
    r = http.post("/_upstream/script", json={"scenario": "tool_call", "params": {"name": "grep"}})
    assert r.status_code == 200 and r.json()["params"]["name"] == "grep"
    assert upstream.app.current_script.scenario == "tool_call"
    assert http.post("/_upstream/script", json={"scenario": "bogus"}).status_code == 400

    body = http.post("/v1/chat/completions", json=_chat(stream=False)).json()
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "grep"
    state = http.get("/_upstream/requests").json()
    assert state["open_streams"] == 0 and state["script"]["scenario"] == "tool_call"
    (rec,) = state["requests"]  # control calls are not recorded
    assert rec["json"]["model"] == "gpt-test" and rec["scenario"] == "tool_call"

    assert http.post("/_upstream/reset").json() == {"ok": True}
    assert upstream.requests == [] and http.get("/_upstream/script").json()["scenario"] == "text"


# ------------------------------------------------------------------ stream pathologies


def test_stall_disconnect_is_recorded(http: httpx.Client, upstream: UpstreamServer) -> None:
    upstream.script("stall", after_events=1)
    with http.stream("POST", "/v1/chat/completions", json=_chat()) as r:
        lines = r.iter_lines()
        first = [next(lines) for _ in range(3)]  # role chunk, blank, first content chunk
        assert '"content":"' in first[2]
        assert upstream.open_streams == 1
        closed_at = time.monotonic()
    rec = upstream.wait_for(lambda: upstream.disconnects, timeout=1.0)[0]
    assert rec.disconnected_at is not None and rec.disconnected_at - closed_at < 1.0
    assert not rec.finished
    upstream.wait_for(lambda: upstream.open_streams == 0, timeout=1.0)


def test_truncate_has_no_terminal_event(http: httpx.Client) -> None:
    raw = http.post("/v1/chat/completions", json=_chat("scenario:truncate")).content
    data = _sse_data(raw)
    assert len(data) == 3 and "[DONE]" not in data  # role chunk + 2 content chunks
    raw = http.post("/v1/messages", json=_chat("scenario:truncate")).content
    assert b"message_stop" not in raw and raw.count(b"content_block_delta\n") == 2


def test_close_mid_event_drops_the_connection(http: httpx.Client, upstream: UpstreamServer) -> None:
    upstream.script("close_mid_event")
    got = b""
    with pytest.raises(httpx.RemoteProtocolError):
        with http.stream("POST", "/v1/responses", json=_chat()) as r:
            for chunk in r.iter_bytes():
                got += chunk
    assert not got.endswith(b"\n\n")
    assert b"response.output_text.delta" in got


def test_malformed_then_normal_end(http: httpx.Client) -> None:
    data = _sse_data(http.post("/v1/chat/completions", json=_chat("scenario:malformed")).content)
    bad = []
    for d in data[:-1]:
        try:
            json.loads(d)
        except ValueError:
            bad.append(d)
    assert len(bad) == 1 and data[-1] == "[DONE]"


def test_heartbeats_and_think(http: httpx.Client, upstream: UpstreamServer) -> None:
    upstream.script("heartbeats", interval_s=0.05, duration_s=0.3)
    raw = http.post("/v1/messages", json=_chat()).content.decode()
    events = [line for line in raw.split("\n") if line.startswith("event: ")]
    first_delta = events.index("event: content_block_delta")
    pings_after = events[first_delta + 1 :].count("event: ping")
    assert pings_after >= 3 and events[first_delta + 1] == "event: ping" and events[-1] == "event: message_stop"

    upstream.script("think", think_s=0.3, heartbeat_interval_s=0.1)
    started = time.monotonic()
    with http.stream("POST", "/v1/chat/completions", json=_chat()) as r:
        lines = [(time.monotonic() - started, line) for line in r.iter_lines() if line]
    first_content = next(t for t, line in lines if '"content":"H' in line)
    assert first_content >= 0.25
    assert [line for _, line in lines].count(": ping") >= 1
    assert lines[-1][1] == "data: [DONE]"


def test_trickle_and_delay_timeout(http: httpx.Client, upstream: UpstreamServer) -> None:
    upstream.script("text", chunks=4, chunk_delay_s=0.05)
    started = time.monotonic()
    http.post("/v1/chat/completions", json=_chat())
    assert time.monotonic() - started >= 0.15

    upstream.script("delay", delay_s=5)
    with pytest.raises(httpx.ReadTimeout):
        http.post("/v1/chat/completions", json=_chat(stream=False), timeout=0.2)
    rec = upstream.wait_for(lambda: upstream.disconnects, timeout=1.0)[0]
    assert rec.wire == "chat" and rec.status is None


def test_stop_with_a_stalled_stream_is_prompt() -> None:
    srv = UpstreamServer(scenario="stall").start()
    client = httpx.Client(timeout=5.0)
    try:
        response = client.send(client.build_request("POST", srv.base_url + "/v1/messages", json=_chat()), stream=True)
        srv.wait_for(lambda: srv.open_streams == 1)
        started = time.monotonic()
        srv.stop()
        assert time.monotonic() - started < 2.0
        response.close()
    finally:
        client.close()
        srv.stop()


# ---------------------------------------------------------------------------- CLI


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_command_line() -> None:
    port = _free_port()
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.testing.upstream", "--port", str(port), "--scenario", "loop",
         "--param", "parallel=2", "--log-level", "warning"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=_chat(stream=False), timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
        assert len(r.json()["choices"][0]["message"]["tool_calls"]) == 2
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=5)
