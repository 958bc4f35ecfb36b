"""How ``taskgate serve`` runs uvicorn: bounds on slow, silent and oversized clients.

uvicorn bounds idle keep-alive connections (``timeout_keep_alive``) and, through
``limit_concurrency``, the number of connections and requests it serves at once
(above it, new requests get ``503 Service Unavailable``). It does not bound how long a
client may take to send its request line and headers, nor their size with the
httptools parser, so :class:`BoundedHttpToolsProtocol` adds both:

- **Header deadline** (``header_timeout_s``): from the moment a connection opens (and
  from the first byte of each later request on it) the request line and headers must
  have arrived in full within the deadline, however slowly the bytes trickle in;
  otherwise the connection is closed (``408`` first when part of a request came).
- **Header size cap** (``max_header_bytes``): request target plus header names and
  values; above it, ``431 Request Header Fields Too Large`` and the connection closes.
- **Body deadline** (``body_timeout_s``): the whole body must arrive within the deadline
  from the end of the headers, for every route. The proxy answers a late body first, in
  its endpoint's error shape (:func:`app.proxy.inbound.read_body`); this protocol is
  the backstop one second later for routes that do not (``408``, or a plain close when
  a response was already sent).

- **Per-client caps** (:mod:`app.client_caps`): open connections and connections that
  have not finished their first headers, per peer address; while the process is under
  pressure, a connection past a cap is on a short leash: its first byte and each
  request's headers get ``over_cap_header_timeout_s`` (1 s).
- **Fair admission under a flood**: while the process is under pressure, a *new*
  connection past its address's cap is closed at once (the cap is enforced before the
  shared budget is charged: a client that reopens what is closed cannot refill it), and
  a new connection within its caps makes room by closing one idle or silent connection
  past its cap of the address holding the most (never one with a request in progress).
- **First-byte deadline** (``first_byte_timeout_s``): a new connection that sends
  nothing within it is closed (shorter than the header deadline).
- **Disconnects reported**: every request's scope offers the
  :data:`app.proxy.relay.ON_DISCONNECT` extension, so the relay learns that its client
  left from this protocol's ``connection_lost`` instead of a task per exchange waiting
  on ``receive`` (~1 KiB per open stream: the task, its coroutines, a waiter).

A protocol class is uvicorn's documented extension point (its ``http`` option).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.client_caps import ClientCaps
from app.proxy.relay import ON_DISCONNECT
from app.settings import Settings, get_settings

_408 = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
_431 = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain\r\n"
        b"content-length: 33\r\nconnection: close\r\n\r\nRequest headers are too large.\r\n\r\n")


class HeadersTooLarge(Exception):
    """Raised inside the parser's callback to stop parsing an oversized request."""


_caps: ClientCaps | None = None


def client_caps(settings: Settings) -> ClientCaps:
    """This process's per-client-address counters (:mod:`app.client_caps`)."""
    global _caps
    if _caps is None:
        _caps = ClientCaps(settings.max_connections_per_client, settings.max_unfinished_per_client,
                           settings.max_connections)
    return _caps


#: Connections past a cap accepted while there was no pressure, still without their first
#: headers: leashed all at once when pressure comes.
_waiting: set["BoundedHttpToolsProtocol"] = set()
#: Open connections accepted past their address's cap, by address: shed first (idle or
#: silent ones) to make room for a connection within its caps under pressure.
_over_cap: dict[str, set["BoundedHttpToolsProtocol"]] = {}


