"""Which provider serves a proxied request, and the gateway's own model list.

The configuration (:mod:`app.config`) is read once per process into ``app.state``;
these helpers turn its routing decisions into gateway errors in the endpoint's shape:

- a model no ``models`` entry matches → 404 ``model_not_found``;
- a model served only by providers of the other wire format → 400 ``model_wrong_format``;

both before admission, so nothing is counted.
"""

from __future__ import annotations

from typing import Any

from app.config.routing import ModelNotFound, Route, WrongFormat, candidates, resolve
from app.config.schema import GatewayConfig, Provider
from app.errors import GatewayError
from app.wire.base import ProviderKind


def route_request(config: GatewayConfig, kind: ProviderKind, model: str | None) -> Route:
    """The route for a request body's ``model`` (``None`` or missing: matched as ``""``,
    so only a catch-all ``*`` entry takes it and upstream answers for the missing field).

    Raises :class:`GatewayError` 404 ``model_not_found`` or 400 ``model_wrong_format``."""
    try:
        return resolve(config, model or "", kind)
    except ModelNotFound as exc:
        raise GatewayError(404, "invalid_request_error", "model_not_found",
                           f"{exc} Nothing was forwarded or counted.") from None
    except WrongFormat as exc:
        raise GatewayError(400, "invalid_request_error", "model_wrong_format",
                           f"{exc} Nothing was forwarded or counted.") from None


def default_provider(config: GatewayConfig, kind: ProviderKind) -> Provider:
    """The provider for requests that name no model (model listing, operator-added
    endpoints): the first provider of ``kind`` in the configuration. Raises 404
    ``unknown_url`` when none is configured."""
    for provider in config.providers.values():
        if provider.kind == kind:
            return provider
    raise GatewayError(404, "invalid_request_error", "unknown_url",
                       f"No {kind} provider is configured on this gateway.")


def model_object(name: str, owned_by: str, anthropic: bool) -> dict[str, Any]:
    """One entry of a model list in the client's shape (OpenAI ``model`` object or
    Anthropic ``ModelInfo``)."""
    if anthropic:
        return {"type": "model", "id": name, "display_name": name, "created_at": "1970-01-01T00:00:00Z"}
    return {"id": name, "object": "model", "created": 0, "owned_by": owned_by}


def configured_models(config: GatewayConfig, kind: ProviderKind) -> list[dict[str, Any]]:
    """The exact model names of the ``models`` table served by providers of ``kind``
    (globs are not names), in file order, without duplicates."""
    seen: dict[str, dict[str, Any]] = {}
    for entry in config.models:
        if entry.is_glob or entry.name in seen or config.providers[entry.provider].kind != kind:
            continue
        seen[entry.name] = model_object(entry.name, entry.provider, kind == "anthropic")
    return list(seen.values())


def model_list_body(models: list[dict[str, Any]], anthropic: bool) -> dict[str, Any]:
    """``GET /v1/models`` body: OpenAI ``{"object": "list", "data"}`` or Anthropic's
    paginated ``{"data", "has_more", "first_id", "last_id"}``."""
    if anthropic:
        return {"data": models, "has_more": False,
                "first_id": models[0]["id"] if models else None,
                "last_id": models[-1]["id"] if models else None}
    return {"object": "list", "data": models}


def model_for_id(config: GatewayConfig, kind: ProviderKind, model: str) -> dict[str, Any]:
    """``GET /v1/models/{id}`` answered from the configuration: the model object when an
    entry of ``kind`` matches ``model`` (exactly or by glob), else 404 ``model_not_found``."""
    for entry in candidates(config, model):
        if config.providers[entry.provider].kind == kind:
            return model_object(model, entry.provider, kind == "anthropic")
    raise GatewayError(404, "invalid_request_error", "model_not_found",
                       f"The model '{model}' is not configured on this gateway.")
