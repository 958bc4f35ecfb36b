"""Connections (issue 21, item 6): 2,100 silent connections from one address leave
another address's requests served (real gateway process; the other client binds
127.0.0.2)."""

from __future__ import annotations

import socket
import time

import httpx

from app.client_caps import ClientCaps
from tests.support import Admin, GatewayProcess


def test_silent_connections_from_one_address_leave_another_served(database_url, upstream):
    with GatewayProcess(database_url, upstream.base_url, TASKGATE_MAX_CONNECTIONS="2048",
                        TASKGATE_MAX_CONNECTIONS_PER_CLIENT="256", TASKGATE_MAX_UNFINISHED_PER_CLIENT="32",
                        TASKGATE_HEADER_TIMEOUT_S="30") as gw:
        admin = Admin(gw.url)
        _, token = admin.create_task(request_limit=10_000)
        silent = []
        try:
            for _ in range(2100):
                s = socket.socket()
                s.setblocking(False)
                try:
                    s.connect(("127.0.0.1", gw.port))
                except BlockingIOError:
                    pass
                silent.append(s)
            time.sleep(1.0)
            other = httpx.Client(base_url=gw.url, timeout=10, headers={"authorization": f"Bearer {token}"},
                                 transport=httpx.HTTPTransport(local_address="127.0.0.2"))
            body = {"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]}
            statuses = []
            for _ in range(100):
                try:
                    statuses.append(other.post("/v1/chat/completions", json=body).status_code)
                except httpx.HTTPError:
                    statuses.append(0)
        finally:
            for s in silent:
                s.close()
        served = statuses.count(200)
        print(f"{served} of {len(statuses)} requests of 127.0.0.2 served beside 2,100 silent connections")
        assert served >= 95, statuses


def test_caps_count_per_address():
    caps = ClientCaps(max_open=3, max_unfinished=2)
    assert caps.accept("a") and caps.accept("a")
    assert not caps.accept("a")  # two unfinished already
    assert caps.accept("b")
    caps.finished_headers("a")
    assert caps.accept("a")  # three open, two unfinished
    caps.finished_headers("a")
    assert not caps.accept("a")  # three open
    caps.closed("a", unfinished=False)
    assert caps.accept("a")
    for _ in range(3):
        caps.closed("a", unfinished=True)
    assert "a" not in caps.open and "a" not in caps.unfinished
    assert ClientCaps(0, 0).accept("x")
