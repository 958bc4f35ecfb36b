"""Request ids and the optional access log: one helper (:class:`Tagged`) for both apps.

Every HTTP request gets an id: the client's ``x-request-id`` when it is sane (1-128
characters of ``A-Z a-z 0-9 . _ : @ / + = -``), else a generated ``req_<24 hex>``.
It is held in :data:`REQUEST_ID` (a context variable) for log lines; the proxy and
admin routes read it there and pass it explicitly to what records task events
(:func:`app.db.tasks.add_event`). It is returned to the client as
``x-taskgate-request-id``, and as ``x-request-id`` when the response does not carry one
already (upstream's own ``x-request-id`` is relayed unchanged, so support tickets with the
provider still work).

:class:`Tagged` is one request's id from its first byte to its end (the access line
then). The FastAPI app takes it through :class:`RequestIdMiddleware`, which adds the
headers as the response starts; the proxy (:mod:`app.proxy.lane`) gives them to its
response before it is sent, with no wrapper around each streamed chunk.
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


class Tagged:
    """One HTTP request's id while it runs: in :data:`REQUEST_ID` from construction to
    :meth:`end`, which writes the ``app.access`` line when ``access_log`` (method, path
    without query, status, duration in ms, request id; never headers or bodies)."""

    __slots__ = ("raw_id", "_scope", "_access_log", "_token", "_started")

    def __init__(self, scope: Scope, access_log: bool) -> None:
        rid = request_id_from(scope["headers"])
        self.raw_id = rid.encode()  #: the id as response headers carry it
        self._scope = scope
        self._access_log = access_log
        self._token = REQUEST_ID.set(rid)
        self._started = time.perf_counter()

    def headers(self, headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """Raw response headers with this request's id (:func:`with_id`)."""
        return with_id(headers, self.raw_id)

    def end(self, status: int) -> None:
        """The request was answered ``status`` (0: no response): its access line, and
        :data:`REQUEST_ID` back to what it was."""
        if self._access_log:
            log_access(self._scope, status, self._started)
        REQUEST_ID.reset(self._token)


class RequestIdMiddleware:
    """ASGI middleware: :class:`Tagged` around each HTTP request, its headers added to
    the response as it starts (the FastAPI app's; the proxy tags its own)."""

    def __init__(self, app: ASGIApp, access_log: bool = False) -> None:
        self.app = app
        self.access_log = access_log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        tagged = Tagged(scope, self.access_log)
        status = 0

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": tagged.headers(message.get("headers") or ())}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            tagged.end(status)


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
