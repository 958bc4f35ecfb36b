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

Its connections are :class:`GuardedConnection`: a statement that may commit (any
statement outside a transaction, and ``COMMIT``) is never interrupted by a cancel
request, neither on a timeout nor when the awaiting task is cancelled. PostgreSQL
answers a cancel that arrives while a ``COMMIT`` waits for a synchronous standby by
ending the wait with a warning: the transaction is then committed on the primary and
visible there, but perhaps not on the standby that a failover promotes (lost). Instead
the connection is closed (:meth:`asyncpg.Connection.terminate`); the server finishes the
commit, or not, on its own, and the caller treats the outcome as unknown
(:mod:`app.db.commits`). Statements inside a transaction keep asyncpg's timeout (a
cancel there only rolls the transaction back).

A connection whose server turned read-only (``default_transaction_read_only`` or
``in_hot_standby`` reported ``on``: the primary was demoted in a failover) expires every
connection of its pool when released: the next acquires connect anew and, with a
multi-host URL and ``target_session_attrs=read-write``, find the new primary
(:func:`expire_all` does the same from anywhere that saw the server go).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Coroutine, Generator, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import asyncpg

T = TypeVar("T")
#: Every live :class:`FairPool` of this process (for :func:`expire_all`).
_pools: weakref.WeakSet[FairPool] = weakref.WeakSet()
_expiring: set[asyncio.Task[None]] = set()
#: The connection a unit of work runs on (:func:`pinned`) and the task running it.
_PINNED: ContextVar[tuple[asyncio.Task[Any] | None, asyncpg.Connection] | None] = ContextVar(
    "taskgate_pinned_connection", default=None)


@contextmanager
def pinned(connection: asyncpg.Connection) -> Iterator[None]:
    """Inside the block, every :meth:`FairPool.acquire` of the current task (not of tasks
    it starts) yields ``connection`` and gives nothing back: code that takes its own
    connections runs on this one, in the transaction it may be in (a unit of work,
    :func:`app.db.commits.settling`)."""
    token = _PINNED.set((asyncio.current_task(), connection))
    try:
        yield
    finally:
        _PINNED.reset(token)


def _pin() -> asyncpg.Connection | None:
    pin = _PINNED.get()
    return pin[1] if pin is not None and pin[0] is asyncio.current_task() else None


class GuardedConnection(asyncpg.Connection):  # type: ignore[misc]  # asyncpg is untyped: Any
    """An :class:`asyncpg.Connection` whose statements that may commit are never
    cancelled (see the module docstring). ``statement_timeout_s`` bounds every statement
    (``None``: unbounded); a statement that may commit and runs past it closes the
    connection and raises ``TimeoutError``. Same methods and arguments as asyncpg's."""

    statement_timeout_s: float | None = None

    def _may_commit(self, query: str) -> bool:
        return not self.is_in_transaction() or query.lstrip()[:6].upper() == "COMMIT"

    async def _uncancelled(self, call: Coroutine[Any, Any, T], timeout: float | None) -> T:
        loop = asyncio.get_running_loop()
        task = loop.create_task(call)
        expired = False

        def expire() -> None:
            nonlocal expired
            if not task.done():
                expired = True
                self.terminate()

        timer = loop.call_later(timeout, expire) if timeout else None
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                self.terminate()  # no cancel request: the server finishes the statement on its own
                task.add_done_callback(_consume)
            raise
        except Exception as exc:
            if expired:
                raise TimeoutError(f"a statement that may commit ran past {timeout:g} s; "
                                   "its connection was closed (outcome unknown)") from exc
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def _limit(self, timeout: float | None) -> float | None:
        return timeout if timeout is not None else self.statement_timeout_s

    async def execute(self, query: str, *args: Any, timeout: float | None = None) -> str:
        if self._may_commit(query):
            return await self._uncancelled(super().execute(query, *args), self._limit(timeout))
        result: str = await super().execute(query, *args, timeout=self._limit(timeout))
        return result

    async def fetch(self, query: str, *args: Any, timeout: float | None = None,
                    record_class: Any = None) -> list[Any]:
        if self._may_commit(query):
            return await self._uncancelled(super().fetch(query, *args, record_class=record_class),
                                           self._limit(timeout))
        rows: list[Any] = await super().fetch(query, *args, timeout=self._limit(timeout), record_class=record_class)
        return rows

    async def fetchrow(self, query: str, *args: Any, timeout: float | None = None, record_class: Any = None) -> Any:
        if self._may_commit(query):
            return await self._uncancelled(super().fetchrow(query, *args, record_class=record_class),
                                           self._limit(timeout))
        return await super().fetchrow(query, *args, timeout=self._limit(timeout), record_class=record_class)

    async def fetchval(self, query: str, *args: Any, column: int = 0, timeout: float | None = None) -> Any:
        if self._may_commit(query):
            return await self._uncancelled(super().fetchval(query, *args, column=column), self._limit(timeout))
        return await super().fetchval(query, *args, column=column, timeout=self._limit(timeout))

    def read_only(self) -> bool:
        """Whether the server reported that it no longer accepts writes here (a standby,
        or a primary being demoted: ``default_transaction_read_only = on``)."""
        settings = self.get_settings()
        return (getattr(settings, "in_hot_standby", "off") == "on"
                or getattr(settings, "default_transaction_read_only", "off") == "on")


