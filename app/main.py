"""The ASGI application: the composition root that wires the rooms together.

``create_app(settings)`` builds the ASGI app (``uvicorn --factory app.main:create_app``;
``taskgate serve`` does that): two apps behind one dispatcher (:class:`Dispatch`) that
chooses by path. ``/v1`` and ``/v1/...`` go to the proxy, a plain ASGI app
(:class:`app.proxy.lane.ProxyApp`); everything else goes to the FastAPI app: the admin
API, the health routes and exception handlers (:mod:`app.handlers`), the MCP gateway and
the console (:mod:`app.console.install`, which subscribes to the core's events). The
FastAPI app runs the lifespan, and the proxy shares its ``state``. The dispatcher first
reads a run named in the path (``/run/<name>/v1/...`` is ``/v1/...`` of a run,
:mod:`app.proxy.run_path`); the console's middleware that sees every request (tracing,
only when OpenTelemetry is on) wraps each of the two apps. Without it, the proxy is the
dispatcher itself (:class:`~app.proxy.lane.ProxyApp` given the FastAPI app).

At start-up the lifespan resolves the database (embedded PostgreSQL when
``TASKGATE_DATABASE_URL`` is unset), migrates it when configured, and opens one pooled
upstream client for the process.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from app import handlers, jobs
from app.admin.budgets import router as budgets_router
from app.admin.maintenance import router as maintenance_router
from app.admin.routes import router as admin_router
from app.config import gateway_config
from app.console import admin_token
from app.console import install as console
from app.console.logs import configure as configure_logging
from app.db import embedded, migrate, supervisor
from app.db.pool import create_pool
from app.db.retry import backlog
from app.fault_log import faults
from app.mcp import routes as mcp_routes
from app.proxy.auth import KnownTokens
from app.proxy.capacity import UpstreamSlots
from app.proxy.endpoints import DEFAULT_ENDPOINTS, parse_endpoints
from app.proxy.lane import ProxyApp, proxied
from app.proxy.open_requests import OpenRequests
from app.proxy.redact import Redactor, provider_keys
from app.proxy.stop_watch import StopWatcher
from app.proxy.upstream import create_client
from app.request_ids import RequestIdMiddleware
from app.settings import Settings, get_settings


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


class Dispatch:
    """The gateway's one outer layer: an HTTP request under ``/run/<name>/`` is the request
    without that prefix, with the run's header (:func:`app.proxy.run_path.unprefixed`);
    then ``/v1`` and ``/v1/...`` HTTP requests go to ``proxy``, every other scope (the
    lifespan included) to ``api``.

    One layer, not a layer per job: every ASGI layer is a coroutine frame held for the
    life of each open stream (``python -m bench.stream_memory``); with no middleware
    around the proxy, the proxy is this layer itself (:class:`app.proxy.lane.ProxyApp`
    given ``api``), one frame less. The choice is :func:`app.proxy.lane.proxied`."""

    def __init__(self, api: ASGIApp, proxy: ASGIApp) -> None:
        self.api = api
        self.proxy = proxy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        served = proxied(scope)
        if served is not None:
            await self.proxy(served, receive, send)
            return
        await self.api(scope, receive, send)


def create_app(settings: Settings | None = None) -> ASGIApp:
    """Build the gateway's ASGI app (module docstring). ``settings`` defaults to the
    environment's."""
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
        app.state.mcp_client = mcp_routes.create_client()
        app.state.upstream_slots = UpstreamSlots(settings.upstream_max_connections, settings.upstream_slot_wait_s)
        app.state.open_requests = OpenRequests()
        stop_watch = StopWatcher(app.state.db, app.state.open_requests, settings,
                                 settings.listen_database_url or database_url).start()
        maintenance = jobs.start(app.state.db, settings)
        await console.started(app)
        # Start-up's objects (modules, settings, the app: ~160k) leave the collector's
        # scans: each full collection over them paused the event loop ~150 ms, which
        # was the p99 at c=64 (bench.tail: p99 226-273 -> 148-152 ms; docs/performance.md).
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            await console.stopping(app)
            await stop_watch.close()
            await jobs.stop(maintenance)
            if supervising is not None:
                supervising.cancel()
            await backlog.drain(timeout_s=5)
            await app.state.client.aclose()
            await app.state.mcp_client.aclose()
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
    app.include_router(maintenance_router)
    app.include_router(budgets_router)
    app.router.routes.extend(mcp_routes.routes)
    app.add_middleware(RequestIdMiddleware, access_log=settings.access_log)  # the proxy tags its own
    outer = console.install(app)
    handlers.install(app, settings)
    if not outer:  # the proxy is the outer layer itself (Dispatch's docstring)
        return ProxyApp(app.state, settings.access_log, api=app)
    api: ASGIApp = app
    proxy: ASGIApp = ProxyApp(app.state, settings.access_log)
    for middleware in reversed(outer):  # around both apps, inside the run's rewrite
        api, proxy = middleware(api), middleware(proxy)
    return Dispatch(api, proxy)
