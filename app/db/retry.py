"""Post-response records that meet an unreachable database are retried, not dropped.

Accounting (usage, ledger rows, stream events) runs after the client has its answer. If
PostgreSQL cannot be reached just then (a restart, a failover, a PgBouncer reconnect),
the record is handed to :data:`backlog` (so is one rolled back whole as a deadlock's
victim, :func:`app.db.errors.rolled_back`), which retries it in the background with
exponential backoff (0.1 s doubling to 2 s, ±20 % jitter) for ``accounting_retry_s``
seconds from the first failure. What still fails then is dropped: counted
(``Backlog.dropped``) and logged through the rate-limited fault log, naming the task
and what was lost. At shutdown the gateway waits briefly for pending records.

A retried write can be applied twice only when the connection broke during its
``COMMIT`` (the commit may have happened): usage then counts twice, the safe
direction for a limit; ledger rows never do (``ON CONFLICT DO NOTHING``).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Iterator
from typing import Awaitable, Callable

from app.db.errors import write_again
from app.fault_log import faults

logger = logging.getLogger(__name__)


def delays(first_s: float = 0.1, max_s: float = 2.0) -> Iterator[float]:
    """Backoff delays in seconds: ``first_s`` doubling up to ``max_s``, ±20 % jitter."""
    delay = first_s
    while True:
        yield delay * random.uniform(0.8, 1.2)
        delay = min(delay * 2, max_s)


class Backlog:
    """Records waiting for the database, retried in background tasks."""

    def __init__(self) -> None:
        self.pending: set[asyncio.Task[None]] = set()
        self.recovered = 0
        self.dropped = 0

    def submit(self, write: Callable[[], Awaitable[object]], what: str, budget_s: float,
               error: BaseException) -> None:
        """Retry ``write`` (which just failed with ``error``) for up to ``budget_s`` s."""
        faults.report("accounting", "database unreachable after a response; retrying its "
                      "usage/ledger/event records in the background", error, logging.WARNING)
        task = asyncio.create_task(self._retry(write, what, budget_s, error))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def _retry(self, write: Callable[[], Awaitable[object]], what: str, budget_s: float,
                     error: BaseException) -> None:
        deadline = time.monotonic() + budget_s
        for delay in delays():
            if time.monotonic() + delay > deadline:
                break
            await asyncio.sleep(delay)
            try:
                await write()
            except Exception as exc:
                if not write_again(exc):  # unreachable, or a deadlock victim: again
                    logger.exception("recording %s failed", what)
                    self.dropped += 1
                    return
                error = exc
                continue
            self.recovered += 1
            return
        self.dropped += 1
        faults.report("accounting dropped", f"gave up after {budget_s:g} s of retries and dropped "
                      f"{what} ({self.dropped} records dropped so far)", error)

    async def drain(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for pending records (at shutdown), then cancel the rest."""
        if self.pending:
            _, late = await asyncio.wait(set(self.pending), timeout=timeout_s)
            for task in late:
                task.cancel()
            if late:
                logger.error("shutting down with %d post-response records not written", len(late))


#: The process's backlog of post-response records.
backlog = Backlog()
