"""The ``/v1`` proxy as a plain ASGI app, beside the FastAPI app of everything else.

:func:`app.main.create_app` serves both behind one dispatcher that chooses by path:
``/v1`` and ``/v1/...`` (``/run/<name>/v1/...`` turned into them first,
:mod:`app.proxy.run_path`) come here; the rest goes to the FastAPI app (admin API,
console, health, MCP), which also runs the lifespan. :class:`ProxyApp` shares the FastAPI
app's ``state`` (:func:`app.app_state.app_state` reads ``request.app.state``), and does
for each request, with no route matching and no send wrapper on any streamed chunk:

- the method's endpoint: ``POST`` :func:`~app.proxy.routes.proxy_post`, ``GET`` and
  ``HEAD`` :func:`~app.proxy.routes.proxy_get` (a ``HEAD`` matches no allowed endpoint:
  404 ``unknown_url``); any other method 405, in the wire format's shape, no ``Allow``;
- the request id (:class:`app.request_ids.Tagged`): in
  :data:`~app.request_ids.REQUEST_ID` while the request runs, in the response's headers
  (given to the response before it is sent), the access-log line at the end;
- its own error renderer (:func:`answer`): every error in the caller's wire format, a
  :class:`~app.errors.GatewayError` as raised (reported as
  :data:`app.events.GATEWAY_ANSWERED`), a database out of reach as 503 (one
  rate-limited log line); anything else (a bug) a 500 with the request id, its traceback
  in the log under that id, sent only when no response has started, then re-raised for
  the server's log.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

import asyncpg
from starlette.datastructures import State
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app import events
from app.db.errors import database_unreachable
from app.errors import GatewayError, unavailable
from app.fault_log import faults
from app.proxy.relay import RelayResponse
from app.proxy.routes import error_response, proxy_get, proxy_post
from app.proxy.run_path import PREFIX, unprefixed
from app.request_ids import REQUEST_ID, Tagged, request_id_from

logger = logging.getLogger("app.main")  # the FastAPI app's handlers log bugs under the same name

Endpoint = Callable[[Request], Awaitable[Response]]
#: Errors that may mean the database is out of reach (:func:`app.db.errors.database_unreachable`).
DATABASE_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError, OSError)


async def method_not_allowed(request: Request) -> Response:
    """405 in the path's wire format (the methods the proxy has no endpoint for)."""
    return error_response(request.scope["path"],
                          GatewayError(405, "invalid_request_error", None, "Method Not Allowed"))


_ENDPOINTS: dict[str, Endpoint] = {"POST": proxy_post, "GET": proxy_get, "HEAD": proxy_get}


def proxied(scope: Scope) -> Scope | None:
    """The scope the proxy serves for ``scope``, or ``None`` when it is not the proxy's:
    an HTTP request under ``/run/<name>/`` is the request without that prefix, with the
    run's header (:func:`app.proxy.run_path.unprefixed`); then ``/v1`` and ``/v1/...``
    HTTP requests are the proxy's, every other scope (the lifespan included) is not."""
    if scope["type"] != "http":
        return None
    path = scope["path"]
    if path.startswith(PREFIX):
        scope = unprefixed(scope) or scope
        path = scope["path"]
    return scope if path.startswith("/v1/") or path == "/v1" else None


class ProxyApp:
    """The ``/v1`` proxy (module docstring). ``state``: the FastAPI app's, filled by its
    lifespan; ``access_log``: one ``app.access`` line per request. Given ``api``, it is
    also the gateway's one outer layer (what :class:`app.main.Dispatch` does when a
    middleware wraps the proxy): a scope not :func:`proxied` goes to ``api``, so an open
    stream holds one coroutine frame less (~290 B)."""

    def __init__(self, state: State, access_log: bool = False, api: ASGIApp | None = None) -> None:
        self.state = state
        self.access_log = access_log
        self.api = api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.api is not None:
            served = proxied(scope)
            if served is None:
                await self.api(scope, receive, send)
                return
            scope = served
        scope["app"] = self  # request.app, as Starlette sets it
        tagged = Tagged(scope, self.access_log)
        response: Response | None = None
        try:
            # the Request is not held while the response runs (~150 B per open stream)
            response = await answer(_ENDPOINTS.get(scope["method"], method_not_allowed), Request(scope, receive))
            _identify(response, tagged)
            await response(scope, receive, send)
        except Exception as exc:
            if response is None or not getattr(response, "started", True):  # a plain response starts first
                response = internal_error(Request(scope, receive), exc)
                _identify(response, tagged)
                await response(scope, receive, send)
            raise
        finally:
            tagged.end(getattr(response, "status_code", 0))


async def answer(endpoint: Endpoint, request: Request) -> Response:
    """``endpoint``'s response, or its error's in the wire format: a
    :class:`~app.errors.GatewayError` as raised, a database out of reach as 503, any
    other database error as :func:`internal_error`; a bug propagates."""
    try:
        return await endpoint(request)
    except GatewayError as exc:
        events.GATEWAY_ANSWERED.emit(events.GatewayAnswered(request.scope["path"], exc))
        return error_response(request.scope["path"], exc)
    except DATABASE_ERRORS as exc:
        if not database_unreachable(exc):
            return internal_error(request, exc)
        faults.report("database", f"unavailable under {request.scope['path']}; answering 503", exc)
        return error_response(request.scope["path"], unavailable())


def internal_error(request: Request, exc: BaseException) -> Response:
    """500 in the wire format, naming the request id; the traceback goes to the log under it."""
    rid = REQUEST_ID.get() or request_id_from(request.scope["headers"])
    logger.error("internal error on %s %s (request id %s)", request.method, request.scope["path"], rid,
                 exc_info=exc)
    message = f"taskgate hit an internal error (request id {rid}); see its log."
    return error_response(request.scope["path"], GatewayError(
        500, "internal_error", "internal_error", message, {"x-request-id": rid}))


def _identify(response: Response, tagged: Tagged) -> None:
    """Give ``response`` the request id's headers (:func:`app.request_ids.with_id`)."""
    if isinstance(response, RelayResponse):
        response.request_id = tagged.raw_id  # its headers come from upstream, when it starts
    else:
        response.raw_headers = tagged.headers(response.raw_headers)
