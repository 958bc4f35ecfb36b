"""A TCP relay between a gateway and PostgreSQL that a test can partition and heal.

:class:`Partition` listens on a loopback port and relays every connection to the
database. :meth:`Partition.cut` black-holes them: bytes either way are read and dropped,
new connections are accepted and never answered, as a network partition looks from both
ends (nothing is refused, nothing arrives). :meth:`Partition.heal` closes every
connection held (as a NAT or firewall forgets them) and relays new ones again.
:meth:`Partition.url` is a database URL through it.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from sqlalchemy.engine import make_url

from tests.support import free_port


class Partition:
    """A relay to the database's ``host:port`` (or its unix socket, as the embedded
    PostgreSQL has) on a thread of its own (a context manager)."""

    def __init__(self, database_url: str) -> None:
        target = make_url(database_url)
        self.database_url = database_url
        self.target = (target.host or "127.0.0.1", target.port or 5432)
        socket_dir = target.query.get("host")  # the embedded PostgreSQL listens on a unix socket only
        self.socket = f"{socket_dir}/.s.PGSQL.{target.port or 5432}" if isinstance(socket_dir, str) else None
        self.port = free_port()
        self.cut_off = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def url(self) -> str:
        """``database_url`` through this relay."""
        url = make_url(self.database_url)
        return url.set(host="127.0.0.1", port=self.port, query={k: v for k, v in url.query.items() if k != "host"}) \
            .render_as_string(hide_password=False)

    def __enter__(self) -> "Partition":
        self._thread.start()
        assert self._ready.wait(10), "the relay did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def cut(self) -> None:
        """Black-hole every connection, open and new."""
        self.cut_off = True

    def heal(self) -> None:
        """Close every connection held; relay new ones again."""
        done = threading.Event()

        def close_all() -> None:
            self.cut_off = False
            for writer in list(self._writers):
                writer.transport.abort()
            self._writers.clear()
            done.set()
        self._loop.call_soon_threadsafe(close_all)
        assert done.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", self.port))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            for writer in list(self._writers):
                writer.transport.abort()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        if self.cut_off:  # accepted, never answered
            await self._drain_forever(reader)
            return
        try:
            up_reader, up_writer = await (asyncio.open_unix_connection(self.socket) if self.socket
                                          else asyncio.open_connection(*self.target))
        except OSError:
            writer.transport.abort()
            return
        self._writers.add(up_writer)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer),
                             return_exceptions=True)
        for w in (writer, up_writer):
            w.transport.abort()
            self._writers.discard(w)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            if not self.cut_off:
                writer.write(data)
                await writer.drain()
        writer.transport.abort()

    @staticmethod
    async def _drain_forever(reader: asyncio.StreamReader) -> Any:
        while await reader.read(65536):
            pass
