"""End-to-end: the official openai and anthropic SDKs through a real gateway process
to the scripted upstream, with admission on real PostgreSQL."""

from __future__ import annotations

import json
import threading
import time

import anthropic
import httpx
import openai
import pytest

from tests.support import ADMIN_TOKEN, ANTHROPIC_PROVIDER_KEY, PROVIDER_KEY


def oai(gateway, token: str, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=kw.pop("max_retries", 2), **kw)


def ant(gateway, token: str, **kw) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key=token, max_retries=kw.pop("max_retries", 2), **kw)


def chat(client: openai.OpenAI, **kw):
    return client.chat.completions.create(model="mock-model", messages=[{"role": "user", "content": "hi"}], **kw)


def test_chat_completion_relayed_and_counted(gateway, admin, upstream):
    task_id, token = admin.create_task(request_limit=10)
    completion = chat(oai(gateway, token))
    assert completion.choices[0].message.content == "Hello from the taskgate mock upstream."
    assert admin.task(task_id)["admitted_requests"] == 1
    seen = upstream.requests[-1]
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {PROVIDER_KEY}"


def test_streaming_chat_relayed(gateway, admin, upstream):
    task_id, token = admin.create_task()
    stream = chat(oai(gateway, token), stream=True, stream_options={"include_usage": True})
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "Hello from the taskgate mock upstream."
    deadline = time.monotonic() + 5
    while admin.task(task_id)["output_tokens"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    task = admin.task(task_id)
    assert task["admitted_requests"] == 1
    assert task["input_tokens"] > 0 and task["output_tokens"] > 0


def test_first_chunk_arrives_before_upstream_finishes(gateway, admin, upstream):
    _, token = admin.create_task()
    upstream.script("text", chunks=5, chunk_delay_s=0.4)
    started = time.monotonic()
    stream = chat(oai(gateway, token), stream=True)
    first_at = None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            first_at = time.monotonic() - started
            break
    stream.close()
    assert first_at is not None and first_at < 1.2  # whole stream takes >= 1.6 s upstream


def test_responses_and_embeddings_and_completions(gateway, admin):
    task_id, token = admin.create_task()
    client = oai(gateway, token)
    resp = client.responses.create(model="mock-model", input="hi")
    assert resp.output_text == "Hello from the taskgate mock upstream."
    with client.responses.stream(model="mock-model", input="hi") as stream:
        final = stream.get_final_response()
    assert final.output_text == "Hello from the taskgate mock upstream."
    client.embeddings.create(model="mock-embed", input="hello")
    client.completions.create(model="mock-model", prompt="hi")
    assert admin.task(task_id)["admitted_requests"] == 4


def test_anthropic_messages_stream_and_not(gateway, admin, upstream):
    task_id, token = admin.create_task()
    client = ant(gateway, token)
    msg = client.messages.create(model="mock-model", max_tokens=50,
                                 messages=[{"role": "user", "content": "hi"}])
    assert msg.content[0].text == "Hello from the taskgate mock upstream."
    with client.messages.stream(model="mock-model", max_tokens=50,
                                messages=[{"role": "user", "content": "hi"}]) as stream:
        assert stream.get_final_text() == "Hello from the taskgate mock upstream."
    seen = upstream.requests[-1]
    assert seen.headers["x-api-key"] == ANTHROPIC_PROVIDER_KEY
    assert "anthropic-version" in seen.headers
    assert admin.task(task_id)["admitted_requests"] == 2


def test_token_counting_and_gets_are_free(gateway, admin, upstream):
    task_id, token = admin.create_task(request_limit=1)
    client = ant(gateway, token)
    count = client.messages.count_tokens(model="mock-model", messages=[{"role": "user", "content": "hi"}])
    assert count.input_tokens > 0
    assert [m.id for m in oai(gateway, token).models.list()] == ["mock-model"]
    assert admin.task(task_id)["admitted_requests"] == 0


def test_limit_stops_task_and_sdks_do_not_retry(gateway, admin, upstream):
    task_id, token = admin.create_task(request_limit=2)
    client = oai(gateway, token)
    chat(client)
    chat(client)
    before = len(upstream.requests)
    with pytest.raises(openai.BadRequestError) as exc:
        chat(client)
    assert len(upstream.requests) == before  # refused without contacting upstream, no retries
    body = exc.value.body
    assert body["type"] == "task_stopped" and body["code"] == "request_limit"
    assert task_id in body["message"] and "2 of 2" in body["message"]
    assert exc.value.response.headers["x-should-retry"] == "false"
    task = admin.task(task_id)
    assert task["status"] == "stopped" and task["stop_reason"] == "request_limit"
    # the latch holds: raising the limit does not clear it
    r = admin.http.patch(f"/admin/tasks/{task_id}", json={"request_limit": 100})
    assert r.status_code == 200 and r.json()["status"] == "stopped"
    with pytest.raises(openai.BadRequestError):
        chat(client)
    # anthropic shape for the same task: 409, so Claude Code shows a stop, not a login problem
    with pytest.raises(anthropic.ConflictError) as aexc:
        ant(gateway, token).messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert aexc.value.status_code == 409
    assert aexc.value.body["type"] == "error"
    assert aexc.value.body["error"]["type"] == "invalid_request_error"
    assert "is stopped (request_limit" in aexc.value.body["error"]["message"]
    assert aexc.value.response.headers["x-should-retry"] == "false"
    assert len(upstream.requests) == before
    assert admin.task(task_id)["refused_requests"] == 3  # every refusal counted, the first included
    # GETs still work
    assert oai(gateway, token).models.list().data
    # resume is the only way back
    r = admin.http.post(f"/admin/tasks/{task_id}/resume", json={"reason": "raised the limit"})
    assert r.status_code == 200 and r.json()["status"] == "active"
    chat(client)
    kinds = [e["kind"] for e in admin.events(task_id) if e["kind"] != "task_warning"]  # thresholds: timing
    assert kinds == ["created", "stopped", "limits_changed", "resumed"]


def test_unknown_and_missing_token(gateway, upstream):
    before = len(upstream.requests)
    with pytest.raises(openai.AuthenticationError) as exc:
        chat(oai(gateway, "tg-not-a-task"))
    assert exc.value.body["type"] == "invalid_api_key"
    with pytest.raises(anthropic.AuthenticationError) as aexc:
        ant(gateway, "tg-nope").messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert aexc.value.body["error"]["type"] == "authentication_error"
    r = httpx.post(gateway.url + "/v1/chat/completions", json={"model": "m", "messages": []})
    assert r.status_code == 401 and "Missing task token" in r.json()["error"]["message"]
    assert len(upstream.requests) == before


def test_malformed_json_and_oversized_body(gateway, admin, upstream):
    task_id, token = admin.create_task()
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    r = httpx.post(gateway.url + "/v1/chat/completions", content=b'{"model": "m", "messages": [', headers=headers)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_json"
    r = httpx.post(gateway.url + "/v1/messages", content=b"[1, 2]", headers=headers)
    assert r.status_code == 400 and r.json()["type"] == "error"
    big = b'{"model": "m", "messages": [], "pad": "' + b"x" * (33 * 1024 * 1024) + b'"}'
    r = httpx.post(gateway.url + "/v1/chat/completions", content=big, headers=headers)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    assert admin.task(task_id)["admitted_requests"] == 0
    assert upstream.requests == []


def test_keys_never_cross(gateway, admin, upstream):
    _, token = admin.create_task()
    client = oai(gateway, token)
    raw = client.chat.completions.with_raw_response.create(
        model="mock-model", messages=[{"role": "user", "content": "hi"}])
    assert PROVIDER_KEY not in raw.http_response.text
    assert PROVIDER_KEY not in json.dumps(dict(raw.http_response.headers))
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                      json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}) as r:
        streamed = r.read().decode()
    assert PROVIDER_KEY not in streamed
    for seen in upstream.requests:
        assert token not in json.dumps(seen.headers) and token.encode() not in seen.body


