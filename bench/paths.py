"""The paths a request can take to the upstream, and what to watch on each.

- ``direct``: client → upstream (the floor).
- ``taskgate_embedded`` / ``taskgate_server``: client → taskgate → upstream, with
  admission on the embedded PostgreSQL / on the server at 127.0.0.1:5432; loop
  guard on (the default).
- ``taskgate_workers``: as ``taskgate_embedded`` (same database and tasks), with
  ``--workers N`` gateway processes (N from the suite's ``--workers``; latency
  figure only).
- ``bare_relay``: client → a bare uvicorn + aiohttp relay → upstream: no gateway
  logic at all, the floor for a Python relay on this stack (:mod:`bench.bare_relay`).
- ``portkey``: client → Portkey gateway (Node) → upstream (latency, streaming, relay CPU
  and memory figures).
- ``litellm``: client → LiteLLM proxy → upstream (master key, no database).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import httpx

from bench.metrics import CpuWatch, PgBackends
from bench.services import Service

LABELS = {
    "direct": "direct (floor)",
    "taskgate_embedded": "taskgate, embedded PG",
    "taskgate_workers": "taskgate, N workers, embedded PG",
    "taskgate_server": "taskgate, PG server",
    "bare_relay": "bare relay (uvicorn + aiohttp, no gateway logic)",
    "portkey": "Portkey gateway",
    "litellm": "LiteLLM proxy",
}
ORDER = ("direct", "taskgate_embedded", "taskgate_workers", "taskgate_server", "bare_relay", "portkey", "litellm")
TASKGATE = ("taskgate_embedded", "taskgate_server")
"""The taskgate paths every taskgate figure runs on."""


@dataclass
class Path:
    """One path. ``unavailable`` says why it cannot be measured (``None``: it can)."""

    key: str
    port: int = 0
    hot_token: str = ""
    spread_tokens: list[str] = field(default_factory=list)
    proxy: Service | None = None
    upstream: Service | None = None
    pg: PgBackends | None = None
    database_url: str | None = None
    unavailable: str | None = None
    notes: list[str] = field(default_factory=list)
    fresh_proxy: Callable[[], Service] | None = None
    """Starts a new proxy process of this path (same database/config): the memory
    figure measures a fresh process each repeat, since freed memory stays in RSS."""
    headers: dict[str, str] = field(default_factory=dict)
    """Added to every request (Portkey's routing headers)."""
    figures: frozenset[str] | None = None
    """The figures this path takes part in (``None``: every figure that applies)."""

    def runs(self, figure: str) -> bool:
        return self.ok and (self.figures is None or figure in self.figures)

    @property
    def label(self) -> str:
        return LABELS[self.key]

    @property
    def ok(self) -> bool:
        return self.unavailable is None

    def watch(self) -> CpuWatch:
        """CPU groups for this path: ``proxy``, ``upstream`` and (taskgate)
        ``postgres``."""
        groups = {}
        if self.proxy is not None:
            proxy = self.proxy
            groups["proxy"] = lambda: [proxy.pid]
        counters = {}
        if self.upstream is not None:
            upstream = self.upstream
            groups["upstream"] = lambda: [upstream.pid]
            counters["upstream_connections"] = lambda: _upstream_stat(upstream, "connections")
            counters["upstream_requests"] = lambda: _upstream_stat(upstream, "requests")
        return CpuWatch(groups, self.pg, counters=counters)

    def spec(self, **kw: object) -> dict[str, object]:
        """A load spec aimed at this path (``tokens`` default to the spread set)."""
        spec: dict[str, object] = {"host": "127.0.0.1", "port": self.port, "headers": self.headers,
                                   "tokens": self.spread_tokens or [self.hot_token]}
        spec.update(kw)
        return spec


_STATS_CLIENT = httpx.Client(timeout=2)
"""One keep-alive connection for reading the upstream's counters, so the reads do
not count as new upstream connections themselves."""


def _upstream_stat(upstream: Service, key: str) -> float:
    return float(_STATS_CLIENT.get(upstream.url + "/_bench/stats").json()[key])
