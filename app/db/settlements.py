"""A response's usage settled with other responses', in one statement (issue 39).

What :func:`app.db.commits.settling` and ``ledger_add_usage`` do for one response
without tool calls, budget windows or a judged answer (mark the admission settled
once, delete its hold, add its usage and dollars to its task, count it in the spend
record) is four round trips (``BEGIN``, the mark, the usage, ``COMMIT``) on a
connection of its own. :func:`settle_usage` sends it through the pool's
:class:`app.db.batch.Batcher` instead: the settlements that arrive while one is in
flight go together as ``settle_usage_batch`` (``app/db/sql/settlement_batch.sql``),
one round trip and one relaxed commit for all of them, each task locked (in id order)
and settled under its row lock, once per admission.
"""

from __future__ import annotations

import logging
import uuid
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

import asyncpg

from app.db import sql
from app.db.batch import Batcher

logger = logging.getLogger(__name__)

#: Settle many admissions' usage at once (arrays in, one row per admission out).
SETTLE_USAGE_BATCH = sql.statement("settle_usage_batch")


@dataclass(frozen=True, slots=True)
class UsageSettlement:
    """One admission's settlement: ``key`` its admission key; tokens; ``cost_usd`` (USD)
    settled and ``release_usd`` (USD) released from its hold ``reservation_id`` (``None``:
    none); ``model`` its spend row's model (``None``: not an admitted request's spend)."""

    key: uuid.UUID
    task_id: str
    input_tokens: int
    output_tokens: int
    cost_usd: Decimal
    release_usd: Decimal
    reservation_id: int | None
    model: str | None


#: Per input row: (its task was locked here, the admission's mark: True written now,
#: False settled before, None not in the admission log).
Settled = tuple[bool, bool | None]

_batchers: weakref.WeakKeyDictionary[asyncpg.Pool, Batcher[UsageSettlement, Settled]] = (
    weakref.WeakKeyDictionary())


async def _run(pool: asyncpg.Pool, items: Sequence[UsageSettlement]) -> list[Settled]:
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            SETTLE_USAGE_BATCH, [i.key for i in items], [i.task_id for i in items],
            [i.input_tokens for i in items], [i.output_tokens for i in items], [i.cost_usd for i in items],
            [i.release_usd for i in items], [i.reservation_id for i in items], [i.model for i in items])
    return [(row["locked"], row["first"]) for row in rows]


def batcher(pool: asyncpg.Pool) -> Batcher[UsageSettlement, Settled]:
    """The pool's settlement batcher (one per pool)."""
    found = _batchers.get(pool)
    if found is None:
        found = _batchers[pool] = Batcher(lambda items: _run(pool, items))
    return found


async def settle_usage(pool: asyncpg.Pool, settlement: UsageSettlement) -> bool:
    """Settle ``settlement`` once (in a round with the others in flight, see the module
    docstring); ``True`` when done (written now, or found settled before: nothing written
    again), ``False`` when its task is not there (nothing written). Database errors
    propagate as its own statement's would (:mod:`app.db.batch`); retrying is safe."""
    locked, first = await batcher(pool).submit(settlement)
    if locked and first is False:
        logger.warning("the settlement of admission %s had landed before its commit's answer was lost; "
                       "not written again", settlement.key)
    return locked

