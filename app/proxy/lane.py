"""The proxy's own lane through the ASGI stack.

``/v1/*`` POSTs and GETs go from this middleware straight to their endpoint
(:func:`app.proxy.routes.proxy_post`, :func:`app.proxy.routes.proxy_get`): no route
matching against the admin API's routes, no exception middleware, no per-request
wrappers, and two send wrappers fewer on every streamed chunk. What the endpoint
raises is answered by the application's own exception handlers
(``app.exception_handlers``, looked up along the exception's classes as Starlette
does); ``Exception`` itself is left to the outer server-error middleware and its
handler, as before. Installed inside the request-id middleware, so ids and the access
log are unchanged. Other methods (and everything outside ``/v1/``) take the usual
path, where the same endpoints are registered as routes.
"""

from __future__ import annotations

from typing import Awaitable, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response

from app.proxy.routes import proxy_get, proxy_post

_ENDPOINTS: dict[str, Callable[[Request], Awaitable[Response]]] = {"POST": proxy_post, "GET": proxy_get}


class ProxyLane:
    """ASGI middleware: see the module docstring."""

    def __init__(self, app: Callable) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        endpoint = _ENDPOINTS.get(scope.get("method", "")) if scope["type"] == "http" else None
        if endpoint is None or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            response = await endpoint(request)
        except Exception as exc:
            handler = _handler(scope["app"], exc)
            if handler is None:
                raise
            response = await handler(request, exc)
        await response(scope, receive, send)


def _handler(app: Starlette, exc: Exception) -> Callable[[Request, Exception], Awaitable[Response]] | None:
    """The app's handler for ``exc`` (nearest class first), short of ``Exception``."""
    handlers = app.exception_handlers
    for cls in type(exc).__mro__:
        if cls is Exception:
            return None
        if cls in handlers:
            return handlers[cls]
    return None