def _consume(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: the connection was closed under it on purpose


def expire_all() -> None:
    """Expire every connection of every pool of this process (they are closed when next
    released or acquired; new ones connect anew): the server they reach went away or no
    longer takes writes. Call it from a running event loop."""
    for pool in list(_pools):
        task = asyncio.get_running_loop().create_task(pool.expire_connections())
        _expiring.add(task)
        task.add_done_callback(_expiring.discard)


class FairPool(asyncpg.Pool):  # type: ignore[misc]  # asyncpg is untyped: Any
    """:class:`asyncpg.Pool` with first-come, first-served :meth:`acquire`; build it
    with :func:`create_fair_pool`. Every connection taken by :meth:`acquire` (``async
    with`` or ``await``) is given back by :meth:`release` (which ``async with`` calls)."""

    __slots__ = ("_turns", "__weakref__")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._turns = asyncio.Semaphore(kwargs["max_size"])
        _pools.add(self)

    def acquire(self, *, timeout: float | None = None) -> _FairAcquire:
        return _FairAcquire(self, timeout)

    async def release(self, connection: asyncpg.Connection, *, timeout: float | None = None) -> None:
        if connection is _pin():
            return  # the unit of work's: given back when the unit ends
        try:
            try:
                read_only = getattr(connection, "read_only", None)  # a proxy of a GuardedConnection
                if read_only is not None and not connection.is_closed() and read_only():
                    await self.expire_connections()  # the primary moved: every connection goes
            except asyncpg.InterfaceError:
                return  # the server closed it while it was checked out: asyncpg took it back then
            await super().release(connection, timeout=timeout)
        except asyncpg.InternalClientError as exc:
            if "free connection holder" not in str(exc):
                raise
            # the server closed it while it was checked out (a failover): asyncpg gave its
            # holder back to the pool then, and says so when it is released again
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
        pin = _pin()
        self._connection = pin if pin is not None else await self._pool._take(self._timeout)
        return self._connection

    async def __aexit__(self, *exc: object) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await self._pool.release(connection)

    def __await__(self) -> Generator[Any, None, asyncpg.Connection]:
        return self._take().__await__()

    async def _take(self) -> asyncpg.Connection:
        pin = _pin()
        return pin if pin is not None else await self._pool._take(self._timeout)


async def create_fair_pool(dsn: str, *, min_size: int, max_size: int,
                           connection_class: type[asyncpg.Connection] = GuardedConnection,
                           **connect_kwargs: Any) -> FairPool:
    """What :func:`asyncpg.create_pool` does (its defaults: 50,000 queries and 300 s
    idle per connection), with :class:`FairPool` and :class:`GuardedConnection`.
    ``connect_kwargs`` are ``create_pool``'s other keywords (``timeout``, ``init``,
    ``reset``, ``statement_cache_size``, ``server_settings`` …)."""
    pool = FairPool(dsn, min_size=min_size, max_size=max_size, max_queries=50_000,
                    max_inactive_connection_lifetime=300.0, loop=None, connection_class=connection_class,
                    record_class=asyncpg.Record, **connect_kwargs)
    await pool
    return pool
