"""A gateway started while the embedded PostgreSQL is restarting comes up (issue 21,
item 7): start-up takes the supervisor's restart lock and waits for the restart."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from app.db import embedded
from tests.support import Admin, GatewayProcess

pytestmark = pytest.mark.timeout(300)


def test_a_gateway_started_during_an_embedded_restart_comes_up(upstream, tmp_path):
    first = GatewayProcess(None, upstream.base_url, TASKGATE_DATA_DIR=str(tmp_path)).start(timeout=90)
    second = GatewayProcess(None, upstream.base_url, TASKGATE_DATA_DIR=str(tmp_path))
    try:
        pgdata = embedded.pgdata_dir(tmp_path)
        os.kill(embedded.postmaster_pid(pgdata), signal.SIGKILL)
        time.sleep(0.3)  # the first gateway's supervisor is restarting it now
        second.start(timeout=120)  # raised "gateway exited" (status 2) before the lock
        admin = Admin(second.url)
        _, token = admin.create_task()
        body = {"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]}
        deadline = time.monotonic() + 60
        while True:
            r = httpx.post(second.url + "/v1/chat/completions", json=body, timeout=10,
                           headers={"authorization": f"Bearer {token}"})
            if r.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert r.status_code == 200, r.text
    finally:
        second.stop()
        first.stop()
    assert not (tmp_path / "pgdata" / "postmaster.pid").exists() or not embedded.is_running(pgdata)
