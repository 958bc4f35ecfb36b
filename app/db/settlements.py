"""A response's usage settled with other responses', in one statement (issue 39).

What :func:`app.db.commits.settling` and ``ledger_add_usage`` do for one response
without tool calls or budget windows (mark the admission settled once, delete its
hold, add its usage and dollars to its task, count it in the spend record), and
``ledger_add_answer`` for a judged text answer (the conversation's run of identical
answers too), is a statement of its own on a connection of its own.
:func:`settle_usage` sends it through the pool's :class:`app.db.batch.Batcher`
instead: the settlements that arrive while one is in flight go together as
``settle_batch`` (``app/db/sql/settlement_batch.sql``), one round trip and one
relaxed commit for all of them, each task locked (in id order) and settled under its
row lock, once per admission; a conversation's second answer waits for the next round.
A round of one goes as the statement of one settlement (cheaper for one row).
"""

from __future__ import annotations

import logging
import uuid
import weakref
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import asyncpg

from app.db import sql
from app.db.batch import Batcher

logger = logging.getLogger(__name__)

#: Settle many admissions' usage at once (arrays in, one row per admission out).
SETTLE_BATCH = sql.statement("settle_batch")
#: A round of one: the statement of one settlement (app/db/sql/ledger.sql).
ADD_USAGE = sql.statement("ledger_add_usage")
ADD_ANSWER = sql.statement("ledger_add_answer")


@dataclass(frozen=True, slots=True)
class UsageSettlement:
    """One admission's settlement: ``key`` its admission key; tokens; ``cost_usd`` (USD)
    settled and ``release_usd`` (USD) released from its hold ``reservation_id`` (``None``:
    none); ``model`` its spend row's model (``None``: not an admitted request's spend). A
    judged text answer: ``conversation_key`` (``None``: none), its ``text_sha256`` and
    ``answer_repeats`` (:func:`app.guard.conversation_rules.answer_repeats`)."""

    key: uuid.UUID
    task_id: str
    input_tokens: int
    output_tokens: int
    cost_usd: Decimal
    release_usd: Decimal
    reservation_id: int | None
    model: str | None
    conversation_key: str | None = None
    text_sha256: str | None = None
    answer_repeats: bool = False


@dataclass(frozen=True, slots=True)
class Settled:
    """One settlement's outcome: ``locked`` its task was there (settled now, or found
    settled before, under its row lock); ``first`` the admission's mark (``True`` written
    now, ``False`` settled before: nothing written, ``None`` not in the admission log:
    written unmarked). A judged answer written now: its task's ``status`` and
    ``loop_guard`` (the JSON object) and the conversation's ``answer_streak`` (identical
    answers in a row); else ``None``."""

    locked: bool
    first: bool | None
    status: str | None = None
    loop_guard: Mapping[str, Any] | None = None
    answer_streak: int | None = None

_batchers: weakref.WeakKeyDictionary[asyncpg.Pool, Batcher[UsageSettlement, Settled]] = (
    weakref.WeakKeyDictionary())


async def _run(pool: asyncpg.Pool, items: Sequence[UsageSettlement]) -> list[Settled]:
    async with pool.acquire() as conn:
        if len(items) == 1:
            return [await _alone(conn, items[0])]
        rows = await conn.fetch(
            SETTLE_BATCH, [i.key for i in items], [i.task_id for i in items],
            [i.input_tokens for i in items], [i.output_tokens for i in items], [i.cost_usd for i in items],
            [i.release_usd for i in items], [i.reservation_id for i in items], [i.model for i in items],
            [i.conversation_key for i in items], [i.text_sha256 for i in items], [i.answer_repeats for i in items])
    return [Settled(row["locked"], row["first"], row["status"], row["loop_guard"], row["answer_streak"])
            for row in rows]


async def _alone(conn: asyncpg.Connection, item: UsageSettlement) -> Settled:
    """A round of one, in the statement that settles one (``ledger_add_usage``,
    ``ledger_add_answer``: ``app/db/sql/ledger.sql``): the same rows written, ~100 µs of
    PostgreSQL CPU less than the round's function for one row (one connection: 140 against
    240 µs, an answer's 170 against 260), which it costs once per round."""
    common = (item.task_id, item.input_tokens, item.output_tokens, item.cost_usd, item.release_usd,
              item.reservation_id)
    if item.conversation_key is None:
        row = await conn.fetchrow(ADD_USAGE, *common, item.model, item.key)
        return Settled(row["task_settled"] or row["first_settlement"] is False, row["first_settlement"])
    row = await conn.fetchrow(ADD_ANSWER, *common, item.conversation_key, item.text_sha256, item.answer_repeats,
                              item.model, item.key)
    first = row["first_settlement"]
    if row["status"] is None:  # settled before (first False), or no such task
        return Settled(first is False, first)
    return Settled(True, first, row["status"], row["loop_guard"], row["answer_streak"])


def _conversation(item: UsageSettlement) -> Hashable | None:
    """A judged answer's conversation: one answer of each in a round (its row once)."""
    return None if item.conversation_key is None else (item.task_id, item.conversation_key)


def batcher(pool: asyncpg.Pool) -> Batcher[UsageSettlement, Settled]:
    """The pool's settlement batcher (one per pool)."""
    found = _batchers.get(pool)
    if found is None:
        found = _batchers[pool] = Batcher(lambda items: _run(pool, items), distinct=_conversation)
    return found


async def settle_usage(pool: asyncpg.Pool, settlement: UsageSettlement) -> Settled:
    """Settle ``settlement`` once (in a round with the others in flight, see the module
    docstring): done when its ``locked`` (written now, or found settled before: nothing
    written again); not locked when its task is not there (nothing written). Database
    errors propagate as its own statement's would (:mod:`app.db.batch`); retrying is safe."""
    settled = await batcher(pool).submit(settlement)
    if settled.locked and settled.first is False:
        logger.warning("the settlement of admission %s had landed before its commit's answer was lost; "
                       "not written again", settlement.key)
    return settled

