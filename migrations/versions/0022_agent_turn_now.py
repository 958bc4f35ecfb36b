"""The agent-turn path explains a refusal with the database's clock (issue 35).

``taskgate_agent_turn`` also returns ``rule_now``, the ``now()`` its admission rule
(``taskgate_admissible``) decided with, as the locked path's lock statements do; a
refusal's numbers (``max_duration``'s ``elapsed_s``) quote it instead of the gateway's
clock (:mod:`app.admission.turn`). The return type changes: dropped and created again
from this migration's copy (``migrations/functions/0022/``, pinned in ``LOADS``).

Downgrade: the function as 0018 created it (its copy in ``migrations/functions/0018/``).

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-04
"""
import importlib.util
from pathlib import Path

from alembic import op

from migrations import functions

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

#: The functions this migration loads, pinned to their copies' digests (``app.db.sql.digest``).
LOADS = {
    "taskgate_agent_turn": "210a9ec614f6f637",
}

_DROP = ("DROP FUNCTION taskgate_agent_turn(text, boolean, jsonb, text, integer, boolean, text[], text[], text[],"
         " text[], text[], text[], boolean[], boolean[], text[])")


def upgrade() -> None:
    op.execute(_DROP)
    for text in functions.texts(revision, LOADS):
        op.execute(text)


def downgrade() -> None:
    spec = importlib.util.spec_from_file_location("migration_0018", Path(__file__).with_name("0018_sql_home.py"))
    assert spec is not None and spec.loader is not None
    previous = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(previous)
    op.execute(_DROP)
    op.execute(functions.text(previous.revision, "taskgate_agent_turn", previous.LOADS["taskgate_agent_turn"]))
