"""The input-token anchor's I/O (:mod:`app.admission.anchor`): its columns of the
``conversations`` table, read by admission and written after a response."""

from __future__ import annotations

import asyncpg

from app.admission.anchor import Anchor
from app.db.pool import RELAXED_COMMIT

_ANCHOR = ("SELECT anchor_input_tokens, anchor_items, anchor_hash, anchor_model FROM conversations"
           " WHERE task_id = $1 AND conversation_key = $2")
# Its own relaxed transaction, like the usage it comes with: a lost anchor only loosens a bound.
_SET_ANCHOR = (
    "INSERT INTO conversations (task_id, conversation_key, anchor_input_tokens, anchor_items, anchor_hash,"
    " anchor_model) SELECT $1::text, $2::text, $3::bigint, $4::int, $5::text, $6::text FROM {relaxed}"
    " ON CONFLICT (task_id, conversation_key) DO UPDATE SET anchor_input_tokens = EXCLUDED.anchor_input_tokens,"
    " anchor_items = EXCLUDED.anchor_items, anchor_hash = EXCLUDED.anchor_hash,"
    " anchor_model = EXCLUDED.anchor_model, updated_at = now()"
).format(relaxed=RELAXED_COMMIT)


async def anchor(conn: asyncpg.Connection, task_id: str, key: str) -> Anchor | None:
    """The conversation's input-token anchor, if any."""
    row = await conn.fetchrow(_ANCHOR, task_id, key)
    if row is None or row["anchor_hash"] is None:
        return None
    return Anchor(row["anchor_input_tokens"], row["anchor_items"], row["anchor_hash"], row["anchor_model"])


async def set_anchor(conn: asyncpg.Connection, task_id: str, key: str, value: Anchor) -> None:
    """Keep ``value`` as the conversation's anchor (the last request upstream reported)."""
    await conn.execute(_SET_ANCHOR, task_id, key, value.input_tokens, value.items, value.hash, value.model)
