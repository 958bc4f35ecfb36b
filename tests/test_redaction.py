"""Provider keys never reach the client (issue 8 item 4), and a stream is recognised by
the request and its bytes, not only its content type."""

from __future__ import annotations

import json
import time
from typing import Iterator

import httpx
import pytest

from app.proxy.redact import MASK, Redactor, provider_keys
from tests.raw_upstream import RawUpstream
from tests.support import ANTHROPIC_PROVIDER_KEY, PROVIDER_KEY, Admin, GatewayProcess


def test_redactor_masks_every_key_and_leaves_other_bytes_alone() -> None:
    r = Redactor(["sk-aaaaaaaaaaaa", None, "", "short", "sk-aaaaaaaaaaaa-longer"])
    plain = [k for k in r.keys if b"\\u" not in k]  # each key also in its two \u-escaped spellings
    assert plain == [b"sk-aaaaaaaaaaaa-longer", b"sk-aaaaaaaaaaaa"]  # longest first, short keys ignored
    assert len(r.keys) == 6
    data = b'{"error": {"message": "Incorrect API key provided: sk-aaaaaaaaaaaa-longer"}}'
    assert r(data) == b'{"error": {"message": "Incorrect API key provided: ' + MASK + b'"}}'
    clean = b"data: {\"x\": \"short sk-aaaa\"}\n\n"
    assert r(clean) is clean  # untouched: the same object, byte for byte
    assert r.headers([(b"x-echo", b"Bearer sk-aaaaaaaaaaaa"), (b"a", b"b")]) == [(b"x-echo", b"Bearer " + MASK),
                                                                                 (b"a", b"b")]
    assert Redactor([])(data) is data

    class S:
        upstream_api_key, anthropic_api_key = "sk-one-1234567", None

    class P:
        api_key = "sk-three-1234567"
        headers = {"api-key": "azure-secret-123", "Authorization": "Bearer tok-12345678", "x-title": "My app"}

    assert provider_keys(S(), [P()]) == ["sk-one-1234567", "sk-three-1234567", "azure-secret-123", "tok-12345678"]


def test_upstream_errors_echoing_the_key_are_redacted(gateway, admin, upstream):
    """Non-streamed: the key in an upstream error body and header (OpenAI and Anthropic)."""
    _, token = admin.create_task()
    for path, key in (("/v1/chat/completions", PROVIDER_KEY), ("/v1/messages", ANTHROPIC_PROVIDER_KEY)):
        upstream.script("error", status=401, message=f"Incorrect API key provided: {key}.",
                        headers={"x-echo-key": f"Bearer {key}"})
        r = httpx.post(gateway.url + path, headers={"authorization": f"Bearer {token}"},
                       json={"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 401
        assert key not in r.text and MASK.decode() in r.text
        assert key not in json.dumps(dict(r.headers)) and r.headers["x-echo-key"] == "Bearer " + MASK.decode()


@pytest.fixture(scope="module")
def raw() -> Iterator[RawUpstream]:
    server = RawUpstream()
    yield server
    server.close()


@pytest.fixture(scope="module")
def raw_gateway(database_url: str, raw: RawUpstream) -> Iterator[GatewayProcess]:
    with GatewayProcess(database_url, raw.base_url) as gw:
        yield gw


def _chunk(text: str) -> bytes:
    return b"data: " + json.dumps({"id": "c1", "object": "chat.completion.chunk", "model": "m",
                                   "choices": [{"index": 0, "delta": {"content": text},
                                                "finish_reason": None}]}).encode() + b"\n\n"


USAGE = (b'data: {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [], '
         b'"usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}\n\n')


def test_a_key_split_across_two_stream_chunks_is_redacted(raw_gateway, raw):
    """The key arrives in two upstream writes (split mid-key, 0.2 s apart)."""
    admin = Admin(raw_gateway.url)
    _, token = admin.create_task()
    event = _chunk(f"your key is {PROVIDER_KEY}, use it well")
    cut = event.index(PROVIDER_KEY.encode()) + 7
    raw.reply("200 OK", [("content-type", "text/event-stream")],
              _chunk("hello "), event[:cut], 0.2, event[cut:], b"data: [DONE]\n\n")
    with httpx.stream("POST", raw_gateway.url + "/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                      json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}) as r:
        body = r.read()
    assert r.status_code == 200
    assert PROVIDER_KEY.encode() not in body and MASK in body
    assert body.endswith(b"data: [DONE]\n\n")


@pytest.mark.parametrize("content_type", ["text/plain; charset=utf-8", "application/json", None])
def test_a_stream_under_another_content_type_is_watched_as_a_stream(raw_gateway, raw, content_type):
    """Usage of an SSE stream sent as text/plain or JSON is recorded (the observer ran),
    and the bytes reach the client unchanged (it asked for usage: nothing is hidden)."""
    admin = Admin(raw_gateway.url)
    task_id, token = admin.create_task()
    stream = _chunk("hi") + USAGE + b"data: [DONE]\n\n"
    raw.reply("200 OK", [("content-type", content_type)] if content_type else [], _chunk("hi"), 0.05,
              USAGE + b"data: [DONE]\n\n")
    # the client asks for usage itself, so its usage chunk is its own and relayed unchanged
    r = httpx.post(raw_gateway.url + "/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                   json={"model": "m", "stream": True, "stream_options": {"include_usage": True},
                         "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200 and r.content == stream
    deadline = time.monotonic() + 5
    while admin.task(task_id)["output_tokens"] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert admin.task(task_id)["output_tokens"] == 7


def test_a_json_body_to_a_stream_request_is_relayed_as_a_body(raw_gateway, raw):
    admin = Admin(raw_gateway.url)
    _, token = admin.create_task()
    body = json.dumps({"id": "c1", "object": "chat.completion", "model": "m", "choices": []}).encode()
    raw.reply("200 OK", [("content-type", "application/json"), ("content-length", str(len(body)))], body[:5], 0.05,
              body[5:])
    r = httpx.post(raw_gateway.url + "/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                   json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200 and r.content == body
