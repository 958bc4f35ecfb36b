"""Slow, silent and oversized clients are closed within the configured bounds (issue 8
item 3). Short limits, generous asserts: the machine may be loaded."""

from __future__ import annotations

import socket
import time
from typing import Iterator

import pytest

from app.testing.upstream import UpstreamServer
from tests.support import Admin, GatewayProcess

HEADER_S, BODY_S = 1.0, 1.5


@pytest.fixture(scope="module")
def bounded(database_url: str, upstream: UpstreamServer) -> Iterator[GatewayProcess]:
    with GatewayProcess(database_url, upstream.base_url, TASKGATE_HEADER_TIMEOUT_S=str(HEADER_S),
                        TASKGATE_BODY_TIMEOUT_S=str(BODY_S), TASKGATE_MAX_HEADER_BYTES="8192",
                        TASKGATE_MAX_CONNECTIONS="40",
                        # the global cap and the header deadline alone (per-client caps: test_client_caps.py)
                        TASKGATE_MAX_UNFINISHED_PER_CLIENT="0", TASKGATE_FIRST_BYTE_TIMEOUT_S="0") as gw:
        yield gw


def connect(gw: GatewayProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", gw.port), timeout=15)


def closed_after(s: socket.socket, trickle: bytes = b"", every_s: float = 0.2,
                 limit_s: float = 12) -> tuple[float, bytes]:
    """Seconds until the server closes ``s`` (sending ``trickle`` one byte every
    ``every_s`` meanwhile), and what it sent."""
    started = time.monotonic()
    got = b""
    s.settimeout(every_s)
    i = 0
    while time.monotonic() - started < limit_s:
        if trickle:
            try:
                s.send(trickle[i % len(trickle):i % len(trickle) + 1])
            except OSError:
                break
            i += 1
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    return time.monotonic() - started, got


def test_silent_connections_are_closed(bounded):
    socks = [connect(bounded) for _ in range(20)]
    elapsed, got = closed_after(socks[0])
    assert elapsed < HEADER_S + 4 and got == b""
    for s in socks[1:]:
        assert closed_after(s, limit_s=5)[0] < 5
        s.close()


def test_slow_headers_are_closed_within_the_header_deadline(bounded):
    s = connect(bounded)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
    elapsed, got = closed_after(s, trickle=b"x-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
    assert elapsed < HEADER_S + 4
    assert got.startswith(b"HTTP/1.1 408")


def test_a_later_request_on_a_kept_alive_connection_has_its_own_header_deadline(bounded):
    s = connect(bounded)
    s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")  # whole in one read: no deadline armed
    first = b""
    while b"\r\n\r\n" not in first:
        first += s.recv(65536)
    assert first.startswith(b"HTTP/1.1 200")
    s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")  # the next one's headers never end
    elapsed, got = closed_after(s, trickle=b"x-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
    assert elapsed < HEADER_S + 4
    assert b"HTTP/1.1 408" in got


def test_slow_bodies_are_refused_within_the_body_deadline(bounded, upstream):
    admin = Admin(bounded.url)
    task_id, token = admin.create_task()
    for path in ("/v1/chat/completions", "/admin/tasks"):
        s = connect(bounded)
        auth = token if path.startswith("/v1") else "tgadm-wrong"
        s.sendall(f"POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {auth}\r\n"
                  "content-type: application/json\r\ncontent-length: 100000\r\n\r\n{".encode())
        elapsed, got = closed_after(s, trickle=b'"a": 1, ')
        assert elapsed < BODY_S + 6, path
        if path.startswith("/v1"):
            assert got.startswith(b"HTTP/1.1 408") and b"request_timeout" in got
    assert admin.task(task_id)["admitted_requests"] == 0
    assert upstream.requests == []


def test_oversized_headers_are_refused(bounded, upstream):
    s = connect(bounded)
    s.sendall(b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 20_000 + b"\r\n\r\n")
    elapsed, got = closed_after(s)
    assert got.startswith(b"HTTP/1.1 431") and elapsed < 5
    s = connect(bounded)
    s.sendall(b"GET /v1/models?" + b"q" * 20_000 + b" HTTP/1.1\r\nhost: x\r\n\r\n")
    assert closed_after(s)[1].startswith(b"HTTP/1.1 431")
    assert upstream.requests == []


def test_open_connections_are_capped(bounded):
    idle = [connect(bounded) for _ in range(40)]
    try:
        s = connect(bounded)
        s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        _, got = closed_after(s, limit_s=5)
        assert got.startswith(b"HTTP/1.1 503")
    finally:
        for c in idle:
            c.close()
    time.sleep(0.5)
    s = connect(bounded)
    s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    assert closed_after(s, limit_s=5)[1].startswith(b"HTTP/1.1 200")


def test_a_client_leaving_mid_body_leaves_no_traceback(bounded, upstream):
    admin = Admin(bounded.url)
    task_id, token = admin.create_task()
    s = connect(bounded)
    s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\n"
              "content-length: 1000\r\n\r\n{\"model\":".encode())
    time.sleep(0.3)
    s.close()
    time.sleep(0.5)
    assert "Traceback" not in bounded.output()
    assert admin.task(task_id)["admitted_requests"] == 0 and upstream.requests == []
