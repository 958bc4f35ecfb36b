"""The function texts each migration loads, frozen as it wrote them.

``<revision>/<name>.sql`` is function ``name`` as migration ``<revision>`` creates it: a
copy of ``app/db/sql/functions/<name>.sql`` (:mod:`app.db.sql`) on the day the migration
was written, never edited afterwards, pinned by :func:`app.db.sql.digest` in the
migration's ``LOADS = {name: digest}``. A fresh install runs every migration in order,
each with its own copies, so a function is built as its migration wrote it, before the
later migrations' tables and columns exist (the current file may already use them). The
newest copy of a function is its current file (``tests/test_sql_home.py``).

Raises ``ValueError`` when a copy's digest is not its pin (the copy was edited: a new
text goes in a new migration's folder) or the copy is not a function file, and
``FileNotFoundError`` when a pinned copy is missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

from app.db import sql

FOLDER: Final = Path(__file__).resolve().parent


def path(revision: str, name: str) -> Path:
    """Where migration ``revision`` keeps its copy of function ``name``."""
    return FOLDER / revision / f"{name}.sql"


def text(revision: str, name: str, digest: str) -> str:
    """The ``CREATE OR REPLACE FUNCTION`` statement of function ``name`` as migration
    ``revision`` loads it, checked against its pinned ``digest``."""
    file = path(revision, name)
    copy = sql.check_function(file.read_text(encoding="utf-8"), str(file))
    if sql.digest(copy) != digest:
        raise ValueError(f"{file}: digest {sql.digest(copy)}, pinned {digest}: a migration's copy never changes")
    return copy


def texts(revision: str, loads: Mapping[str, str]) -> list[str]:
    """The statements of migration ``revision``'s ``LOADS`` (function -> digest), in name
    order (the order they are created in: a ``LANGUAGE sql`` function's body is checked
    at creation)."""
    return [text(revision, name, loads[name]) for name in sorted(loads)]
