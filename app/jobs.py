"""The gateway process's periodic maintenance jobs, started with the app and cancelled
when it stops: the reservation sweep (:mod:`app.admission.reservations`), the budget lease
sweep (:mod:`app.budgets.escrow`), the admission log's pruning (:mod:`app.db.commits`),
the budgets' and tasks' warning thresholds (:mod:`app.budgets.thresholds`,
:mod:`app.budgets.task_thresholds`, every second while the process has traffic) and
retention (:mod:`app.retention`). Every job is safe to run in every process of every
replica at once. A run that fails is reported and the job goes on: one fault-log line per
outage when the database cannot be reached (:mod:`app.fault_log`), a traceback for
anything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import asyncpg

from app import events, retention
from app.admission import reservations
from app.budgets import escrow, task_thresholds, thresholds, windows
from app.db import commits
from app.db.errors import database_unreachable
from app.fault_log import faults
from app.proxy import json_offload
from app.settings import Settings

logger = logging.getLogger(__name__)


async def every(name: str, interval_s: float, run: Callable[[], Awaitable[object]], *,
                at_start: bool = False) -> None:
    """``run()`` every ``interval_s`` seconds (first at once with ``at_start``, else after
    one interval) until cancelled; a failed run waits for the next."""
    if not at_start:
        await asyncio.sleep(interval_s)
    while True:
        try:
            await run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the next run tries again
            if database_unreachable(exc):
                faults.report(name, f"database unavailable; the {name} runs again in {interval_s:g} s", exc)
            else:
                logger.exception("%s failed; it runs again in %s s", name, interval_s)
        await asyncio.sleep(interval_s)


def start(pool: asyncpg.Pool, settings: Settings) -> list[asyncio.Task[None]]:
    """Start the jobs in force (a sweep interval of 0 turns the sweeps off; retention runs
    when ``retention_days`` is set or ledger compaction is on)."""
    jobs: list[tuple[str, float, Callable[[], Awaitable[object]], bool]] = []
    if settings.reservation_sweep_s > 0:
        jobs.append(("reservation sweep", settings.reservation_sweep_s, lambda: reservations.sweep(pool), False))
        jobs.append(("budget lease sweep", settings.reservation_sweep_s, lambda: escrow.sweep(pool), False))
        jobs.append(("admission log pruning", settings.reservation_sweep_s,
                     lambda: commits.prune(pool, settings.admission_log_retention_s), False))
    events.ADMISSION_DONE.subscribe(thresholds.activity.touched)
    events.EXCHANGE_FINISHED.subscribe(thresholds.activity.touched)
    jobs.append(("budget threshold check", thresholds.CHECK_INTERVAL_S,
                 lambda: thresholds.check_if_active(pool, windows.now(settings.clock_offset_s)), False))
    events.EXCHANGE_FINISHED.subscribe(task_thresholds.touched.add)
    jobs.append(("task threshold check", thresholds.CHECK_INTERVAL_S,
                 lambda: task_thresholds.check_touched(pool), False))
    if settings.retention_days is not None or settings.ledger_keep_per_conversation > 0:
        jobs.append(("retention", settings.retention_interval_s, lambda: retention.run(pool, settings), True))
    return [asyncio.create_task(every(name, interval, run, at_start=at_start), name=name)
            for name, interval, run, at_start in jobs]


async def stop(jobs: list[asyncio.Task[None]]) -> None:
    """Cancel the jobs and wait for them to end; stop the JSON helper process."""
    json_offload.shutdown()
    for job in jobs:
        job.cancel()
    for job in jobs:
        with contextlib.suppress(asyncio.CancelledError):
            await job
