"""A round of usage settlements is planned once per session (issue 39).

``taskgate_settle_usage_batch``: the statement ``settle_usage_batch`` sent as a prepared
statement (0020's rounds, ``app.db.settlements``) wrapped in a PL/pgSQL function with
``SET plan_cache_mode = force_generic_plan``, so its plan is made once per session and
kept. As a prepared statement PostgreSQL planned it again for every round: its custom
plan, which sees the arrays' lengths, always looked cheaper than the generic one, and
planning its eight parts cost more than running them. The same rows are written, in the
same lock order; the tasks and admissions are found by their keys (``= ANY``) so the
generic plan reads their indexes at any table size (it read the whole ``tasks`` table
at 1,000 tasks).

Downgrade: the function is dropped (the statement of the release before this one holds
its text).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-04
"""
from alembic import op

from migrations import functions

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

#: The functions this migration loads, pinned to their copies' digests (``app.db.sql.digest``).
LOADS = {
    "taskgate_settle_usage_batch": "edc9c49a3d747217",
}


def upgrade() -> None:
    for text in functions.texts(revision, LOADS):
        op.execute(text)


def downgrade() -> None:
    op.execute("DROP FUNCTION taskgate_settle_usage_batch(uuid[], text[], bigint[], bigint[], numeric[], numeric[],"
               " bigint[], text[])")
