"""Readable stops, request ids and structured logs, against real gateway processes.

- The task object's ``stop_message`` is the very message the agent's refused request
  carried; events carry a sentence and the id of the request that caused them.
- Request ids: a sane client ``x-request-id`` is kept and returned, anything else is
  replaced by a generated one.
- ``TASKGATE_LOG_FORMAT=json`` with the access log: one JSON object per line with the
  request id and task id; stops and stalls are logged; no token or key ever is.
"""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from app.admission.refusals import event_message
from app.request_ids import request_id_from
from tests.support import ADMIN_TOKEN, ANTHROPIC_PROVIDER_KEY, PROVIDER_KEY, Admin, GatewayProcess

USER = [{"role": "user", "content": "hi"}]
CHAT = "/v1/chat/completions"


def _chat(gateway, token: str, request_id: str | None = None, **body) -> httpx.Response:
    headers = {"authorization": f"Bearer {token}"}
    if request_id is not None:
        headers["x-request-id"] = request_id
    return httpx.post(gateway.url + CHAT, json={"model": "mock-model", "messages": USER, **body},
                      headers=headers, timeout=15)


def test_stop_message_is_what_the_agent_got(gateway, admin):
    task_id, token = admin.create_task(request_limit=1)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)
    client.chat.completions.create(model="mock-model", messages=USER)
    # usage is recorded just after the client has its last byte; the sentence quotes the
    # counters as they are, so let that land first
    deadline = time.monotonic() + 10
    while admin.task(task_id)["total_tokens"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="mock-model", messages=USER)
    task = admin.task(task_id)
    assert task["stop_message"] == refused.value.body["message"]
    assert "it used all 1 requests of its request_limit" in task["stop_message"]
    assert admin.task(admin.create_task()[0])["stop_message"] is None  # active: none


def test_events_carry_sentence_and_request_id(gateway, admin):
    task_id, token = admin.create_task(request_limit=1)
    first = _chat(gateway, token, request_id="client-req.1")
    assert first.status_code == 200
    assert first.headers["x-taskgate-request-id"] == "client-req.1"
    refused = _chat(gateway, token, request_id="client-req.2")
    assert refused.status_code == 400
    assert refused.headers["x-request-id"] == "client-req.2"  # the gateway's own answer
    admin.http.post(f"/admin/tasks/{task_id}/resume", json={"reason": "more budget please"})
    events = {e["kind"]: e for e in admin.events(task_id)}
    assert events["stopped"]["detail"]["request_id"] == "client-req.2"
    assert events["stopped"]["message"] == (
        "Stopped (request_limit): it used all 1 requests of its request_limit.")
    assert events["resumed"]["message"].startswith("Resumed by an operator (more budget please)")
    assert events["created"]["message"] == "Created with request_limit=1."


def test_request_ids_sane_kept_else_generated(gateway, admin):
    _, token = admin.create_task()
    generated = _chat(gateway, token, request_id="has spaces; and {braces}")
    rid = generated.headers["x-taskgate-request-id"]
    assert rid.startswith("req_") and len(rid) == 28
    assert _chat(gateway, token).headers["x-taskgate-request-id"].startswith("req_")
    assert _chat(gateway, token, request_id="x" * 129).headers["x-taskgate-request-id"] != "x" * 129
    assert request_id_from([(b"x-request-id", b"abc-123_4:5/6")]) == "abc-123_4:5/6"
    assert request_id_from([(b"x-request-id", b"a\r\nb")]).startswith("req_")


def test_event_sentences_for_every_kind():
    assert event_message("stream_stalled", None, {"endpoint": CHAT, "code": "stream_idle_timeout"}) == (
        "Upstream stream stalled on /v1/chat/completions (stream_idle_timeout); taskgate closed it.")
    assert event_message("limits_changed", None, {"before": {"request_limit": 3},
                                                 "after": {"request_limit": 9}}) == (
        "Limits changed: request_limit 3 → 9.")
    assert event_message("loop_warning", "repeated_tool_call", {"tool_name": "read_file", "count": 3}) == (
        "Loop guard warned the model: read_file repeated 3 times.")
    assert event_message("stopped", "manual", {"by": "operator", "message": "lunch"}) == (
        "Stopped (manual): stopped by an operator: lunch.")
    assert event_message("something_new", "x", {}) == "Something new (x)."


def test_json_logs_with_request_and_task_ids_and_no_secrets(database_url, upstream):
    with GatewayProcess(database_url, upstream.base_url, TASKGATE_LOG_FORMAT="json",
                        TASKGATE_ACCESS_LOG="true") as gw:
        admin = Admin(gw.url)
        task_id, token = admin.create_task(request_limit=1, stream_first_event_timeout_s=1.0,
                                           stream_idle_timeout_s=0.3)
        with httpx.stream("POST", gw.url + CHAT, timeout=15, headers={
                "authorization": f"Bearer {token}", "x-request-id": "stall-1"},
                json={"model": "scenario:stall", "messages": USER, "stream": True}) as r:
            r.read()
        assert _chat(gw, token, request_id="refused-1").status_code == 400
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and '"status": 400' not in gw.output():
            time.sleep(0.05)
        output = gw.output()
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert lines and all({"time", "level", "logger", "message", "request_id"} <= set(x) for x in lines)
    stall = [x for x in lines if x["logger"] == "app.console" and x.get("outcome") == "stalled"]
    assert stall and stall[0]["task_id"] == task_id and stall[0]["request_id"] == "stall-1"
    stop = [x for x in lines if x["logger"] == "app.db.tasks" and x.get("reason") == "request_limit"]
    assert stop and stop[0]["task_id"] == task_id and stop[0]["request_id"] == "refused-1"
    access = [x for x in lines if x["logger"] == "app.access" and x.get("path") == CHAT]
    assert {x["status"] for x in access} >= {200, 400} and all(x["duration_ms"] >= 0 for x in access)
    for secret in (token, ADMIN_TOKEN, PROVIDER_KEY, ANTHROPIC_PROVIDER_KEY):
        assert secret not in output
