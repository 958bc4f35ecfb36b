"""Configuration of providers and models (``TASKGATE_CONFIG``), and routing by model.

- :mod:`app.config.schema`: the document's shape (pydantic).
- :mod:`app.config.loader`: YAML file → validated document, one-line errors with lines.
- :mod:`app.config.routing`: model → provider, alias and price (pure).
- :mod:`app.config.prices`: the built-in price table (``prices.json``).

Without a file, :func:`environment_config` describes today's environment variables as one
``openai`` provider and one ``anthropic`` provider that take every model.
"""

from __future__ import annotations

from collections.abc import Mapping

from app.config.loader import ConfigError, load
from app.config.schema import GatewayConfig, ModelRoute, Provider

__all__ = ["ConfigError", "GatewayConfig", "environment_config", "gateway_config"]


def environment_config(upstream_base_url: str, upstream_api_key: str | None,
                       anthropic_base_url: str, anthropic_api_key: str | None) -> GatewayConfig:
    """The configuration implied by ``TASKGATE_UPSTREAM_*`` and ``TASKGATE_ANTHROPIC_*``:
    providers ``openai`` and ``anthropic``, each taking every model of its wire format."""
    return GatewayConfig(
        providers={
            "openai": Provider(kind="openai", base_url=upstream_base_url, api_key=upstream_api_key),
            "anthropic": Provider(kind="anthropic", base_url=anthropic_base_url, api_key=anthropic_api_key),
        },
        models=[ModelRoute(name="*", provider="openai"), ModelRoute(name="*", provider="anthropic")],
    )


def gateway_config(settings: object, environ: Mapping[str, str]) -> GatewayConfig:
    """The configuration in force: the file named by ``settings.config`` (validated, with
    ``${NAME}`` resolved from ``environ``), else :func:`environment_config`. Raises
    :class:`ConfigError` for a bad file."""
    path = getattr(settings, "config", None)
    if path:
        return load(path, environ)
    return environment_config(settings.upstream_base_url, settings.upstream_api_key,  # type: ignore[attr-defined]
                              settings.anthropic_base_url, settings.anthropic_api_key)  # type: ignore[attr-defined]
