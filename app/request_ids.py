"""Request ids and the optional access log, as one pure ASGI middleware.

Every HTTP request gets an id: the client's ``x-request-id`` when it is sane (1-128
characters of ``A-Z a-z 0-9 . _ : @ / + = -``), else a generated ``req_<24 hex>``.
It is held in :data:`REQUEST_ID` (a context variable) for log lines; the proxy and
admin routes read it there and pass it explicitly to what records task events
(:func:`app.db.tasks.add_event`). It is returned to the client as ``x-taskgate-request-id``, and as ``x-request-id`` when
the response does not carry one already (upstream's own ``x-request-id`` is relayed
unchanged, so support tickets with the provider still work).
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from contextvars import ContextVar
from typing import Any, Iterable, Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The current request's id; ``None`` outside a request.
REQUEST_ID: ContextVar[str | None] = ContextVar("taskgate_request_id", default=None)
_SANE = re.compile(rb"[A-Za-z0-9._:@/+=-]{1,128}")
_OURS = b"x-taskgate-request-id"

access_logger = logging.getLogger("app.access")


def request_id_from(headers: list[tuple[bytes, bytes]]) -> str:
    """The client's sane ``x-request-id`` from raw ASGI headers, or a new id."""
    for name, value in headers:
        if name == b"x-request-id":  # ASGI header names are lower-case
            if _SANE.fullmatch(value):
                return value.decode("ascii")
            break
    return "req_" + secrets.token_hex(12)


class RequestIdMiddleware:
    """ASGI middleware: request id in :data:`REQUEST_ID` and in the response headers;
    with ``access_log`` one ``app.access`` line per request (method, path without
    query, status, duration in ms, request id; never headers or bodies)."""

    def __init__(self, app: ASGIApp, access_log: bool = False) -> None:
        self.app = app
        self.access_log = access_log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id_from(scope["headers"])
        token = REQUEST_ID.set(rid)
        raw_id = rid.encode()
        status = 0
        t0 = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": with_id(message.get("headers") or (), raw_id)}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            if self.access_log:
                log_access(scope, status, t0)
            REQUEST_ID.reset(token)


def with_id(headers: Iterable[tuple[bytes, bytes]], raw_id: bytes) -> list[tuple[bytes, bytes]]:
    """Raw response headers plus the request id: ``x-taskgate-request-id`` always,
    ``x-request-id`` unless the headers carry one (upstream's own, relayed)."""
    out = list(headers)
    out.append((_OURS, raw_id))
    if not any(k.lower() == b"x-request-id" for k, _ in out):
        out.append((b"x-request-id", raw_id))
    return out


def log_access(scope: Mapping[str, Any], status: int, started: float) -> None:
    """The ``app.access`` line of a request that began at ``started``
    (:func:`time.perf_counter`) and was answered ``status`` (0: no response)."""
    ms = (time.perf_counter() - started) * 1000
    access_logger.info("%s %s %s %.1fms", scope["method"], scope["path"], status, ms,
                       extra={"method": scope["method"], "path": scope["path"], "status": status,
                              "duration_ms": round(ms, 1)})
