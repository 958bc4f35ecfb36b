"""Per-client-address connection caps, so one client's silent connections cannot use up
the connection budget every client shares (``max_connections``, uvicorn's
``limit_concurrency``).

Counted per peer IP address, per gateway process:

- **open connections** (``TASKGATE_MAX_CONNECTIONS_PER_CLIENT``);
- **connections that have not finished their first request's headers**
  (``TASKGATE_MAX_UNFINISHED_PER_CLIENT``): a connection is opened and
  then sends nothing, or trickles its headers.

A connection past either cap is still accepted and served. When the process is under
pressure (its open connections at :data:`PRESSURE` of ``TASKGATE_MAX_CONNECTIONS`` or
more), connections past a cap are put *on a short leash*: their first byte and each
request's headers get ``TASKGATE_OVER_CAP_HEADER_TIMEOUT_S`` (default 1 s), those
already waiting included.
A busy host's burst of new connections (SDK clients, every client behind one NAT) is
served as long as there is room; a flood of silent or trickling connections is shed
within a second once it fills three quarters of the connection budget (``max_connections``), so it
cannot take the room the other clients need. Under that pressure :mod:`app.server` also
admits new connections fairly: one past its cap is closed when accepted, and one within
its caps makes room by shedding an idle or silent connection past its cap of the address
holding the most (a flood that reopens what is closed cannot refill the shared budget).
Behind a reverse proxy every client has the proxy's address: bound clients in the proxy
(docs/hardening.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Share of the process's connection budget above which connections past a cap are leashed.
PRESSURE = 0.75


@dataclass(slots=True)
class ClientCaps:
    """The counters of one process; ``0`` turns a cap off. ``budget``: the process's
    connection budget (``max_connections``; 0: none, then connections past a cap are
    always under pressure)."""

    max_open: int
    max_unfinished: int
    budget: int = 0
    open: dict[str, int] = field(default_factory=dict)
    unfinished: dict[str, int] = field(default_factory=dict)
    total: int = 0

    def under_pressure(self) -> bool:
        """Whether the process's open connections reach :data:`PRESSURE` of its budget."""
        return not self.budget or self.total >= PRESSURE * self.budget

    def accept(self, address: str) -> bool:
        """Count a new connection from ``address`` (open and unfinished). Returns whether
        it is within both caps (``False``: counted too; leashed under pressure)."""
        within = not (self.max_open and self.open.get(address, 0) >= self.max_open) and not (
            self.max_unfinished and self.unfinished.get(address, 0) >= self.max_unfinished)
        self.open[address] = self.open.get(address, 0) + 1
        self.unfinished[address] = self.unfinished.get(address, 0) + 1
        self.total += 1
        return within

    def finished_headers(self, address: str) -> None:
        """The connection's first request has all its headers."""
        _decrement(self.unfinished, address)

    def closed(self, address: str, unfinished: bool) -> None:
        """An accepted connection closed (``unfinished``: before its first headers)."""
        _decrement(self.open, address)
        self.total = max(0, self.total - 1)
        if unfinished:
            _decrement(self.unfinished, address)


def _decrement(counts: dict[str, int], address: str) -> None:
    left = counts.get(address, 0) - 1
    if left > 0:
        counts[address] = left
    else:
        counts.pop(address, None)
