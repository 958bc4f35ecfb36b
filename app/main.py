"""The ASGI application: proxy routes, admin API, health checks and error shapes.

``create_app(settings)`` builds an app (``uvicorn --factory app.main:create_app``;
``taskgate serve`` does that). At start-up the app resolves its database (embedded
PostgreSQL when ``TASKGATE_DATABASE_URL`` is unset), migrates it when configured,
and opens one pooled upstream client for the process.
"""

from __future__ import annotations

import asyncio
import os
import logging
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.responses import Response
import asyncpg
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.admin import errors as admin_errors
from app.admin.errors import AdminError
from app.admin.routes import router as admin_router
from app.config import gateway_config
from app import events
from app.console import admin_token
from app.console import install as console
from app.console.logs import configure as configure_logging
from app.request_ids import REQUEST_ID, RequestIdMiddleware, request_id_from
from app.db import embedded, migrate, supervisor
from app.db.errors import database_unreachable
from app.db.pool import create_pool
from app.db.retry import backlog
from app.errors import GatewayError, unavailable
from app.fault_log import faults
from app.proxy.auth import KnownTokens
from app.proxy.endpoints import DEFAULT_ENDPOINTS, parse_endpoints
from app.proxy.lane import ProxyLane
from app.proxy.open_requests import OpenRequests
from app.proxy.redact import Redactor, provider_keys
from app.proxy.routes import error_response
from app.proxy.routes import routes as proxy_routes
from app.proxy.stop_watch import StopWatcher
from app.proxy.upstream import create_client
from app.settings import Settings, get_settings

logger = logging.getLogger("app.main")


async def resolve_database(settings: Settings) -> str:
    """The database URL to use: ``database_url``, or a started embedded PostgreSQL.
    Migrates the embedded database always, a configured one when ``migrate_on_start``
    (over ``migration_database_url`` when set)."""
    url = settings.database_url
    if url is None:
        url = await asyncio.to_thread(embedded.start, settings.data_dir)
        await migrate.upgrade_async(url)
    elif settings.migrate_on_start:
        await migrate.upgrade_async(settings.migration_database_url or url)
    return url


def embedded_pgdata(settings: Settings) -> Path | None:
    """The embedded PostgreSQL data directory this process supervises, or ``None``."""
    if settings.embedded_pgdata is not None:
        return settings.embedded_pgdata
    return embedded.pgdata_dir(settings.data_dir) if settings.database_url is None else None


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the gateway app. ``settings`` defaults to the environment's."""
    settings = settings or get_settings()
    configure_logging(settings.log_level, settings.log_format)
    faults.interval_s = settings.fault_log_interval_s

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if (where := admin_token.ensure(settings)) is not None:
            print(where, file=sys.stderr, flush=True)
        database_url = await resolve_database(settings)
        app.state.db = await create_pool(database_url, settings, direct=embedded_pgdata(settings) is not None)
        app.state.supervisor, supervising = supervisor.start(embedded_pgdata(settings), app.state.db)
        app.state.client = create_client(settings)
        app.state.open_requests = OpenRequests()
        stop_watch = StopWatcher(app.state.db, app.state.open_requests, settings,
                                 settings.listen_database_url or database_url).start()
        await console.started(app)
        try:
            yield
        finally:
            await console.stopping(app)
            await stop_watch.close()
            if supervising is not None:
                supervising.cancel()
            await backlog.drain(timeout_s=5)
            await app.state.client.aclose()
            await app.state.db.close()

    app = FastAPI(
        title="taskgate",
        summary="OpenAI- and Anthropic-compatible gateway with per-task admission and a loop guard.",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None, redoc_url=None,  # /docs is served offline by the console
    )
    app.state.settings = settings
    app.state.gateway_config = gateway_config(settings, os.environ)  # ConfigError: one line
    app.state.config_from_file = settings.config is not None
    app.state.endpoints = DEFAULT_ENDPOINTS + parse_endpoints(settings.extra_endpoints)
    app.state.known_tokens = KnownTokens()
    app.state.redactor = Redactor(provider_keys(settings, app.state.gateway_config.providers.values()))
    app.include_router(admin_router)
    app.router.routes.extend(proxy_routes)
    app.add_middleware(ProxyLane)  # inside the request-id middleware
    app.add_middleware(RequestIdMiddleware, access_log=settings.access_log)
    console.install(app, settings)

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
                    await conn.fetchval("SELECT 1")
        except Exception:  # noqa: BLE001
            return JSONResponse({"status": "unavailable", "database": "unreachable"}, status_code=503)
        return JSONResponse({"status": "ready", "database": "ok"})

    @app.exception_handler(GatewayError)
    async def _gateway_error(request: Request, exc: GatewayError):  # type: ignore[no-untyped-def]
        events.GATEWAY_ANSWERED.emit(events.GatewayAnswered(request.url.path, exc))
        return error_response(request.url.path, exc)

    @app.exception_handler(AdminError)
    async def _admin_error(request: Request, exc: AdminError):  # type: ignore[no-untyped-def]
        return admin_errors.error_response(exc.status, exc.message, code=exc.code, param=exc.param,
                                           headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):  # type: ignore[no-untyped-def]
        if request.url.path.startswith("/v1/"):
            return error_response(request.url.path, GatewayError(
                exc.status_code, "invalid_request_error", None, str(exc.detail)))
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 405:
            headers["Allow"] = admin_errors.allow_header(request.app.router.routes, request.scope)
        return admin_errors.error_response(exc.status_code, str(exc.detail), headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):  # type: ignore[no-untyped-def]
        return admin_errors.validation_response(exc)

    @app.exception_handler(asyncpg.PostgresError)
    @app.exception_handler(asyncpg.InterfaceError)
    @app.exception_handler(TimeoutError)
    @app.exception_handler(OSError)
    async def _database_error(request: Request, exc: Exception):  # type: ignore[no-untyped-def]
        """503 (one rate-limited log line) while the database is out of reach; any other
        database error is a bug: 500 with a request id."""
        if not database_unreachable(exc):
            return _internal_error(request, exc)
        faults.report("database", f"unavailable under {request.url.path}; answering 503", exc)
        return _gateway_or_admin(request, unavailable())

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):  # type: ignore[no-untyped-def]
        return _internal_error(request, exc)

    return app


def _internal_error(request: Request, exc: Exception) -> Response:
    """500 with a request id; the traceback goes to the log under that id."""
    # ExceptionMiddleware handlers run inside the console's request-id middleware; the
    # catch-all runs outside it (REQUEST_ID already reset): same id when the client sent one.
    rid = REQUEST_ID.get() or request_id_from(request.scope["headers"])
    logger.error("internal error on %s %s (request id %s)", request.method, request.url.path, rid,
                 exc_info=exc)
    message = f"taskgate hit an internal error (request id {rid}); see its log."
    if request.url.path.startswith("/v1/"):
        return error_response(request.url.path, GatewayError(
            500, "internal_error", "internal_error", message, {"x-request-id": rid}))
    return admin_errors.error_response(500, message, code="internal_error", request_id=rid)


def _gateway_or_admin(request: Request, err: GatewayError) -> Response:
    if request.url.path.startswith("/v1/"):
        return error_response(request.url.path, err)
    return admin_errors.error_response(err.status, err.message, code=err.code)
