"""What the gateway keeps on ``app.state`` (Starlette's untyped attribute bag), typed.

:func:`app.main.create_app` sets every attribute (``db``, ``client``, ``open_requests``
and ``supervisor`` once the lifespan has started); code that serves a request reads them
through :func:`app_state`, so a type checker knows what each one is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    import asyncpg
    import httpx
    from starlette.applications import Starlette

    from app.config.schema import GatewayConfig
    from app.db.supervisor import Supervisor
    from app.proxy.auth import KnownTokens
    from app.proxy.capacity import UpstreamSlots
    from app.proxy.endpoints import Endpoint
    from app.proxy.open_requests import OpenRequests
    from app.proxy.redact import Redactor
    from app.proxy.transport import UpstreamClient
    from app.settings import Settings


class AppState(Protocol):
    """The attributes of ``app.state`` (see the module docstring)."""

    settings: Settings
    gateway_config: GatewayConfig
    config_from_file: bool  # providers and models from TASKGATE_CONFIG, not the built-in defaults
    endpoints: tuple[Endpoint, ...]  # the allowlist
    known_tokens: KnownTokens
    redactor: Redactor
    db: asyncpg.Pool
    client: UpstreamClient
    mcp_client: httpx.AsyncClient  # to the MCP servers of mcp_servers: (app.mcp.routes)
    open_requests: OpenRequests
    upstream_slots: UpstreamSlots  # the cap on connections to upstream
    supervisor: Supervisor | None


def app_state(app: Starlette) -> AppState:
    """``app.state``, typed: Starlette's ``State`` holds whatever is set on it, and
    :func:`app.main.create_app` sets exactly :class:`AppState`'s attributes."""
    return cast("AppState", app.state)
