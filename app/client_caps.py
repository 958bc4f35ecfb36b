"""Per-client-address connection caps, so one client's silent connections cannot use up
the connection budget every client shares (``max_connections``, uvicorn's
``limit_concurrency``).

Counted per peer IP address, per gateway process:

- **open connections** (``TASKGATE_MAX_CONNECTIONS_PER_CLIENT``);
- **connections that have not finished their first request's headers**
  (``TASKGATE_MAX_UNFINISHED_PER_CLIENT``): a connection is opened and
  then sends nothing, or trickles its headers.

A connection past either cap is closed as soon as it is accepted (no response: it has
sent nothing). Together with the first-byte deadline (``TASKGATE_FIRST_BYTE_TIMEOUT_S``,
default 5 s, :mod:`app.server`) a silent client holds at most that many connections for 5 s.
Behind a reverse proxy every client has the proxy's address: raise the caps (0 turns a
cap off) and bound clients in the proxy instead (docs/hardening.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class ClientCaps:
    """The counters of one process; ``0`` turns a cap off."""

    max_open: int
    max_unfinished: int
    open: dict[str, int] = field(default_factory=dict)
    unfinished: dict[str, int] = field(default_factory=dict)

    def accept(self, address: str) -> bool:
        """Count a new connection from ``address`` (open and unfinished); ``False``
        (and nothing counted) when either cap is reached."""
        if self.max_open and self.open.get(address, 0) >= self.max_open:
            return False
        if self.max_unfinished and self.unfinished.get(address, 0) >= self.max_unfinished:
            return False
        self.open[address] = self.open.get(address, 0) + 1
        self.unfinished[address] = self.unfinished.get(address, 0) + 1
        return True

    def finished_headers(self, address: str) -> None:
        """The connection's first request has all its headers."""
        _decrement(self.unfinished, address)

    def closed(self, address: str, unfinished: bool) -> None:
        """An accepted connection closed (``unfinished``: before its first headers)."""
        _decrement(self.open, address)
        if unfinished:
            _decrement(self.unfinished, address)


def _decrement(counts: dict[str, int], address: str) -> None:
    left = counts.get(address, 0) - 1
    if left > 0:
        counts[address] = left
    else:
        counts.pop(address, None)
