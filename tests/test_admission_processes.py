"""Admission across processes, restarts and database outages: several real gateway
processes on one real PostgreSQL."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from app.db import embedded, migrate
from tests.support import Admin, GatewayProcess, stop_embedded


def _post(url: str, token: str) -> int:
    return httpx.post(url + "/v1/chat/completions", headers={"authorization": f"Bearer {token}"},
                      json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                      timeout=30).status_code


def test_two_processes_admit_exactly_the_limit(gateway, admin, database_url, upstream):
    limit, n = 11, 40
    task_id, token = admin.create_task(request_limit=limit)
    with GatewayProcess(database_url, upstream.base_url) as second:
        urls = [gateway.url, second.url]
        statuses: list[int] = []
        lock = threading.Lock()

        def one(i: int) -> None:
            status = _post(urls[i % 2], token)
            with lock:
                statuses.append(status)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert statuses.count(200) == limit, statuses
        assert statuses.count(400) == n - limit
        assert len([r for r in upstream.requests if r.method == "POST"]) == limit
        for url in urls:  # GETs stay free and working on a stopped task
            r = httpx.get(url + "/v1/models", headers={"authorization": f"Bearer {token}"})
            assert r.status_code == 200
    task = admin.task(task_id)
    assert task["admitted_requests"] == limit
    assert task["status"] == "stopped" and task["stop_reason"] == "request_limit"


def test_latch_survives_restart(database_url, upstream):
    with GatewayProcess(database_url, upstream.base_url) as gw:
        task_id, token = Admin(gw.url).create_task(request_limit=1)
        assert _post(gw.url, token) == 200
        assert _post(gw.url, token) == 400
    before = len(upstream.requests)
    with GatewayProcess(database_url, upstream.base_url) as gw:
        assert _post(gw.url, token) == 400
        task = Admin(gw.url).task(task_id)
        assert task["status"] == "stopped" and task["admitted_requests"] == 1
    assert len(upstream.requests) == before


def test_database_down_fails_closed(upstream):
    with tempfile.TemporaryDirectory(prefix="taskgate-pg-down-") as tmp:
        url = embedded.start(Path(tmp))
        migrate.upgrade(url)
        try:
            with GatewayProcess(url, upstream.base_url, TASKGATE_DATABASE_TIMEOUT_S="2") as gw:
                _, token = Admin(gw.url).create_task()
                assert _post(gw.url, token) == 200
                before = len(upstream.requests)
                stop_embedded(Path(tmp))
                client = openai.OpenAI(base_url=gw.url + "/v1", api_key=token, max_retries=0)
                with pytest.raises(openai.InternalServerError) as exc:
                    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
                assert exc.value.status_code == 503
                assert exc.value.body["type"] == "gateway_unavailable"
                with pytest.raises(anthropic.APIStatusError) as aexc:
                    anthropic.Anthropic(base_url=gw.url, api_key=token, max_retries=0).messages.create(
                        model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
                assert aexc.value.status_code == 503 and aexc.value.body["type"] == "error"
                # GETs need the database too (to authenticate): refused, not forwarded
                assert httpx.get(gw.url + "/v1/models", headers={"authorization": f"Bearer {token}"}).status_code == 503
                assert len(upstream.requests) == before
                assert httpx.get(gw.url + "/readyz").status_code == 503
                assert httpx.get(gw.url + "/healthz").status_code == 200
                assert "Traceback" not in httpx.get(gw.url + "/admin/tasks", headers=Admin(gw.url).http.headers).text
        finally:
            stop_embedded(Path(tmp))


def test_embedded_database_stops_with_the_gateway(upstream, tmp_path):
    """SIGTERM (docker stop, systemd, kill) stops the embedded PostgreSQL it started."""
    gw = GatewayProcess(None, upstream.base_url, TASKGATE_DATA_DIR=str(tmp_path)).start(timeout=60)
    try:
        _, token = Admin(gw.url).create_task()
        assert _post(gw.url, token) == 200
        assert (tmp_path / "pgdata" / "postmaster.pid").exists()
    finally:
        gw.stop()
    assert gw.proc.returncode == 0
    assert not (tmp_path / "pgdata" / "postmaster.pid").exists()
