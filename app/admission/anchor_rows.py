"""The input-token anchor's I/O (:mod:`app.admission.anchor`): its columns of the
``conversations`` table, read by admission and written after a response."""

from __future__ import annotations

import asyncpg

from app.admission.anchor import Anchor
from app.db import sql

_ANCHOR = sql.statement("anchor_read")
#: Its own relaxed transaction, like the usage it comes with (app/db/sql/admission.sql).
_SET_ANCHOR = sql.statement("anchor_set")


async def anchor(conn: asyncpg.Connection, task_id: str, key: str) -> Anchor | None:
    """The conversation's input-token anchor, if any."""
    row = await conn.fetchrow(_ANCHOR, task_id, key)
    if row is None or row["anchor_hash"] is None:
        return None
    return Anchor(row["anchor_input_tokens"], row["anchor_items"], row["anchor_hash"], row["anchor_model"])


async def set_anchor(conn: asyncpg.Connection, task_id: str, key: str, value: Anchor) -> None:
    """Keep ``value`` as the conversation's anchor (the last request upstream reported)."""
    await conn.execute(_SET_ANCHOR, task_id, key, value.input_tokens, value.items, value.hash, value.model)
