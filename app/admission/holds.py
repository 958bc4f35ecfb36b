"""Requests waiting for a task's reservations in flight to settle (one process).

A request the dollar ceiling holds (:data:`app.admission.ceiling.Decision.HOLD`) leaves
its admission transaction (the row lock released, the pooled connection returned) and
waits here. Per task with waiters, one poller reads the task's dollars (a plain
``SELECT``, no lock) every :data:`POLL_INTERVAL_S`, and at once when this process
settles a request of that task (:meth:`Holds.settled`); it wakes the waiters the row
says may now be decided (:func:`app.admission.ceiling.wake_order`). A woken waiter runs
admission again, which decides by the same rule under the row lock (it may be held
again: another process took the room first).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from decimal import Decimal

import asyncpg

from app.admission.ceiling import wake_order
from app.db import sql
from app.task import Task

logger = logging.getLogger(__name__)

#: Seconds between two reads of a task's dollars while requests of it wait.
POLL_INTERVAL_S = 0.1
_READ = sql.statement("task_by_id")


@dataclass(eq=False, slots=True)
class _Waiter:
    worst_usd: Decimal
    woken: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(eq=False, slots=True)
class _Watch:
    waiters: list[_Waiter] = field(default_factory=list)
    nudge: asyncio.Event = field(default_factory=asyncio.Event)


class Holds:
    """The waiters of this process, by task id (see the module docstring)."""

    def __init__(self) -> None:
        self._watches: dict[str, _Watch] = {}
        self._pollers: set[asyncio.Task[None]] = set()

    def waiting(self, task_id: str) -> int:
        """How many requests of the task wait in this process."""
        watch = self._watches.get(task_id)
        return len(watch.waiters) if watch else 0

    def settled(self, task_id: str) -> None:
        """A request of the task settled in this process: read its row now."""
        watch = self._watches.get(task_id)
        if watch is not None:
            watch.nudge.set()

    async def wait(self, pool: asyncpg.Pool, task_id: str, worst_usd: Decimal, timeout_s: float) -> bool:
        """Wait until the task's row says a request of worst case ``worst_usd`` may be
        decided again (``True``), or ``timeout_s`` seconds (``False``)."""
        watch = self._watches.get(task_id)
        if watch is None:
            watch = self._watches[task_id] = _Watch()
            poller = asyncio.get_running_loop().create_task(self._poll(pool, task_id, watch))
            self._pollers.add(poller)
            poller.add_done_callback(self._pollers.discard)
        waiter = _Waiter(worst_usd)
        watch.waiters.append(waiter)
        try:
            async with asyncio.timeout(max(timeout_s, 0)):
                await waiter.woken.wait()
            return True
        except TimeoutError:
            return waiter.woken.is_set()
        finally:
            watch.waiters.remove(waiter)

    async def _poll(self, pool: asyncpg.Pool, task_id: str, watch: _Watch) -> None:
        try:
            while watch.waiters:
                watch.nudge.clear()
                waiting = [w for w in watch.waiters if not w.woken.is_set()]
                try:
                    async with pool.acquire() as conn:
                        row = await conn.fetchrow(_READ, task_id)
                except Exception:  # admission itself reports (503 when unreachable)
                    logger.debug("could not read task %s for its waiting requests", task_id, exc_info=True)
                    row = None
                woken = (range(len(waiting)) if row is None
                         else wake_order(Task.from_row(row), [w.worst_usd for w in waiting]))
                for i in woken:
                    waiting[i].woken.set()
                try:
                    async with asyncio.timeout(POLL_INTERVAL_S):
                        await watch.nudge.wait()
                except TimeoutError:
                    pass
        finally:
            if self._watches.get(task_id) is watch:
                del self._watches[task_id]


#: This process's waiters.
holds = Holds()
