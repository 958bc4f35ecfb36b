"""The fast path of a task with a budget: one statement counts the request on the task and
pays it from the holder's escrow leases (:mod:`app.budgets.escrow`, whose statements these
are), with the request's admission log row (:mod:`app.db.commits`)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import asyncpg

from app.budgets import escrow
from app.budgets.escrow import WindowKey


async def fast_admit(conn: asyncpg.Connection, holder: str, at: datetime, token_hash: str,
                     task_id: str | None, admission_key: uuid.UUID,
                     request_id: str | None) -> tuple[Any, tuple[WindowKey, ...]] | None:
    """The fast path of a task with no dollar ceiling of its own: in one statement,
    the request counted on the task and paid by the holder's lease of every budget of
    its chain (``lease_fast_*`` of ``app/db/sql/budget_leases.sql``; for a task this
    process has not seen yet, with or without a budget, ``lease_first_*``), with its
    ``admissions`` row under
    ``admission_key``. The task's row after counting and the windows it was counted in;
    ``None`` when it did not apply (nothing was written)."""
    key = task_id or token_hash
    chain = escrow.chain_of(key)
    try:
        if chain is None:
            first = escrow.FIRST_BY_ID if task_id else escrow.FIRST_BY_TOKEN
            row = await conn.fetchrow(first, key, holder, at, admission_key, request_id)
            if row is not None:
                chain = tuple(row["lease_chain"] or ())
                escrow.remember(key, chain)
        elif chain:
            statement = ((escrow.FAST_BY_ID, escrow.FAST_BY_TOKEN),
                         (escrow.FAST_ONE_BY_ID, escrow.FAST_ONE_BY_TOKEN))[len(chain) == 1]
            row = await conn.fetchrow(statement[task_id is None], key, holder, at, chain[-1], list(chain),
                                      admission_key, request_id)
        else:
            return None
    except asyncpg.RaiseError:
        return None  # a lease could not pay: rolled back, the locked path decides
    if row is None or chain is None:
        return None
    return row, tuple(zip(chain, row["lease_window_starts"] or ()))
