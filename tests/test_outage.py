"""A database outage after admission: post-response usage is retried until the
database is back (issue 8 item 15), and the refusals meanwhile log one line per failure
kind with a count, not one traceback each (item 17)."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import httpx
import pytest

from app.db import embedded, migrate
from tests.databases import data_dir  # noqa: F401 - fixture
from tests.support import Admin, GatewayProcess, stop_embedded

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

pytestmark = pytest.mark.timeout(300)  # kills, restarts and load on a loaded machine


@contextmanager
def outage_database(data_dir: Path) -> Iterator[tuple[str, Callable[[], object], Callable[[], object]]]:
    """An embedded PostgreSQL the test stops (``immediate``) and restarts itself."""
    url = embedded.start(data_dir)
    migrate.upgrade(url)
    pgdata = embedded.pgdata_dir(data_dir)
    sockets = embedded.socket_dir(pgdata)
    try:
        yield url, (lambda: stop_embedded(data_dir)), (lambda: embedded.restart(pgdata, sockets))
    finally:
        stop_embedded(data_dir)


def _post(url: str, token: str) -> int:
    return httpx.post(url + "/v1/chat/completions", json=BODY, timeout=60,
                      headers={"authorization": f"Bearer {token}"}).status_code


def test_usage_of_responses_finished_during_an_outage_lands_after_restart(upstream, data_dir):
    n, input_tokens, output_tokens = 20, 7, 5
    with outage_database(data_dir) as (url, stop, restart):
        with GatewayProcess(url, upstream.base_url, TASKGATE_DATABASE_TIMEOUT_S="2") as gw:
            admin = Admin(gw.url)
            task_id, token = admin.create_task(request_limit=100)
            # upstream answers after 1.5 s: the database goes down while they are in flight
            upstream.script("delay", delay_s=1.5, input_tokens=input_tokens, output_tokens=output_tokens)
            with ThreadPoolExecutor(n) as pool:
                answers = [pool.submit(_post, gw.url, token) for _ in range(n)]
                deadline = time.monotonic() + 30
                while len([r for r in upstream.requests if r.method == "POST"]) < n:
                    assert time.monotonic() < deadline, "requests did not reach upstream"
                    time.sleep(0.02)
                stop()
                statuses = [a.result() for a in answers]
            assert statuses == [200] * n  # admitted before the outage, answered during it
            time.sleep(3)  # the database stays down for ~3 s after the responses
            restart()
            deadline = time.monotonic() + 30
            while True:
                try:
                    task = admin.task(task_id)
                except AssertionError:  # 503 until the pool reconnects
                    task = {}
                if task.get("input_tokens") == n * input_tokens:
                    break
                assert time.monotonic() < deadline, f"usage did not land: {task}\n{gw.output()[-3000:]}"
                time.sleep(0.2)
            assert task["output_tokens"] == n * output_tokens and task["admitted_requests"] == n
            assert "dropped" not in gw.output()


def test_an_outage_logs_one_line_per_failure_kind_with_a_count(upstream, data_dir):
    refusals = 300
    with outage_database(data_dir) as (url, stop, _):
        with GatewayProcess(url, upstream.base_url, TASKGATE_DATABASE_TIMEOUT_S="2",
                            TASKGATE_FAULT_LOG_INTERVAL_S="2") as gw:
            _, token = Admin(gw.url).create_task()
            stop()
            started = time.monotonic()

            async def storm() -> list[int]:
                async with httpx.AsyncClient(timeout=60) as client:
                    async def one() -> int:
                        r = await client.post(gw.url + "/v1/chat/completions", json=BODY,
                                              headers={"authorization": f"Bearer {token}"})
                        return r.status_code
                    return await asyncio.gather(*(one() for _ in range(refusals)))

            statuses = asyncio.run(storm())
            elapsed = time.monotonic() - started
            time.sleep(2.1)
            assert statuses == [503] * refusals
            assert httpx.post(gw.url + "/v1/chat/completions", json=BODY,
                              headers={"authorization": f"Bearer {token}"}).status_code == 503
            log = gw.output()
    lines = [line for line in log.splitlines() if "refus" in line]
    assert "Traceback" not in log
    # one line at once, then at most one per 2 s interval, per kind of exception
    assert 1 <= len(lines) <= 3 * (2 + elapsed / 2), log[-3000:]
    assert any(" more in the last " in line for line in lines), lines
