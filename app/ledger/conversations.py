"""Per-conversation counters (the ``conversations`` table): thin I/O around the pure
rules of :mod:`app.guard.conversation_rules`. Every function takes an asyncpg
connection; admission and the ledger call them with the task row locked, so the
read-check-count sequences here never race within one task."""

from __future__ import annotations

from typing import Any

import asyncpg

from app.db import sql

# The statements: app/db/sql/guard.sql.
_GET = sql.statement("conversation_get")
_COUNT_REQUEST = sql.statement("conversation_count_request")
# A response (or request) with new tool calls also breaks a run of repeated answers.
_ADD_TOOL_CALLS = sql.statement("conversation_add_tool_calls")
_TOOL_CALLS = sql.statement("conversation_tool_calls")


async def get(conn: asyncpg.Connection, task_id: str, key: str) -> dict[str, Any] | None:
    """The conversation's row, ``None`` before anything was counted for it."""
    row = await conn.fetchrow(_GET, task_id, key)
    return dict(row) if row else None


async def count_request(conn: asyncpg.Connection, task_id: str, key: str) -> None:
    """Count one admitted request of the conversation (and start its clock)."""
    await conn.execute(_COUNT_REQUEST, task_id, key)


async def add_tool_calls(conn: asyncpg.Connection, task_id: str, key: str, new_calls: int,
                         limit: int | None) -> int:
    """Add ``new_calls`` to the conversation's tool calls; returns its total. With no
    new calls the total is read only when a ceiling needs it (else 0)."""
    total: int
    if new_calls:
        total = await conn.fetchval(_ADD_TOOL_CALLS, task_id, key, new_calls)
    elif limit is None:
        total = 0
    else:
        total = await conn.fetchval(_TOOL_CALLS, task_id, key) or 0
    return total

