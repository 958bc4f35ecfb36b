"""A bare relay: the floor for any Python gateway built on uvicorn and aiohttp.

An ASGI app of a few lines on the same stack as taskgate (uvicorn with httptools and
uvloop, one process; aiohttp towards the upstream, one pooled session): it forwards
each POST to the bench upstream and passes the answer back chunk by chunk as it is
read, with no authentication, admission, parsing, accounting or watchdog. What it
costs per request and per streamed chunk is what the stack itself costs on this
machine; taskgate's figures minus these are what taskgate's own work costs.

Run by the suite as ``python -m uvicorn bench.bare_relay:app`` with
``BENCH_UPSTREAM`` set to the upstream's base URL.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable

import aiohttp

from bench.services import Service, child_env, free_port, spawn, wait_http

_session: aiohttp.ClientSession | None = None


async def app(scope: dict, receive: Callable, send: Callable) -> None:
    """Relay one request to ``$BENCH_UPSTREAM`` (``/healthz`` answers itself)."""
    global _session
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        if _session is not None:
            await _session.close()
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["path"] == "/healthz":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    if _session is None:
        _session = aiohttp.ClientSession(auto_decompress=False,
                                         connector=aiohttp.TCPConnector(limit=0, limit_per_host=0))
    headers = {"content-type": "application/json", "accept-encoding": "identity"}
    async with _session.post(os.environ["BENCH_UPSTREAM"] + scope["path"], data=body, headers=headers) as r:
        await send({"type": "http.response.start", "status": r.status,
                    "headers": [(b"content-type", r.headers.get("content-type", "").encode())]})
        while chunk := await r.content.readany():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


def start(upstream: Service, log_dir: Path) -> Service:
    """Start it on a free port, relaying to ``upstream``; wait until it answers."""
    port = free_port()
    svc = spawn("bare_relay", [sys.executable, "-m", "uvicorn", "bench.bare_relay:app", "--port", str(port),
                               "--loop", "uvloop", "--http", "httptools", "--no-access-log",
                               "--log-level", "warning"],
                port, log_dir, child_env(BENCH_UPSTREAM=upstream.url))
    wait_http(svc, "/healthz", 20)
    return svc
