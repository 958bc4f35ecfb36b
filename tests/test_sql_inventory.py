"""Every SQL statement the code sends lives in ``app/db/sql/`` (issue 35): no string
constant in ``app/`` outside ``app/db/sql/`` reads as SQL, except the allowlist below,
each with its reason. Read with ``ast`` (string constants and the literal parts of
f-strings), so comments and the ``.sql`` files are not scanned; ``migrations/`` is
outside ``app/`` (history keeps its own copies)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from app.db import sql

APP = Path(__file__).resolve().parent.parent / "app"

#: A statement's opening, case-insensitive, after whitespace: the keyword and what
#: must follow it in SQL (so prose such as "Delete a task" or "Lock the task" and the
#: HTTP method "DELETE" do not read as SQL).
SQL = re.compile(r"""^\s*(?:
      select\s+(?:\*|\d|\$\d|distinct\b|[\w.]+\s*(?:\(|,|$|\s+as\b|\s+from\b)|.*\bfrom\b)
    | insert\s+into\b
    | update\s+\w+(?:\s+\w+)?\s+set\b
    | delete\s+from\b
    | with\s+(?:recursive\s+)?\w+(?:\s*\([^)]*\))?\s+as\s+(?:not\s+)?(?:materialized\s+)?\(
    | (?:create|alter|drop)\s+(?:or\s+replace\s+|unique\s+|temp(?:orary)?\s+)*
          (?:table|index|function|view|trigger|extension|type|schema|sequence|role|database)\b
    | lock\s+(?:table\s+)?\w+\s+in\s+
    | (?:listen|unlisten|notify)\s+"?\w+"?\s*(?:,|;|$)
    | truncate\s+(?:table\s+)?\w+\s*(?:,|;|$|\s+cascade|\s+restart)
    | set\s+(?:local\s+|session\s+)?\w+\s*(?:=|\s+to\b)
)""", re.IGNORECASE | re.VERBOSE | re.DOTALL)

#: (path under app/, the constant's text) -> why it may stay.
ALLOWED: dict[tuple[str, str], str] = {
    ("db/tasks.py", "SELECT 0"): "asyncpg's command tag of a latch that found the task stopped, not a statement",
}
#: Folders under app/ not read yet -> why (none: app/budgets/ and app/admission/ moved too).
ALLOWED_FOLDERS: dict[str, str] = {}


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """Each string constant, and each f-string's text with ``{}`` for its values."""
    found: list[tuple[int, str]] = []
    in_fstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = [v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}"
                     for v in node.values]
            in_fstrings.update(id(v) for v in node.values)
            found.append((node.lineno, "".join(parts)))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in in_fstrings:
            found.append((node.lineno, node.value))
    return found


def sql_strings(root: Path = APP) -> list[tuple[str, int, str]]:
    """``(path under app/, line, text)`` of every string in ``root`` that reads as SQL,
    outside ``app/db/sql/`` and :data:`ALLOWED`."""
    hits = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(("db/sql/", *ALLOWED_FOLDERS)):
            continue
        for line, text in _strings(ast.parse(path.read_text(encoding="utf-8"))):
            if SQL.match(text) and (relative, text) not in ALLOWED:
                hits.append((relative, line, text))
    return hits


def test_no_sql_outside_its_home():
    hits = sql_strings()
    assert not hits, "SQL outside app/db/sql/ (make it a named statement):\n" + "\n".join(
        f"app/{path}:{line}: {text[:80]!r}" for path, line, text in hits)


def test_the_allowlist_is_still_needed():
    for folder, reason in ALLOWED_FOLDERS.items():
        assert sql_strings(APP / folder), f"app/{folder} is clean now: remove it from ALLOWED_FOLDERS ({reason})"
    for (path, text), reason in ALLOWED.items():
        source = (APP / path).read_text(encoding="utf-8")
        assert any(t == text for _, t in _strings(ast.parse(source))), f"app/{path}: {text!r} is gone ({reason})"


def test_the_pattern_tells_sql_from_prose():
    for text in ("SELECT 1", "select * from tasks", "  WITH RECURSIVE up AS (SELECT 1)", "WITH x AS (",
                 "INSERT INTO t VALUES (1)", "UPDATE tasks t SET a = 1", "UPDATE tasks SET {}",
                 "DELETE FROM tasks", "SELECT pg_notify('{}', $1)", "SELECT w.*, {} FROM x",
                 "LISTEN taskgate_stop", "SET LOCAL synchronous_commit = on", "CREATE INDEX i ON t (a)",
                 "LOCK TABLE tasks IN SHARE MODE", "NOTIFY taskgate_stop"):
        assert SQL.match(text), text
    for text in ("Delete a task, its history and its ledger.", "DELETE", "DELETE 0", "Select the model.",
                 "Update tool calls from a parsed chunk", "Lock the task of ``token_hash``", " with more than ",
                 "Listen address (TASKGATE_HOST, default 127.0.0.1).", "Create (if missing) and lock",
                 "Set the latch for a stop", "listen", "truncate"):
        assert not SQL.match(text), text


def test_statements_that_mirror_python_names_agree():
    """The few statements whose text names something Python also names."""
    from app.admin import routes
    from app.db.tasks import STOP_CHANNEL

    assert f"pg_notify('{STOP_CHANNEL}', id)" in sql.statement("task_latch")
    insert = sql.statement("admin_task_insert")
    columns = [c.strip() for c in insert[insert.index("(") + 1:insert.index(")")].split(",")]
    assert tuple(columns) == routes._INSERT_COLUMNS
    assert insert.count("$") == len(routes._INSERT_COLUMNS)


def test_assembled_statements_take_only_known_names():
    """:mod:`app.db.sql.assemble`: a SET list names only allowed columns, and a piece
    filled in leaves no placeholder."""
    import pytest

    from app.db.sql import assemble

    assert assemble.assignments(["token_limit", "metadata"], ("metadata", "token_limit")) == (
        "token_limit = $2, metadata = $3")
    patch = assemble.fill("admin_task_patch", sets="token_limit = $2")
    assert patch == "UPDATE tasks SET token_limit = $2, updated_at = now() WHERE id = $1 RETURNING *"
    with pytest.raises(ValueError):
        assemble.assignments(["token_limit = 0, status"], ("token_limit",))
    with pytest.raises(KeyError):
        assemble.fill("admin_task_patch")
