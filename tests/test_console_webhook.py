"""The stop webhook against a loopback receiver (a real HTTP server in a thread,
:mod:`tests.webhook_receiver`).

A gateway process with ``TASKGATE_STOP_WEBHOOK_URL`` pointing at the receiver; the
receiver answers with the statuses a test queues (then 200) and can be slow."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.console_support import sample, scrape
from tests.support import Admin, GatewayProcess
from tests.webhook_receiver import Receiver, hooked, receiver  # noqa: F401 - fixtures

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(autouse=True)
def _reset(receiver: Receiver) -> None:
    receiver.reset()


def _chat(gw: GatewayProcess, token: str) -> httpx.Response:
    return httpx.post(gw.url + "/v1/chat/completions", json={"model": "mock-model", "messages": USER},
                      headers={"authorization": f"Bearer {token}"}, timeout=15)


def test_stop_is_announced_once_after_a_retry(hooked, receiver):
    admin = Admin(hooked.url)
    # no warning thresholds: its one request would also post task.threshold (100 %)
    task_id, token = admin.create_task(request_limit=1, metadata={"team": "infra"}, thresholds=[])
    receiver.statuses = [503]
    before = scrape(hooked.url)
    assert _chat(hooked, token).status_code == 200
    assert _chat(hooked, token).status_code == 400
    posts = receiver.wait_for(2)
    assert len(posts) == 2 and posts[0] == posts[1]  # the same document, retried once
    doc = posts[1]["body"]
    assert posts[1]["content_type"] == "application/json"
    task = admin.task(task_id)
    assert doc["task_id"] == task_id and doc["stop_reason"] == "request_limit"
    assert doc["stop_message"] == task["stop_message"]
    assert doc["text"] == f"taskgate: task {task_id} stopped (request_limit). {task['stop_message']}"
    assert doc["counters"]["admitted_requests"] == 1 and doc["counters"]["request_limit"] == 1
    assert doc["stopped_at"].startswith(task["stopped_at"][:16]) and doc["metadata"] == {"team": "infra"}
    time.sleep(0.3)
    assert len(receiver.posts) == 2  # a third refusal-free wait: no more posts
    assert _chat(hooked, token).status_code == 400  # refusing again announces nothing new
    admin.http.post(f"/admin/tasks/{task_id}/stop", json={"reason": "manual"})  # already stopped
    time.sleep(0.5)
    assert len(receiver.posts) == 2
    after = scrape(hooked.url)
    assert sample(after, "taskgate_webhook_deliveries_total", result="delivered") - sample(
        before, "taskgate_webhook_deliveries_total", result="delivered") == 1


def test_failures_are_bounded_counted_and_logged_without_the_url_secret(hooked, receiver):
    admin = Admin(hooked.url)
    task_id, _ = admin.create_task()
    receiver.statuses = [500] * 10
    before = scrape(hooked.url)
    admin.http.post(f"/admin/tasks/{task_id}/stop", json={"reason": "manual", "message": "test"})
    assert len(receiver.wait_for(3)) == 3
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and f"stop webhook for task {task_id}" not in hooked.output():
        time.sleep(0.05)
    time.sleep(0.3)
    assert len(receiver.posts) == 3  # attempts are bounded
    assert receiver.posts[0]["body"]["stop_message"].startswith(
        f"Task '{task_id}' is stopped (manual: stopped by an operator: test)")
    after = scrape(hooked.url)
    assert sample(after, "taskgate_webhook_deliveries_total", result="failed") - sample(
        before, "taskgate_webhook_deliveries_total", result="failed") == 1
    log = hooked.output()
    assert f"stop webhook for task {task_id} to 127.0.0.1 failed after 3 attempts (HTTP 500)" in log
    assert "s3cr3t" not in log


def test_a_slow_receiver_does_not_hold_the_request(hooked, receiver):
    admin = Admin(hooked.url)
    _, token = admin.create_task(request_limit=0)
    receiver.delay_s = 5.0
    t0 = time.monotonic()
    assert _chat(hooked, token).status_code == 400  # this request sets the latch
    assert time.monotonic() - t0 < 4.0  # answered while the receiver is still sleeping
    assert len(receiver.wait_for(1)) == 1