def test_upstream_errors_pass_through(gateway, admin, upstream):
    task_id, token = admin.create_task()
    upstream.script("error", status=429, message="slow down", headers={"retry-after": "7"})
    r = httpx.post(gateway.url + "/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                   json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 429
    assert r.headers["retry-after"] == "7"
    assert "x-request-id" in r.headers
    assert r.json()["error"]["message"] == "slow down"
    assert admin.task(task_id)["admitted_requests"] == 1  # failed attempts are not refunded


def test_query_string_kept(gateway, admin, upstream):
    _, token = admin.create_task()
    httpx.post(gateway.url + "/v1/chat/completions?api-version=2024-10-21",
               headers={"authorization": f"Bearer {token}"},
               json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert upstream.requests[-1].path.endswith("?api-version=2024-10-21")


def test_concurrent_requests_admit_exactly_the_limit(gateway, admin, upstream):
    limit, n = 7, 30
    task_id, token = admin.create_task(request_limit=limit)
    statuses: list[int] = []
    lock = threading.Lock()

    def one() -> None:
        r = httpx.post(gateway.url + "/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                       json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
        with lock:
            statuses.append(r.status_code)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses.count(200) == limit and statuses.count(400) == n - limit
    assert len(upstream.requests) == limit
    assert admin.task(task_id)["admitted_requests"] == limit


def test_admin_requires_token_and_validates(gateway):
    r = httpx.get(gateway.url + "/admin/tasks")
    assert r.status_code == 401
    h = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    r = httpx.post(gateway.url + "/admin/tasks", json={"request_limit": -1}, headers=h)
    assert r.status_code == 422
    r = httpx.post(gateway.url + "/admin/tasks", json={"id": "dup-task"}, headers=h)
    assert r.status_code == 201
    r = httpx.post(gateway.url + "/admin/tasks", json={"id": "dup-task"}, headers=h)
    assert r.status_code == 409
    r = httpx.get(gateway.url + "/admin/tasks/nope", headers=h)
    assert r.status_code == 404
    r = httpx.get(gateway.url + "/admin/tasks", params={"status": "active", "limit": 1}, headers=h)
    assert r.status_code == 200 and len(r.json()["data"]) == 1 and r.json()["has_more"]
    r = httpx.get(gateway.url + "/openapi.json")
    assert "/admin/tasks/{task_id}/resume" in r.json()["paths"]


def test_manual_stop_and_health(gateway, admin, upstream):
    task_id, token = admin.create_task()
    r = admin.http.post(f"/admin/tasks/{task_id}/stop", json={"reason": "manual", "message": "budget review"})
    assert r.json()["status"] == "stopped" and r.json()["stop_detail"]["message"] == "budget review"
    with pytest.raises(openai.BadRequestError) as exc:
        chat(oai(gateway, token))
    assert exc.value.body["code"] == "manual"
    assert httpx.get(gateway.url + "/healthz").json() == {"status": "ok"}
    assert httpx.get(gateway.url + "/readyz").status_code == 200


def test_duration_and_token_limits(gateway, admin, upstream):
    task_id, token = admin.create_task(max_duration_s=0.5)
    client = oai(gateway, token)
    chat(client)
    time.sleep(0.7)
    with pytest.raises(openai.BadRequestError) as exc:
        chat(client)
    assert exc.value.body["code"] == "max_duration"
    task_id, token = admin.create_task(token_limit=1)
    client = oai(gateway, token)
    chat(client)  # usage arrives with the response, so the first request passes
    deadline = time.monotonic() + 5  # usage is recorded just after the client has its answer
    while admin.task(task_id)["output_tokens"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(openai.BadRequestError) as exc:
        chat(client)
    assert exc.value.body["code"] == "token_limit"
    assert admin.task(task_id)["stop_detail"]["token_limit"] == 1


def test_unknown_paths_and_methods_answer_in_the_openai_shape(gateway, admin, upstream):
    task_id, token = admin.create_task()
    h = {"authorization": f"Bearer {token}"}
    r = httpx.post(gateway.url + "/v1/images/generations", json={"prompt": "x"}, headers=h)
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_url"
    r = httpx.put(gateway.url + "/v1/chat/completions", json={}, headers=h)
    assert r.status_code == 405 and "error" in r.json()
    r = httpx.post(gateway.url + "/v1/chat/completions", content="\xff\xfe garbage".encode("latin-1"), headers=h)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    assert admin.task(task_id)["admitted_requests"] == 0
    assert upstream.requests == []
