"""The SQL that runs, in one place: the current text of every plpgsql function and the
named statements the core sends, read once at import from the package's ``.sql`` files.

- ``functions/<name>.sql``: one ``CREATE OR REPLACE FUNCTION <name>(...)`` per file, its
  body between ``$fn$`` delimiters, under ``--`` lines saying what it does;
  :func:`function_text` is the whole statement, :func:`function_body` the body PostgreSQL
  keeps (``pg_proc.prosrc``). These files are the truth of what runs, but no migration
  reads them: a migration loads its own frozen copy of each text it needs,
  ``migrations/functions/<revision>/<name>.sql`` (:mod:`migrations.functions`), pinned
  by :func:`digest` in its ``LOADS = {name: digest}``, so a fresh install builds each
  function as its migration wrote it, before the later migrations' tables and columns
  exist. ``tests/test_sql_home.py`` checks that every copy matches its pin, that the
  newest copy of every function is its file here, and that the migrated database holds
  exactly these files' functions and no other ``taskgate_*`` one. **To change a
  function**: edit its file, copy it to ``migrations/functions/<revision>/`` of a new
  migration that loads it (:func:`migrations.functions.texts`) and pins its digest; a
  changed signature or return type needs a ``DROP FUNCTION`` first; the downgrade loads
  the previous migration's copy. Never edit a copy. To add a function, add a file and
  such a migration. :func:`function_names` is in name order, the order a migration
  loads them (a ``LANGUAGE sql`` function's body is checked at creation: what it calls
  must sort first, or be created first).
- ``<area>.sql``: named statements, each headed ``-- name: <name>`` (names unique across
  the files); the ``--`` lines right under the header document it and are not sent;
  :func:`statement` returns the text as sent (asyncpg numbers its parameters ``$1`` ...),
  the calls of :data:`INLINED` replaced by the functions' own text (:func:`inline`: the
  one place SQL is assembled from text, and why). Shared parts (a relaxed commit, the
  spend row) are written out in every statement that runs them, so each reads whole.

Raises ``KeyError`` for an unknown name; a malformed file fails at import
(``ValueError``: a duplicate name, a statement without a name, a function file without
its ``$fn$`` body or its statement).
"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Final

_DELIMITER: Final = "$fn$"
_NAME: Final = "-- name:"
_CREATE: Final = "CREATE OR REPLACE FUNCTION "


def check_function(text: str, source: str = "<text>") -> str:
    """``text`` if it is a function file (see the module docstring): ``--`` lines, then one
    ``CREATE OR REPLACE FUNCTION`` statement with its body between two ``$fn$``
    delimiters. Raises ``ValueError`` otherwise."""
    if text.count(_DELIMITER) != 2:
        raise ValueError(f"{source}: the body goes between two {_DELIMITER} delimiters")
    if not definition(text).startswith(_CREATE):
        raise ValueError(f"{source}: after the '--' lines, one {_CREATE} statement")
    return text


def definition(text: str) -> str:
    """A function file's statement without the ``--`` lines (and blank lines) heading it:
    what :func:`digest` covers (the function's name, arguments, result, language and
    body; a comment inside the statement is part of it)."""
    lines = text.splitlines()
    while lines and (not lines[0].strip() or lines[0].startswith("--")):
        lines.pop(0)
    return "\n".join(lines)


def digest(text: str) -> str:
    """16 hex digits of the SHA-256 of function file ``text``'s :func:`definition` with its
    whitespace normalised (words joined by one space): what a migration pins for each
    text it loads (``LOADS``), so an edited copy, or a file changed without a migration
    loading it, is seen (``tests/test_sql_home.py``)."""
    words = " ".join(definition(text).split())
    return hashlib.sha256(words.encode("utf-8")).hexdigest()[:16]


def _read_functions() -> dict[str, str]:
    folder = resources.files(__name__).joinpath("functions")
    texts: dict[str, str] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            texts[entry.name[:-4]] = check_function(entry.read_text(encoding="utf-8"), entry.name)
    return texts


def parse_statements(text: str, source: str = "<text>") -> dict[str, str]:
    """``{name: statement}`` of a file of named statements (see the module docstring):
    the statement's lines, less the documenting ``--`` lines under its header and
    surrounding blank lines, joined by newlines, without a final ``;``."""
    named: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith(_NAME):
            name = line[len(_NAME):].strip()
            if not name or name in named:
                raise ValueError(f"{source}: statement name {name!r} empty or used twice")
            current = named[name] = []
        elif current is None:
            if line.strip() and not line.startswith("--"):
                raise ValueError(f"{source}: SQL before the first '{_NAME}' header")
        elif current or not line.startswith("--"):
            current.append(line.rstrip())
    statements = {}
    for name, lines in named.items():
        body = "\n".join(lines).strip().removesuffix(";").rstrip()
        if not body:
            raise ValueError(f"{source}: statement {name!r} is empty")
        statements[name] = body
    return statements


def _read_statements() -> dict[str, str]:
    """Every file's statements, their inlined calls replaced (:func:`inline`)."""
    statements: dict[str, str] = {}
    for entry in sorted(resources.files(__name__).iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            for name, body in parse_statements(entry.read_text(encoding="utf-8"), entry.name).items():
                if name in statements:
                    raise ValueError(f"{entry.name}: statement name {name!r} used in another file")
                statements[name] = inline(body)
    return statements


def function_names() -> tuple[str, ...]:
    """Every function with a file, in name order (the order a migration loads them)."""
    return tuple(_FUNCTIONS)


def function_text(name: str) -> str:
    """The ``CREATE OR REPLACE FUNCTION`` statement of function ``name`` (its file)."""
    return _FUNCTIONS[name]


def function_body(name: str) -> str:
    """The body of function ``name``: the text between its ``$fn$`` delimiters, as
    PostgreSQL stores it in ``pg_proc.prosrc``."""
    return _FUNCTIONS[name].split(_DELIMITER)[1]


def function_digest(name: str) -> str:
    """:func:`digest` of function ``name``'s file: what the newest migration loading it pins."""
    return digest(_FUNCTIONS[name])


def expression(name: str, row: str, **parameters: str) -> str:
    """The body of function ``name`` (``LANGUAGE sql``, ``SELECT <expression>`` over its
    row argument ``t``) as an SQL expression over ``row`` (a table or alias: ``t.x``
    after a space or ``(`` becomes ``row.x``), each parameter named in ``parameters``
    replaced by its SQL (``p_reservation_usd="NULL"``), in parentheses.

    Used by :func:`inline` (the reason is there). Raises ``ValueError`` when the body is
    not one ``SELECT`` of an expression."""
    body = " ".join(function_body(name).split())
    if not body.startswith("SELECT ") or ";" in body or " FROM " in body:
        raise ValueError(f"{name}: not a LANGUAGE sql function of one SELECT expression")
    body = " " + body.removeprefix("SELECT ")
    for before in (" ", "("):
        body = body.replace(before + "t.", before + row + ".")
    for parameter, value in parameters.items():
        body = body.replace(parameter, value)
    return "(" + body[1:] + ")"


#: The calls a statement may write that are sent as the called function's own text:
#: call -> (function, the row it reads, its other parameters' SQL).
INLINED: Final = {
    "taskgate_admissible(tasks)": ("taskgate_admissible", "tasks", {"p_reservation_usd": "NULL"}),
    "taskgate_one_statement(tasks)": ("taskgate_one_statement", "tasks", {}),
}


def inline(text: str) -> str:
    """``text`` with every call in :data:`INLINED` replaced by the function's text
    (:func:`expression`): what the named statements send, and
    :data:`app.admission.limits.ADMISSIBLE`.

    The one place SQL is assembled from text, for a measured reason: PostgreSQL inlines a
    ``LANGUAGE sql`` function each time it plans a statement (parsing its body), which cost
    the fast-path admission 55 -> 113 µs of planning, 853 -> 911 µs per execution where
    every execution is planned (no statement cache: PgBouncer); with the function's own
    text the plan is the same and planning 54 µs. The statement files still read as the
    calls (and mean the same sent either way)."""
    for call, (name, row, parameters) in INLINED.items():
        if call in text:
            text = text.replace(call, expression(name, row, **parameters))
    return text


def statement(name: str) -> str:
    """The named statement ``name`` (``-- name: <name>`` in one of ``app/db/sql/*.sql``)."""
    return _STATEMENTS[name]


def statement_names() -> tuple[str, ...]:
    """Every named statement, by file then position."""
    return tuple(_STATEMENTS)


_FUNCTIONS: Final = _read_functions()
_STATEMENTS: Final = _read_statements()
