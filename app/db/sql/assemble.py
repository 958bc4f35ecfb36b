"""The statements assembled at run time, in one place, and why.

A few admin statements have a part chosen per request: which columns a ``PATCH`` sets,
which keys the spend export groups by (and so which joins it needs). A fixed statement
per choice is impractical (18 patchable task columns: 2^18 ``SET`` lists; five group-by
keys in any order: 325 groupings), and a ``CASE`` per column would write every column of
every patch. So their text is a named piece of ``app/db/sql/admin.sql`` with
``{placeholders}``, and :func:`fill` puts in parts that callers build from fixed names
only (a module's tuple of patchable columns, the export's table of key expressions),
never text from the request. The parameters stay ``$N`` values.

Raises ``KeyError`` for an unknown piece or a placeholder left without a part.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.db.sql import statement


def fill(name: str, **parts: str) -> str:
    """Named piece ``name`` with each ``{placeholder}`` replaced by ``parts[placeholder]``."""
    return statement(name).format_map(parts)


def assignments(columns: Iterable[str], allowed: Iterable[str], first: int = 2) -> str:
    """``a = $2, b = $3``: a ``SET`` list of ``columns`` (each one of ``allowed``, else
    ``ValueError``), their values the parameters from ``$first`` on, in order."""
    allowed = frozenset(allowed)
    columns = list(columns)
    unknown = [c for c in columns if c not in allowed]
    if unknown:
        raise ValueError(f"not a settable column: {unknown}")
    return ", ".join(f"{column} = ${n}" for n, column in enumerate(columns, start=first))
