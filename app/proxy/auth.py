"""Authenticate a proxied request from its headers, before its body is read.

An unknown token costs one indexed lookup (``tasks.token_hash`` is unique) and never a
body read: a flood of unauthenticated uploads cannot fill the gateway's memory.
Tokens that were valid recently are remembered in a small bounded cache
(:class:`KnownTokens`) so that valid requests do not pay a second round trip on top of
admission. The cache only decides whether to *skip this pre-check*: admission still
looks the token up in its own transaction and is the only truth (a deleted task is
refused there with the same 401).
"""

from __future__ import annotations

from collections import OrderedDict

import asyncpg

from app.db import sql
from app.errors import fail_closed, unauthorized

_EXISTS = sql.statement("proxy_token_exists")


class KnownTokens:
    """Least-recently-used set of token hashes seen valid, at most ``size`` entries
    (64 bytes of hex each: 10,000 entries ≈ 1.5 MB)."""

    def __init__(self, size: int = 10_000) -> None:
        self.size = size
        self._seen: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, token_hash: str) -> bool:
        if token_hash in self._seen:
            self._seen.move_to_end(token_hash)
            return True
        return False

    def add(self, token_hash: str) -> None:
        self._seen[token_hash] = None
        self._seen.move_to_end(token_hash)
        if len(self._seen) > self.size:
            self._seen.popitem(last=False)


async def require_known_token(pool: asyncpg.Pool, known: KnownTokens, token_hash: str) -> None:
    """Pass when ``token_hash`` belongs to a task (cached, or one lookup); raise 401
    (``connection: close``) for an unknown token, 503 when the database cannot answer."""
    if token_hash in known:
        return
    with fail_closed("token lookup"):
        async with pool.acquire() as conn:
            found = await conn.fetchval(_EXISTS, token_hash)
    if found is None:
        raise unauthorized("Unknown task token. Use the token returned by POST /admin/tasks.", close=True)
    known.add(token_hash)
