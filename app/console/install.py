"""Mount the console on the gateway app: one call from :func:`app.main.create_app`."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from fastapi import FastAPI
from starlette.responses import FileResponse
from starlette.routing import Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from app.console import listeners, loop_lag, metrics, request_log, tracing, webhook
from app.console.docs import install_docs
from app.console.ui_headers import SecureHeaders

UI_DIR = Path(__file__).resolve().parent / "ui"


def install(app: FastAPI) -> list[Callable[[ASGIApp], ASGIApp]]:
    """``/metrics``, ``/ui`` (the dashboard), offline ``/docs``, and the console's
    subscriptions to the core's events (:mod:`app.console.listeners`). Returns the ASGI
    middleware (outermost first) that must see every request, the proxy's included:
    :func:`app.main.create_app` puts it around both apps."""
    outer: list[Callable[[ASGIApp], ASGIApp]] = []
    app.router.routes.append(Route("/metrics", metrics.metrics_endpoint, methods=["GET"],
                                   include_in_schema=False))
    if UI_DIR.is_dir():
        app.router.routes.append(Route("/favicon.ico", _favicon, methods=["GET"], include_in_schema=False))
        app.mount("/ui", SecureHeaders(StaticFiles(directory=UI_DIR, html=True)), name="ui")
    install_docs(app)
    metrics.configure(app.state.gateway_config)
    listeners.subscribe()
    if tracing.setup():  # OTEL_EXPORTER_OTLP_ENDPOINT set and the otel extra installed
        outer.append(tracing.TraceMiddleware)  # around both apps: every /v1 and /mcp POST
        tracing.subscribe()
    return outer


async def _favicon(_request: object) -> FileResponse:
    """``/favicon.ico``: the dashboard's icon (an SVG, which browsers take at this path)."""
    return FileResponse(UI_DIR / "favicon.svg", media_type="image/svg+xml",
                        headers={"cache-control": "public, max-age=86400"})


async def started(app: FastAPI) -> None:
    """At start-up, once the pool is open."""
    webhook.start(app.state.settings, app.state.db)
    app.state.request_log = request_log.Writer(app.state.db, app.state.settings.request_log_retention_s)
    app.state.request_log.start()
    loop_lag.start()


async def stopping(app: FastAPI) -> None:
    """At shutdown, before the pool closes."""
    writer = getattr(app.state, "request_log", None)
    if writer is not None:
        await writer.stop()
    await webhook.stop()
    await loop_lag.stop()
    metrics.process_exit()
    tracing.shutdown()