def _shed_one() -> bool:
    """Close one connection past its cap that has no request in progress (silent, or
    idle between requests), of the address with the most open connections; ``False``
    when there is none."""
    if _caps is None:
        return False
    for address in sorted(_over_cap, key=lambda a: _caps.open.get(a, 0) if _caps else 0, reverse=True):
        for conn in _over_cap[address]:
            if conn._idle():
                conn.transport.close()
                return True
    return False


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline and a header size cap
    (module docstring); both read from :func:`app.settings.get_settings`."""

    # Its own state in slots: added to uvicorn's attributes in the instance dict, it grew
    # that dict past its first size, ~1.5 KiB more per connection (tracemalloc).
    __slots__ = ("_header_timeout_s", "_max_header_bytes", "_header_bytes", "_body_timeout_s", "_header_timer",
                 "_body_timer", "_body_pending", "_too_large", "_request_begun", "_caps", "_first_byte_timeout_s",
                 "_first_byte_timer", "_peer", "_over_cap_timeout_s", "_unfinished", "_extensions",
                 "_on_disconnect")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = get_settings()
        self._header_timeout_s = settings.header_timeout_s
        self._max_header_bytes = settings.max_header_bytes
        self._header_bytes = 0
        self._body_timeout_s = settings.body_timeout_s
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_pending = False  # headers in, body not yet complete
        self._too_large = False
        self._request_begun = False
        self._caps = client_caps(settings)
        self._first_byte_timeout_s = settings.first_byte_timeout_s
        self._first_byte_timer: asyncio.TimerHandle | None = None
        self._peer: str | None = None  # counted in the caps while set
        self._over_cap_timeout_s = settings.over_cap_header_timeout_s
        self._unfinished = False
        # one per connection, given to each of its requests' scopes
        self._extensions: dict[str, dict[object, object]] = {ON_DISCONNECT: {"watch": self._watch_disconnect}}
        self._on_disconnect: Callable[[], None] | None = None

    def _watch_disconnect(self, callback: Callable[[], None] | None) -> None:
        """The :data:`~app.proxy.relay.ON_DISCONNECT` extension
        (:class:`app.proxy.relay.OnDisconnect`): ``callback`` runs (``call_soon``) when
        the connection is lost before the current response completed; ``None`` withdraws it."""
        self._on_disconnect = callback
        if callback is None:
            return
        if self.cycle is not None and self.cycle.disconnected:  # gone already
            self._on_disconnect = None
            self.loop.call_soon(callback)
        else:
            self.flow.resume_reading()  # as uvicorn's receive() does while it waits: a close is seen

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        address = peer[0] if isinstance(peer, tuple) and peer else None
        self._arm()
        if self._first_byte_timeout_s:
            self._first_byte_timer = self.loop.call_later(self._first_byte_timeout_s, self._silent)
        if address is not None:
            self._peer, self._unfinished = address, True
            if not self._caps.accept(address):
                if not self._caps.under_pressure():
                    _over_cap.setdefault(address, set()).add(self)
                    _waiting.add(self)
                    return
                for waiting in _waiting:
                    waiting._leash(self._over_cap_timeout_s)
                _waiting.clear()
                self.transport.close()  # past its cap under pressure: not charged to the budget others share
            elif self._caps.under_pressure():
                _shed_one()  # room for a client within its caps, from the heaviest one past its cap

    def _idle(self) -> bool:
        """No request in progress: nothing received yet, or between kept-alive requests."""
        return (not self._request_begun and not self._body_pending and not self.transport.is_closing()
                and (self.cycle is None or self.cycle.response_complete))

    def _leash(self, timeout_s: float) -> None:
        """Past this client's cap under pressure: the first byte and every request's
        headers of this connection get ``timeout_s`` from now at most. (Its keep-alive
        idle time stays: closing kept-alive connections early races clients reusing them.)"""
        if timeout_s <= 0 or self.transport.is_closing():
            return
        self._header_timeout_s = min(self._header_timeout_s or timeout_s, timeout_s)
        deadline = self.loop.time() + timeout_s
        if self._first_byte_timer is not None and self._first_byte_timer.when() > deadline:
            self._first_byte_timer.cancel()
            self._first_byte_timer = self.loop.call_at(deadline, self._silent)
        if self._header_timer is not None and self._header_timer.when() > deadline:
            self._header_timer.cancel()
            self._header_timer = self.loop.call_at(deadline, self._headers_late)
        elif self._header_timer is None and self._unfinished:
            self._header_timer = self.loop.call_at(deadline, self._headers_late)

    def data_received(self, data: bytes) -> None:
        if self._first_byte_timer is not None:
            self._first_byte_timer.cancel()
            self._first_byte_timer = None
        super().data_received(data)
        # The header and body deadlines of a request still arriving start now, in the read
        # that brought its first bytes or its headers; a request whose headers and body came
        # whole in one read (the usual case) never arms and cancels their timers.
        if (self._request_begun or self._body_pending) and not self.transport.is_closing():
            if self._request_begun and self._header_timer is None:
                self._arm()
            if self._body_pending and self._body_timer is None:
                self._body_timer = self.loop.call_later(self._body_timeout_s + 1.0, self._body_late)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._disarm_body()
        if self._first_byte_timer is not None:
            self._first_byte_timer.cancel()
            self._first_byte_timer = None
        _waiting.discard(self)
        if self._peer is not None:
            self._caps.closed(self._peer, self._unfinished)
            over = _over_cap.get(self._peer)
            if over is not None:
                over.discard(self)
                if not over:
                    del _over_cap[self._peer]
            self._peer = None
        super().connection_lost(exc)
        callback, self._on_disconnect = self._on_disconnect, None
        if callback is not None and self.cycle is not None and self.cycle.disconnected:  # mid-response
            self.loop.call_soon(callback)

    def _silent(self) -> None:
        """No byte within the first-byte deadline: close (nothing to answer)."""
        self._first_byte_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope["extensions"] = self._extensions
        self._header_bytes = 0
        self._request_begun = True  # the header deadline is armed after this read (data_received)

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._unfinished and self._peer is not None:
            self._caps.finished_headers(self._peer)
            self._unfinished = False
            _waiting.discard(self)
        self._disarm()
        self._request_begun = False
        super().on_headers_complete()
        self._body_pending = bool(self._body_timeout_s)  # armed after this read unless the body is in

    def on_message_complete(self) -> None:
        self._body_pending = False
        self._disarm_body()
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        if not self._too_large:
            super().send_400_response(msg)
        elif not self.transport.is_closing():
            self.transport.write(_431)
            self.transport.close()

    def _count(self, size: int) -> None:
        self._header_bytes += size
        if self._max_header_bytes and self._header_bytes > self._max_header_bytes:
            self._too_large = True
            raise HeadersTooLarge()  # the parser stops; uvicorn calls send_400_response

    def _arm(self) -> None:
        if self._header_timeout_s:
            self._header_timer = self.loop.call_later(self._header_timeout_s, self._headers_late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _disarm_body(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_late(self) -> None:
        self._body_timer = None
        if not self.transport.is_closing():
            if self.cycle is not None and not self.cycle.response_started:
                self.transport.write(_408)
            self.transport.close()

    def _headers_late(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            if self._request_begun:
                self.transport.write(_408)
            self.transport.close()


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run`` that bound clients (module docstring)."""
    return {
        "http": BoundedHttpToolsProtocol,
        "limit_concurrency": settings.max_connections or None,
        "timeout_keep_alive": settings.keep_alive_timeout_s,
        "server_header": False,  # relayed responses carry upstream's `server`, not two
    }
