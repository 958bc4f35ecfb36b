"""An asyncpg pool whose waiting acquirers are served first come, first served.

asyncpg's :class:`asyncpg.Pool` keeps its idle connections in an
:class:`asyncio.LifoQueue`. A released connection wakes the longest waiter, but
until that task runs, any task that calls ``acquire()`` finds the queue non-empty
and takes the connection at once; the woken waiter finds it empty again and queues
anew at the *back*. Under load (more concurrent requests than connections) most
acquires barge in and a few requests lose that race again and again: at 64-128
concurrent requests on a pool of 10, the median pool wait stayed under 0.1 ms while
the slowest 1 % of requests waited over a second, almost all of their time
(``python -m bench.tail``).

:class:`FairPool` puts an :class:`asyncio.Semaphore` of ``max_size`` turns in front
of the pool: since Python 3.11.1 a semaphore hands a released turn to its first
waiter and makes newcomers queue behind waiters, so connections go out in arrival
order and a pool acquire never waits (each turn holder has a connection to take).
An acquire with a free turn does not suspend, so an idle pool costs nothing more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

import asyncpg


class FairPool(asyncpg.Pool):
    """:class:`asyncpg.Pool` with first-come, first-served :meth:`acquire`; build it
    with :func:`create_fair_pool`. Every connection taken by :meth:`acquire` (``async
    with`` or ``await``) is given back by :meth:`release` (which ``async with`` calls)."""

    __slots__ = ("_turns",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._turns = asyncio.Semaphore(kwargs["max_size"])

    def acquire(self, *, timeout: float | None = None) -> _FairAcquire:
        return _FairAcquire(self, timeout)

    async def release(self, connection: asyncpg.Connection, *, timeout: float | None = None) -> None:
        try:
            await super().release(connection, timeout=timeout)
        finally:
            self._turns.release()

    async def _take(self, timeout: float | None) -> asyncpg.Connection:
        async with asyncio.timeout(timeout):  # None: no deadline
            await self._turns.acquire()
            try:
                return await super().acquire()
            except BaseException:
                self._turns.release()
                raise


class _FairAcquire:
    """What :meth:`FairPool.acquire` returns: an async context manager (releases on
    exit) that can also be awaited for the connection (then release it yourself)."""

    __slots__ = ("_pool", "_timeout", "_connection")

    def __init__(self, pool: FairPool, timeout: float | None) -> None:
        self._pool, self._timeout = pool, timeout
        self._connection: asyncpg.Connection | None = None

    async def __aenter__(self) -> asyncpg.Connection:
        self._connection = await self._pool._take(self._timeout)
        return self._connection

    async def __aexit__(self, *exc: object) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await self._pool.release(connection)

    def __await__(self) -> Generator[Any, None, asyncpg.Connection]:
        return self._pool._take(self._timeout).__await__()


async def create_fair_pool(dsn: str, *, min_size: int, max_size: int, **connect_kwargs: Any) -> FairPool:
    """What :func:`asyncpg.create_pool` does (its defaults: 50,000 queries and 300 s
    idle per connection), with :class:`FairPool`. ``connect_kwargs`` are
    ``create_pool``'s other keywords (``timeout``, ``init``, ``reset``,
    ``statement_cache_size``, ``server_settings`` …)."""
    pool = FairPool(dsn, min_size=min_size, max_size=max_size, max_queries=50_000,
                    max_inactive_connection_lifetime=300.0, loop=None, connection_class=asyncpg.Connection,
                    record_class=asyncpg.Record, **connect_kwargs)
    await pool
    return pool
