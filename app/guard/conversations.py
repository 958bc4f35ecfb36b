"""Per-conversation counters (the ``conversations`` table): thin I/O around the pure
rules of :mod:`app.guard.conversation_rules`. Every function takes an asyncpg
connection; admission and the ledger call them with the task row locked, so the
read-check-count sequences here never race within one task."""

from __future__ import annotations

from typing import Any

import asyncpg

_GET = ("SELECT requests, tool_calls, first_request_at, response_hash, response_streak"
        " FROM conversations WHERE task_id = $1 AND conversation_key = $2")
_COUNT_REQUEST = (
    "INSERT INTO conversations (task_id, conversation_key, requests, first_request_at)"
    " VALUES ($1, $2, 1, now()) ON CONFLICT (task_id, conversation_key) DO UPDATE"
    " SET requests = conversations.requests + 1,"
    "     first_request_at = COALESCE(conversations.first_request_at, now()), updated_at = now()"
)
# A response (or request) with new tool calls also breaks a run of repeated answers.
_ADD_TOOL_CALLS = (
    "INSERT INTO conversations (task_id, conversation_key, tool_calls) VALUES ($1, $2, $3)"
    " ON CONFLICT (task_id, conversation_key) DO UPDATE"
    " SET tool_calls = conversations.tool_calls + EXCLUDED.tool_calls,"
    "     response_hash = NULL, response_streak = 0, updated_at = now()"
    " RETURNING tool_calls"
)
_TOOL_CALLS = "SELECT tool_calls FROM conversations WHERE task_id = $1 AND conversation_key = $2"
#: A text answer of the task in ``{task}`` (a ``WITH`` item holding the locked task row):
#: ``{key}`` the conversation, ``{text}`` the answer's SHA-256, ``{repeat}`` whether the
#: model saw the answer it gives again (:func:`app.guard.conversation_rules.answer_repeats`).
#: A repeat of the last answer extends the run, a repeat of another text starts one; an
#: answer that repeats nothing it saw ends the run. Returns ``response_streak``.
ANSWER_OF_TASK = (
    "INSERT INTO conversations (task_id, conversation_key, response_hash, response_streak)"
    " SELECT {task}.id, {key}, {text}, CASE WHEN {repeat}::boolean THEN 1 ELSE 0 END FROM {task}"
    " ON CONFLICT (task_id, conversation_key) DO UPDATE"
    " SET response_streak = CASE WHEN EXCLUDED.response_streak = 0 THEN 0"
    "                            WHEN conversations.response_hash = EXCLUDED.response_hash"
    "                            THEN conversations.response_streak + 1 ELSE 1 END,"
    "     response_hash = EXCLUDED.response_hash, updated_at = now()"
    " RETURNING response_streak"
)


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

