"""The plpgsql functions from their one home, ``app/db/sql/functions/`` (issue 35).

Until now the current text of each function was whichever migration last replaced it
(``taskgate_agent_turn``: 0009 then 0012; ``taskgate_record_response``: 0011 then 0015;
``taskgate_known_turn``: 0013; ``taskgate_abort``: 0010). From here on the files in
``app/db/sql/functions/`` are the truth (:mod:`app.db.sql`): this migration runs every
function's ``CREATE OR REPLACE FUNCTION`` as those files read when it was written, in
name order, from its frozen copies (``migrations/functions/0018/``,
:mod:`migrations.functions`), each pinned by its digest in ``LOADS``. A later change to
a function edits its file and adds a migration with a copy of the new text of its own:
this one keeps creating what it always created, which a fresh install needs (a newer
text may use a column or table of a migration after this one).

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

from migrations import functions

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

#: The functions this migration loads, each pinned to the digest of its copy in
#: ``migrations/functions/0018/`` (``app.db.sql.digest``: a copy never changes; the newest
#: copy of a function is its current file: ``tests/test_sql_home.py``).
LOADS = {
    "taskgate_abort": "e9f3415c45d13c90",
    "taskgate_admissible": "3f6b0f513a0a5e96",
    "taskgate_agent_turn": "3f08188638b90d12",
    "taskgate_known_turn": "414636d31bbaf7cf",
    "taskgate_one_statement": "547a0663ed558e0e",
    "taskgate_record_response": "067b404369b61630",
}


def _migration(file: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("migration_" + file[:4], Path(__file__).with_name(file))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def upgrade() -> None:
    for text in functions.texts(revision, LOADS):
        op.execute(text)


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
