"""Routing by model: which provider serves a request, under which model name, at what price.

Pure: no I/O. :func:`resolve` reads the ordered ``models`` table of a
:class:`~app.config.schema.GatewayConfig`:

1. Entries whose ``name`` equals the requested model come first, then glob entries
   (``claude-*``), each group in file order.
2. Of those, the first whose provider speaks the endpoint's wire format wins: ``openai``
   for chat completions, completions, Responses and embeddings; ``anthropic`` for
   messages. So ``claude-*`` → anthropic and ``*`` → openai can sit in one table.
3. No entry matches: :class:`ModelNotFound` (404 ``model_not_found``). Entries match but
   none speaks the format: :class:`WrongFormat` (400); taskgate never translates formats.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.config.prices import default_max_output_tokens, default_price
from app.config.schema import GatewayConfig, ModelRoute, Price, Provider
from app.wire.base import ProviderKind


@dataclass(frozen=True, slots=True)
class Route:
    """Where one request goes. ``upstream_model``: the ``model`` to forward (equal to the
    requested one unless the entry is an alias). ``price``: the entry's, else the built-in
    table's for ``upstream_model``, else ``None`` (unknown). ``max_output_tokens``: the
    entry's bound for requests that set none, else the built-in table's."""

    provider_name: str
    provider: Provider
    requested_model: str
    upstream_model: str
    price: Price | None
    max_output_tokens: int | None
    default_max_output_tokens: int | None = None

    @property
    def is_alias(self) -> bool:
        return self.upstream_model != self.requested_model


class RoutingError(LookupError):
    """No usable route; ``str()`` is the message for the client."""


class ModelNotFound(RoutingError):
    """No ``models`` entry matches the requested model."""


class WrongFormat(RoutingError):
    """Entries match the model, but their providers speak another wire format."""


def candidates(config: GatewayConfig, model: str) -> list[ModelRoute]:
    """The entries matching ``model``: exact names first, then globs, each in file order."""
    exact = [r for r in config.models if not r.is_glob and r.matches(model)]
    return exact + [r for r in config.models if r.is_glob and r.matches(model)]


def resolve(config: GatewayConfig, model: str, kind: ProviderKind) -> Route:
    """The route for a request asking for ``model`` on an endpoint of wire format ``kind``.

    Raises :class:`ModelNotFound` or :class:`WrongFormat` (see the module docstring).
    """
    matching = candidates(config, model)
    for entry in matching:
        provider = config.providers[entry.provider]
        if provider.kind == kind:
            upstream_model = entry.upstream_model or model
            return Route(entry.provider, provider, model, upstream_model,
                         entry.price or default_price(upstream_model),
                         entry.max_output_tokens or default_max_output_tokens(upstream_model),
                         entry.default_max_output_tokens)
    if matching:
        names = ", ".join(sorted({e.provider for e in matching}))
        raise WrongFormat(f"Model '{model}' is served by provider {names}, which does not speak the "
                          f"{kind} wire format of this endpoint; taskgate does not translate between formats.")
    raise ModelNotFound(f"The model '{model}' is not configured on this gateway (no entry of the "
                        "'models' table in TASKGATE_CONFIG matches it).")


def routing_table(config: GatewayConfig) -> list[dict[str, str]]:
    """One row per ``models`` entry for ``taskgate config check``: name, provider, kind,
    base URL, upstream model, price (``$in/$out per MTok`` with its source) and output bound."""
    rows = []
    for entry in config.models:
        provider = config.providers[entry.provider]
        price = entry.price
        source = "config"
        if price is None and not entry.is_glob:
            price, source = default_price(entry.upstream_model or entry.name), "built-in"
        rows.append({
            "model": entry.name,
            "provider": entry.provider,
            "kind": provider.kind,
            "base_url": provider.base_url,
            "upstream_model": entry.upstream_model or ("(as requested)" if entry.is_glob else entry.name),
            "price": (f"${price.input_per_mtok:g} in / ${price.output_per_mtok:g} out per MTok ({source})"
                      if price is not None else ("per model, built-in table" if entry.is_glob else "unknown")),
            "max_output_tokens": str(entry.max_output_tokens
                                     or (None if entry.is_glob
                                         else default_max_output_tokens(entry.upstream_model or entry.name))
                                     or "-"),
        })
    return rows
