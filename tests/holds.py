"""Dollar holds as the tests of a killed gateway see them: a gateway that sweeps stranded
holds every :data:`SWEEP_S` (the ``sweeper`` fixture: ``from tests.holds import sweeper``),
a priced request sent in the background (to a gateway that may be killed under it), the
``reservations`` row it leaves behind, and a gateway killed holding one. Real gateway processes, real PostgreSQL."""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

import httpx
import pytest

from app.testing.upstream import UpstreamServer
from tests.support import GatewayProcess, sql

MODEL = "gpt-4.1-mini"  # priced by the built-in table
BODY = json.dumps({"model": MODEL, "max_tokens": 1000, "messages": [{"role": "user", "content": "hi"}]}).encode()
SWEEP_S = 1.0


@pytest.fixture(scope="module")
def sweeper(database_url, upstream) -> Iterator[GatewayProcess]:
    """A gateway that sweeps every :data:`SWEEP_S` s (and whose own requests are never killed)."""
    with GatewayProcess(database_url, upstream.base_url, TASKGATE_RESERVATION_SWEEP_S=str(SWEEP_S)) as gw:
        yield gw


def post(url: str, token: str, timeout: float = 60) -> httpx.Response:
    """POST :data:`BODY` to the gateway at ``url`` as the task of ``token``."""
    return httpx.post(url + "/v1/chat/completions", content=BODY, timeout=timeout,
                      headers={"authorization": f"Bearer {token}", "content-type": "application/json"})


def send_in_background(url: str, token: str) -> threading.Thread:
    """:func:`post` in a daemon thread (started); a gateway killed under it is no error."""
    def send() -> None:
        try:
            post(url, token)
        except httpx.HTTPError:
            pass  # the gateway was killed under it
    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def held(database_url: str, task_id: str, timeout: float = 10) -> Any:
    """The task's ``reservations`` row (an ``asyncpg.Record``) once its hold is recorded;
    AssertionError after ``timeout`` s without one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = sql(database_url, "SELECT * FROM reservations WHERE task_id = $1", task_id)
        if rows:
            return rows[0]
        time.sleep(0.05)
    raise AssertionError("no hold was recorded")


@contextmanager
def hold_then_kill(database_url: str, upstream: UpstreamServer, task_id: str, token: str,
                   **env: str) -> Iterator[tuple[GatewayProcess, Any]]:
    """A gateway that never sweeps (``env`` adds settings) holding dollars for a request of
    ``token`` that the upstream keeps waiting: yields it and the hold's ``reservations``
    row, then ``kill -9`` (nothing settles)."""
    upstream.script("delay", delay_s=120.0, input_tokens=10, output_tokens=10)
    victim = GatewayProcess(database_url, upstream.base_url, TASKGATE_RESERVATION_SWEEP_S="0", **env).start()
    try:
        send_in_background(victim.url, token)
        yield victim, held(database_url, task_id)
    finally:
        victim.proc.kill()  # kill -9: nothing settles
        victim.proc.wait()
