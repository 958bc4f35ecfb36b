"""``/docs`` without a network: Swagger UI's assets served by the gateway itself.

The assets come from the ``swagger-ui-py`` package (which ships a Swagger UI 5 build,
needed for FastAPI's OpenAPI 3.1 document), mounted at ``/docs-static``; the page is
FastAPI's own :func:`fastapi.openapi.docs.get_swagger_ui_html` pointed at them
(https://fastapi.tiangolo.com/how-to/custom-docs-ui-assets/).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles


def swagger_ui_assets() -> Path:
    """The directory with ``swagger-ui-bundle.js`` and ``swagger-ui.css``."""
    spec = importlib.util.find_spec("swagger_ui")  # located, not imported: only its files are used
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the swagger-ui-py package is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / "static"


def install_docs(app: FastAPI) -> None:
    """Serve ``/docs`` from local assets. Create the app with ``docs_url=None`` and
    ``redoc_url=None`` so FastAPI's CDN pages are not registered."""
    app.mount("/docs-static", StaticFiles(directory=swagger_ui_assets()), name="docs-static")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} - API docs",
            swagger_js_url="/docs-static/swagger-ui-bundle.js",
            swagger_css_url="/docs-static/swagger-ui.css",
            swagger_favicon_url="/docs-static/favicon-32x32.png",
            oauth2_redirect_url="/docs/oauth2-redirect",
            swagger_ui_parameters={"validatorUrl": None})

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()
