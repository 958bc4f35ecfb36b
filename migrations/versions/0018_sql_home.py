"""The plpgsql functions from their one home, ``app/db/sql/functions/`` (issue 35).

Until now the current text of each function was whichever migration last replaced it
(``taskgate_agent_turn``: 0009 then 0012; ``taskgate_record_response``: 0011 then 0015;
``taskgate_known_turn``: 0013; ``taskgate_abort``: 0010). From here on the files in
``app/db/sql/functions/`` are the truth (:mod:`app.db.sql`): this migration runs every
file's ``CREATE OR REPLACE FUNCTION``, in name order; a later change to a function edits
its file and adds a migration that loads it again and pins its digest in ``LOADS``
(this one then loads the newer text too, which the later one replaces with the same).

New here, the one admission rule (issue 35 item 2): ``taskgate_admissible(t tasks,
p_reservation_usd)``, whether a task may admit one more request, and
``taskgate_one_statement(t tasks)``, whether a one-statement path may decide it (no
dollar ceiling, allowed models or conversation request/duration ceiling), both
``LANGUAGE sql``. ``taskgate_agent_turn`` now asks them instead of spelling the columns
out (same rule); the fast path and the budget lease paths take their text
(``app.admission.limits.ADMISSIBLE``, ``app.db.sql.expression``). ``tests/test_sql_home.py`` checks the
migrated database against the files.

Downgrade: the functions as the earlier migrations left them; a function those never
created is dropped.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04
"""
import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

from app.db import sql

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

#: The functions this migration loads, each pinned to its body's digest when it was
#: written (``app.db.sql.function_digest``; the newest pin of a function must match its
#: file: ``tests/test_sql_home.py``). A file's current text is what is loaded: a later
#: migration that changes a function loads the same text again.
LOADS = {
    "taskgate_abort": "16981a92db79936c",
    "taskgate_admissible": "5db456ada50d9882",
    "taskgate_agent_turn": "36ce6448d5c63f2d",
    "taskgate_known_turn": "3a5a1624a81daec1",
    "taskgate_one_statement": "21c9365d592a7423",
    "taskgate_record_response": "898fce4440b79a63",
}


def _migration(file: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("migration_" + file[:4], Path(__file__).with_name(file))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def upgrade() -> None:
    for name in sorted(LOADS):
        op.execute(sql.function_text(name))


def downgrade() -> None:
    """Each function as its last migration before this one left it; the others dropped."""
    record = _migration("0015_admissions.py")
    previous = {
        "taskgate_abort": _migration("0010_budget_leases.py")._ABORT,
        "taskgate_agent_turn": _migration("0012_agent_turn_results.py")._FUNCTION,
        "taskgate_known_turn": _migration("0013_known_turn.py")._FUNCTION,
        "taskgate_record_response": record._RECORD_RESPONSE.format(level=record._LEVEL),
    }
    for text in previous.values():
        op.execute(text)
    for name in LOADS:
        if name not in previous:
            op.execute(f"DROP FUNCTION IF EXISTS {name}")
