"""Task tokens: what an agent uses as its API key.

A token is ``tg-`` + 32 random URL-safe bytes. Only its SHA-256 hex digest is stored,
so a database dump does not reveal usable tokens.
"""

from __future__ import annotations

import hashlib
import secrets

TOKEN_PREFIX = "tg-"


def new_token() -> str:
    """A fresh task token (shown once, at task creation)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """SHA-256 hex digest of a token, as stored in ``tasks.token_hash``."""
    return hashlib.sha256(token.encode()).hexdigest()
