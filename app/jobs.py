"""The gateway process's periodic maintenance jobs, started with the app and cancelled
when it stops: the reservation sweep (:mod:`app.admission.reservations`), the budget lease
sweep (:mod:`app.budgets.escrow`) and retention
(:mod:`app.retention`). Every job is
safe to run in every process of every replica at once."""

from __future__ import annotations

import asyncio
import contextlib

import asyncpg

from app.admission.reservations import sweep_forever
from app.budgets import escrow
from app.proxy import json_offload
from app.retention import prune_forever
from app.settings import Settings


def start(pool: asyncpg.Pool, settings: Settings) -> list[asyncio.Task[None]]:
    """Start the jobs in force (a sweep interval of 0 turns the sweep off)."""
    jobs = []
    if settings.reservation_sweep_s > 0:
        jobs.append(asyncio.create_task(sweep_forever(pool, settings), name="reservation sweep"))
        jobs.append(asyncio.create_task(escrow.sweep_forever(pool, settings), name="budget lease sweep"))
    if settings.retention_days is not None or settings.ledger_keep_per_conversation > 0:
        jobs.append(asyncio.create_task(prune_forever(pool, settings, settings.retention_interval_s),
                                        name="retention"))
    return jobs


async def stop(jobs: list[asyncio.Task[None]]) -> None:
    """Cancel the jobs and wait for them to end; stop the JSON helper process."""
    json_offload.shutdown()
    for job in jobs:
        job.cancel()
    for job in jobs:
        with contextlib.suppress(asyncio.CancelledError):
            await job
