"""Database URLs as operators write them, in the form taskgate uses.

``postgresql://``, ``postgres://`` (libpq, Heroku, most hosting dashboards) and
``postgresql+asyncpg://`` (SQLAlchemy) all mean the same database; taskgate keeps the
SQLAlchemy asyncpg form internally. Pure functions.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

ACCEPTED_SCHEMES = ("postgresql", "postgres", "postgresql+asyncpg", "postgres+asyncpg")


def normalize_database_url(url: str) -> str:
    """``url`` with the scheme ``postgresql+asyncpg``. Raises ``ValueError`` (one line,
    without the password) for anything that is not a PostgreSQL URL."""
    scheme, sep, rest = url.strip().partition("://")
    if not sep or scheme.lower() not in ACCEPTED_SCHEMES:
        shown = f"{scheme}://" if sep else "a value without a scheme"
        raise ValueError(f"expects a postgresql:// or postgres:// URL "
                         f"(e.g. postgresql://user:password@host:5432/taskgate), got {shown}")
    if not rest:
        raise ValueError("expects a postgresql:// URL with a host or socket and a database name")
    return f"postgresql+asyncpg://{rest}"


def describe(url: str) -> str:
    """``host:port/database`` of a URL, for messages (never the user or password)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or parse_qs(parts.query).get("host", ["localhost"])[0]
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(unparsable URL)"
    return f"{host}{port}/{parts.path.lstrip('/') or '(default database)'}"
