"""The gateway's own routes and answers: health checks and the exception handlers.

- ``GET /healthz``: the process is up. ``GET /readyz``: the database answers (503
  otherwise, saying why: ``unreachable`` or ``restarting``).
- Every error of the FastAPI app (all but ``/v1``, which the proxy app answers itself in
  the wire formats: :mod:`app.proxy.lane`) is answered in the admin API's shape
  (:mod:`app.admin.errors`), but a :class:`GatewayError` (the MCP gateway's), answered as
  the proxy does (:func:`app.proxy.routes.error_response`) and reported as
  :data:`app.events.GATEWAY_ANSWERED`. A database out of reach is a 503 (one
  rate-limited log line); any other unexpected error a 500 with a request id, its
  traceback in the log under that id.
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from app import events
from app.admin import errors as admin_errors
from app.admin.errors import AdminError
from app.db import sql
from app.db.errors import database_unreachable
from app.errors import GatewayError, unavailable
from app.fault_log import faults
from app.proxy.routes import error_response
from app.request_ids import REQUEST_ID, request_id_from
from app.settings import Settings

logger = logging.getLogger("app.main")


def install(app: FastAPI, settings: Settings) -> None:
    """Add the health routes and the exception handlers to ``app``."""

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        """The process is up."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"])
    async def readyz(request: Request) -> JSONResponse:
        """The database answers (503 otherwise): the gateway can admit requests.
        ``database`` says why not: ``unreachable``, or ``restarting`` (the embedded
        PostgreSQL died and is being restarted)."""
        watcher = getattr(request.app.state, "supervisor", None)
        if watcher is not None and watcher.state != "ok":
            return JSONResponse({"status": "unavailable", "database": watcher.state}, status_code=503)
        try:
            async with asyncio.timeout(settings.database_timeout_s):
                async with request.app.state.db.acquire() as conn:
                    await conn.fetchval(sql.statement("health_probe"))
        except Exception:  # noqa: BLE001
            return JSONResponse({"status": "unavailable", "database": "unreachable"}, status_code=503)
        return JSONResponse({"status": "ready", "database": "ok"})

    @app.exception_handler(GatewayError)
    async def _gateway_error(request: Request, exc: GatewayError) -> Response:
        events.GATEWAY_ANSWERED.emit(events.GatewayAnswered(request.url.path, exc))
        return error_response(request.url.path, exc)

    @app.exception_handler(AdminError)
    async def _admin_error(request: Request, exc: AdminError) -> Response:
        return admin_errors.error_response(exc.status, exc.message, code=exc.code, param=exc.param,
                                           headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 405:
            headers["Allow"] = admin_errors.allow_header(request.app.router.routes, dict(request.scope))
        return admin_errors.error_response(exc.status_code, str(exc.detail), headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        return admin_errors.validation_response(exc)

    @app.exception_handler(asyncpg.PostgresError)
    @app.exception_handler(asyncpg.InterfaceError)
    @app.exception_handler(TimeoutError)
    @app.exception_handler(OSError)
    async def _database_error(request: Request, exc: Exception) -> Response:
        """503 (one rate-limited log line) while the database is out of reach; any other
        database error is a bug: 500 with a request id."""
        if not database_unreachable(exc):
            return _internal_error(request, exc)
        faults.report("database", f"unavailable under {request.url.path}; answering 503", exc)
        err = unavailable()
        return admin_errors.error_response(err.status, err.message, code=err.code)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        return _internal_error(request, exc)


def _internal_error(request: Request, exc: Exception) -> Response:
    """500 with a request id; the traceback goes to the log under that id."""
    # ExceptionMiddleware handlers run inside the console's request-id middleware; the
    # catch-all runs outside it (REQUEST_ID already reset): same id when the client sent one.
    rid = REQUEST_ID.get() or request_id_from(request.scope["headers"])
    logger.error("internal error on %s %s (request id %s)", request.method, request.url.path, rid,
                 exc_info=exc)
    message = f"taskgate hit an internal error (request id {rid}); see its log."
    return admin_errors.error_response(500, message, code="internal_error", request_id=rid)
