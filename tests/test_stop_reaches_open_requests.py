"""A stop reaches every open request of its task, in every gateway process (issue 12 §2).

Two real gateway processes share one real PostgreSQL: process A (the session's
gateway) latches a task -- an operator stop, or the loop guard judging a sibling
conversation -- while process B relays a stream (or waits on a non-streamed answer)
of that task from the scripted upstream, which stalls for an hour after its first
content event. The request on B must end with the stop: the stream with its wire
format's terminal error carrying the stop reason, the non-streamed request with the
task_stopped refusal, and the upstream must see its connection closed. Process B
hears the stop through LISTEN/NOTIFY, or -- with ``TASKGATE_STOP_LISTEN=false`` --
through its poller. Times from the stop call to the client's terminal error are
printed (``-s``) and kept in the ``cut_open_requests`` event; the bound asserted is
generous because the test machine is shared.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Iterator

import asyncpg
import httpx
import pytest

from app.db.pool import asyncpg_dsn
from tests.pgbouncer import NOT_INSTALLED, pgbouncer, pgbouncer_binary
from tests.support import Admin, GatewayProcess
from tests.test_loop_guard_e2e import chat_agent, run_until_stopped
from tests.test_watchdog import request_for

BOUND_S = 5.0  # generous: the issue asks for 1 s, the machine is shared; measured times are printed
STALL = "scenario:stall"  # one content event, then an hour of silence


@pytest.fixture(scope="module", params=["listen", "poll"])
def second(request, database_url, upstream) -> Iterator[GatewayProcess]:
    """Process B, hearing stops by LISTEN or by polling only."""
    env = {"TASKGATE_STOP_LISTEN": "false"} if request.param == "poll" else {}
    with GatewayProcess(database_url, upstream.base_url, **env) as gw:
        gw.path = request.param  # type: ignore[attr-defined]
        yield gw


class OpenStream(threading.Thread):
    """A streamed request read in a thread: ``opened`` is set when the first bytes of
    content arrived; ``ended_at`` is when the response body ended."""

    def __init__(self, url: str, token: str, wire: str, stream: bool = True) -> None:
        super().__init__(daemon=True)
        self.path, self.body = request_for(wire, stream)
        self.body["model"] = STALL
        self.url, self.token, self.stream = url, token, stream
        self.opened = threading.Event()
        self.data = b""
        self.status: int | None = None
        self.ended_at: float | None = None

    def run(self) -> None:
        with httpx.stream("POST", self.url + self.path, json=self.body, timeout=60,
                          headers={"authorization": f"Bearer {self.token}"}) as r:
            self.status = r.status_code
            if not self.stream:
                self.opened.set()
            for chunk in r.iter_raw():
                self.data += chunk
                self.opened.set()
        self.ended_at = time.monotonic()
        self.opened.set()

    def events(self) -> list[dict]:
        """The JSON data of every SSE event received."""
        out = []
        for line in self.data.decode().splitlines():
            if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
                out.append(json.loads(line[5:]))
        return out


def _open(second: GatewayProcess, admin: Admin, upstream, wire: str = "chat", stream: bool = True,
          **task: object) -> tuple[str, str, OpenStream]:
    task_id, token = admin.create_task(stream_idle_timeout_s=600, stream_first_event_timeout_s=600, **task)
    s = OpenStream(second.url, token, wire, stream)
    s.start()
    if stream:
        assert s.opened.wait(10), "the stream did not open"
    else:
        upstream.wait_for(lambda: any(r.json and r.json.get("model") == STALL for r in upstream.requests), 10)
    assert s.ended_at is None, s.data
    return task_id, token, s


def _ended(s: OpenStream, since: float) -> float:
    s.join(BOUND_S + 5)
    assert s.ended_at is not None, "the request was not cut"
    return s.ended_at - since


def _upstream_saw_disconnect(upstream) -> None:
    upstream.wait_for(lambda: any(r.disconnected for r in upstream.requests if r.json
                                  and r.json.get("model") == STALL), timeout=5)


def _cut_event(admin: Admin, task_id: str, path: str) -> dict:
    event = admin.wait_for_event(task_id, "cut_open_requests")
    assert event["detail"]["cut"] == 1 and event["detail"]["path"] in (path, "recheck")
    assert "cut 1 open request(s)" in event["message"]
    return event


def test_operator_stop_on_one_process_cuts_a_stream_on_another(gateway, admin, upstream, second):
    task_id, _, s = _open(second, admin, upstream)
    t0 = time.monotonic()
    r = admin.http.post(f"/admin/tasks/{task_id}/stop", json={"reason": "manual", "message": "enough"})
    assert r.status_code == 200
    took = _ended(s, t0)
    print(f"\n[{second.path}] operator stop on A -> terminal error on B: {took * 1000:.0f} ms")
    assert took < BOUND_S
    assert s.status == 200
    error = s.events()[-1]["error"]
    assert error["code"] == "manual" and error["type"] == "task_stopped"
    assert "stopped by an operator: enough" in error["message"]
    assert s.data.endswith(b"data: [DONE]\n\n")
    _upstream_saw_disconnect(upstream)
    event = _cut_event(admin, task_id, second.path)
    assert event["reason"] == "manual"


def test_loop_guard_latch_from_a_sibling_conversation_cuts_a_stream(gateway, admin, upstream, second):
    task_id, token, s = _open(second, admin, upstream, loop_guard={"identical_streak": 3})
    upstream.script("tool_call", name="read_file", arguments={"path": "README.md"})
    sibling = chat_agent(gateway, token, stream=False, session="sibling")
    turns, exc = run_until_stopped(sibling)
    assert exc.body["code"] == "repeated_tool_call"
    assert _ended(s, time.monotonic()) < BOUND_S  # the latch committed before the refusal was sent
    assert s.events()[-1]["error"]["code"] == "repeated_tool_call"
    _upstream_saw_disconnect(upstream)
    took = _cut_event(admin, task_id, second.path)["detail"]["seconds_since_stopped"]
    print(f"\n[{second.path}] loop guard latch committed on A -> stream cut on B: {took * 1000:.0f} ms")


@pytest.mark.parametrize("wire", ["responses", "anthropic"])
def test_each_wire_format_ends_with_its_own_terminal_error(gateway, admin, upstream, second, wire):
    task_id, _, s = _open(second, admin, upstream, wire=wire)
    t0 = time.monotonic()
    admin.http.post(f"/admin/tasks/{task_id}/stop", json={"reason": "budget_exhausted"})
    _ended(s, t0)
    last = s.events()[-1]
    if wire == "responses":
        assert last["type"] == "response.failed"
        assert last["response"]["error"]["code"] == "budget_exhausted"
    else:
        assert last["type"] == "error" and last["error"]["type"] == "invalid_request_error"  # as the 409 refusal
        assert "budget_exhausted" in last["error"]["message"]
    _upstream_saw_disconnect(upstream)


def test_a_non_streamed_request_waiting_for_upstream_gets_the_refusal(gateway, admin, upstream, second):
    task_id, _, s = _open(second, admin, upstream, stream=False)
    t0 = time.monotonic()
    admin.http.post(f"/admin/tasks/{task_id}/stop", json={"reason": "manual"})
    took = _ended(s, t0)
    print(f"\n[{second.path}] operator stop on A -> refusal on B (non-streamed): {took * 1000:.0f} ms")
    assert s.status == 400
    assert json.loads(s.data)["error"]["code"] == "manual"
    _upstream_saw_disconnect(upstream)
    _cut_event(admin, task_id, second.path)


def test_a_finished_stream_and_other_tasks_are_left_alone(gateway, admin, upstream, second):
    other_id, _, other = _open(second, admin, upstream)
    task_id, token = admin.create_task()
    done = httpx.post(second.url + "/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                      json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    assert done.status_code == 200 and done.text.endswith("data: [DONE]\n\n")
    admin.http.post(f"/admin/tasks/{task_id}/stop", json={"reason": "manual"})
    time.sleep(1.5)
    assert other.ended_at is None  # another task's stream keeps running
    assert not any(e["kind"] == "cut_open_requests" for e in admin.events(task_id))
    admin.http.post(f"/admin/tasks/{other_id}/stop", json={"reason": "manual"})
    _ended(other, time.monotonic())


def _sql(database_url: str, query: str) -> object:
    async def run() -> object:
        conn = await asyncpg.connect(asyncpg_dsn(database_url))
        try:
            return await conn.fetchval(query)
        finally:
            await conn.close()
    return asyncio.run(run())


_LISTENERS = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'taskgate-stop-listener'"


def test_the_listener_reconnects_after_losing_its_connection(gateway, admin, upstream, second, database_url):
    if second.path != "listen":
        pytest.skip("LISTEN only")
    before = _sql(database_url, _LISTENERS)
    assert before >= 2  # processes A and B
    _sql(database_url, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                       " WHERE application_name = 'taskgate-stop-listener'")
    deadline = time.monotonic() + 10
    # back and listening: a new connection's last statement is LISTEN (later its keep-alive),
    # not yet the check before it; until then the poller may cut first
    while _sql(database_url, _LISTENERS + " AND (query LIKE 'LISTEN%' OR query = 'SELECT 1')") < before:
        assert time.monotonic() < deadline, "the listeners did not come back"
        time.sleep(0.1)
    task_id, _, s = _open(second, admin, upstream)
    admin.http.post(f"/admin/tasks/{task_id}/stop", json={"reason": "manual"})
    _ended(s, time.monotonic())
    assert _cut_event(admin, task_id, "listen")["detail"]["path"] == "listen"


def test_the_request_limit_latch_leaves_requests_admitted_within_the_limit_running(
        gateway, admin, upstream, second):
    task_id, token, s = _open(second, admin, upstream, request_limit=1)
    r = httpx.post(gateway.url + "/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                   json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "request_limit"
    time.sleep(1.5)
    assert s.ended_at is None  # the one admitted request is still relayed
    admin.http.post(f"/admin/tasks/{task_id}/stop", json={"reason": "manual"})  # already stopped: no-op
    time.sleep(1.0)
    assert s.ended_at is None
    assert not any(e["kind"] == "cut_open_requests" for e in admin.events(task_id))
    admin.http.post(f"/admin/tasks/{task_id}/resume", json={"reason": "test"})
    admin.http.post(f"/admin/tasks/{task_id}/stop", json={"reason": "manual"})
    _ended(s, time.monotonic())  # any other stop does cut it


@pytest.mark.skipif(pgbouncer_binary() is None, reason=NOT_INSTALLED)
def test_through_pgbouncer_without_a_direct_listen_url_the_poller_cuts(gateway, admin, upstream, database_url):
    """LISTEN through PgBouncer in transaction mode would hear nothing: the process sees
    the pooler (its backend pid is not the one it was told at start-up) and polls."""
    with pgbouncer(database_url) as through, GatewayProcess(through, upstream.base_url) as bounced:
        bounced.path = "poll"  # type: ignore[attr-defined]
        task_id, _, s = _open(bounced, admin, upstream)
        admin.http.post(f"/admin/tasks/{task_id}/stop", json={"reason": "manual"})
        _ended(s, time.monotonic())
        assert _cut_event(admin, task_id, "poll")["detail"]["path"] == "poll"
        assert "goes through a pooler" in bounced.output()
