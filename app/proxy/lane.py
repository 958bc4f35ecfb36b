"""The proxy's own lane through the ASGI stack.

``/v1/*`` POSTs and GETs go from this layer, the outermost of the application's
middleware stack, straight to their endpoint (:func:`app.proxy.routes.proxy_post`,
:func:`app.proxy.routes.proxy_get`): no route matching against the admin API's routes,
no per-request middleware, and no send wrapper on any streamed chunk (each wrapper
cost CPU per chunk and a coroutine frame per open stream). The lane does itself what
those layers did for it, with the same results:

- the request id (:mod:`app.request_ids`): in :data:`~app.request_ids.REQUEST_ID` while
  the request runs, and in the response's headers (:func:`~app.request_ids.with_id`),
  which the lane adds to the response before it is sent; the access-log line;
- what the endpoint raises is answered by the application's own exception handlers
  (``app.exception_handlers``, looked up along the exception's classes as Starlette
  does);
- anything else (a bug) is answered as Starlette's server-error middleware answers it:
  the ``Exception`` handler's 500 when no response has started, then re-raised for
  the server's log.

Other methods (and everything outside ``/v1/``) take the usual path, where the same
endpoints are registered as routes. :class:`GatewayApp` puts the lane in place;
middleware that must see the lane's requests too (tracing) goes in
:attr:`GatewayApp.outer_middleware`, around it; outside all of them,
:class:`app.proxy.run_path.RunPath` turns ``/run/<name>/v1/...`` into ``/v1/...`` with
the run's header.
"""

from __future__ import annotations

import time
from typing import Awaitable, Callable

from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.proxy.relay import RelayResponse
from app.proxy.routes import proxy_get, proxy_post
from app.proxy.run_path import RunPath
from app.request_ids import REQUEST_ID, log_access, request_id_from, with_id

Handler = Callable[[Request, Exception], Awaitable[Response]]
_ENDPOINTS: dict[str, Callable[[Request], Awaitable[Response]]] = {"POST": proxy_post, "GET": proxy_get}


class ProxyLane:
    """ASGI middleware: see the module docstring. ``access_log``: one ``app.access``
    line per lane request, as :class:`app.request_ids.RequestIdMiddleware` writes."""

    def __init__(self, app: ASGIApp, access_log: bool = False) -> None:
        self.app = app
        self.access_log = access_log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = _ENDPOINTS.get(scope.get("method", "")) if scope["type"] == "http" else None
        if endpoint is None or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        rid = request_id_from(scope["headers"])
        token = REQUEST_ID.set(rid)
        started = time.perf_counter()
        request = Request(scope, receive)
        response: Response | None = None
        try:
            try:
                response = await endpoint(request)
            except Exception as exc:
                handler = _handler(scope["app"], exc)
                if handler is None:
                    raise
                response = await handler(request, exc)
            _identify(response, rid.encode())
            await response(scope, receive, send)
        except Exception as exc:
            if response is None or not getattr(response, "started", True):  # a plain response starts first
                await (await _server_error(scope["app"], request, exc))(scope, receive, send)
            raise
        finally:
            if self.access_log:
                log_access(scope, getattr(response, "status_code", 0), started)
            REQUEST_ID.reset(token)


class GatewayApp(FastAPI):
    """The gateway's FastAPI application: :class:`ProxyLane` is the outermost layer of
    its middleware stack, inside :attr:`outer_middleware` (ASGI middleware classes,
    outermost first, that see every request, the lane's included), inside
    :class:`~app.proxy.run_path.RunPath` (a run named in the path)."""

    #: Set before the first request (the stack is built then), as ``state.settings`` is.
    outer_middleware: list[Callable[[ASGIApp], ASGIApp]]

    def build_middleware_stack(self) -> ASGIApp:
        app: ASGIApp = ProxyLane(super().build_middleware_stack(), self.state.settings.access_log)
        for middleware in reversed(self.outer_middleware):
            app = middleware(app)
        return RunPath(app)


def _identify(response: Response, raw_id: bytes) -> None:
    """Give ``response`` the request id's headers (:func:`app.request_ids.with_id`)."""
    if isinstance(response, RelayResponse):
        response.request_id = raw_id  # its headers come from upstream, when it starts
    else:
        response.raw_headers = with_id(response.raw_headers, raw_id)


def _handler(app: Starlette, exc: Exception) -> Handler | None:
    """The app's handler for ``exc`` (nearest class first), short of ``Exception``."""
    handlers = app.exception_handlers
    for cls in type(exc).__mro__:
        if cls is Exception:
            return None
        if cls in handlers:
            handler: Handler = handlers[cls]  # Starlette types its handlers as Any
            return handler
    return None


async def _server_error(app: Starlette, request: Request, exc: Exception) -> Response:
    """The app's ``Exception`` (or 500) handler's answer; a plain 500 without one."""
    handler: Handler | None = app.exception_handlers.get(Exception) or app.exception_handlers.get(500)
    if handler is None:
        return PlainTextResponse("Internal Server Error", status_code=500)
    return await handler(request, exc)
