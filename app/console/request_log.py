"""The request log: one ``request_log`` row per relayed response, written off the request
path in batches (the dashboard's overview and task timeline, ``GET /admin/stats``).

:func:`record` (subscribed to :data:`app.events.EXCHANGE_FINISHED`) only appends a tuple
to a bounded buffer; :class:`Writer` flushes it every :data:`FLUSH_S` seconds with one
``INSERT ... SELECT FROM unnest(...)`` (relaxed commit: the log is a view, never a
counter) and deletes rows older than ``TASKGATE_REQUEST_LOG_RETENTION_S`` every
:data:`PURGE_S` seconds, at most :data:`PURGE_BATCH` at a time. When the buffer is full
(the database is slow or away) the oldest rows are dropped and counted in
``taskgate_request_log_dropped_total``; a row whose task was deleted meanwhile is skipped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from datetime import datetime, timezone
from decimal import Decimal

import asyncpg
from prometheus_client import Counter

from app import events
from app.db import sql
from app.db.pool import relaxed

logger = logging.getLogger("app.console")

FLUSH_S = 0.5
PURGE_S = 60.0
PURGE_BATCH = 10_000
BUFFER_ROWS = 50_000
_TEXT_MAX = 200  # model names and request ids are stored cut to this length

DROPPED = Counter("taskgate_request_log_dropped", "Request log rows dropped (buffer full or the "
                  "database unreachable for long).")

Row = tuple[str, datetime, str, str | None, str | None, int | None, str, bool, int, int, Decimal | None,
            float, str | None]

_INSERT = sql.statement("request_log_insert")
_PURGE = sql.statement("request_log_purge")

_buffer: deque[Row] = deque(maxlen=BUFFER_ROWS)
_enabled = False


def _cut(text: str | None) -> str | None:
    return text if text is None or len(text) <= _TEXT_MAX else text[:_TEXT_MAX]


def row_of(event: events.ExchangeFinished, now: datetime, elapsed_s: float) -> Row:
    """The ``request_log`` row of one finished exchange (pure)."""
    usage = event.outcome.summary.usage
    return (event.task_id, now, event.endpoint or str(event.outcome.detail.get("endpoint") or ""),
            _cut(event.model), _cut(event.provider), event.outcome.status, event.outcome.kind, event.stream,
            usage.input_tokens if usage else 0, usage.output_tokens if usage else 0, event.cost_usd,
            round(elapsed_s * 1000, 3), _cut(event.request_id))


def record(event: events.ExchangeFinished) -> None:
    """Buffer the row of a finished exchange (a subscriber: cheap, never blocks)."""
    if not _enabled:
        return
    if len(_buffer) == _buffer.maxlen:
        DROPPED.inc()
    _buffer.append(row_of(event, datetime.now(timezone.utc), time.monotonic() - event.started))


class Writer:
    """Flushes the buffer and purges old rows until :meth:`stop`."""

    def __init__(self, pool: asyncpg.Pool, retention_s: float) -> None:
        self.pool, self.retention_s = pool, retention_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        global _enabled
        _enabled = self.retention_s > 0
        if _enabled:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Flush what is buffered (once), then end."""
        global _enabled
        _enabled = False
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            try:
                await asyncio.wait_for(self.flush(), 5)
            except Exception:  # noqa: BLE001 - shutting down: the log is best effort
                logger.warning("request log: %d rows not written at shutdown", len(_buffer))

    async def _run(self) -> None:
        next_purge = time.monotonic()
        while True:
            await asyncio.sleep(FLUSH_S)
            try:
                await self.flush()
                if time.monotonic() >= next_purge:
                    next_purge = time.monotonic() + PURGE_S
                    await self.pool.execute(_PURGE, self.retention_s, PURGE_BATCH)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - kept in the buffer, tried again
                logger.warning("request log: cannot write (%s); %d rows buffered", type(exc).__name__,
                               len(_buffer))

    async def flush(self) -> int:
        """Write the buffered rows in one statement; returns how many were taken."""
        if not _buffer:
            return 0
        rows = list(_buffer)
        columns = list(zip(*rows))
        async with self.pool.acquire() as conn, conn.transaction():
            await relaxed(conn)
            await conn.execute(_INSERT, *columns)
        for _ in rows:  # only now: a failed write keeps them for the next try
            _buffer.popleft()
        return len(rows)
