"""A judged text answer settles in a round with the others in flight (issue 39).

``taskgate_settle_batch``: 0023's ``taskgate_settle_usage_batch`` with three more arrays,
a judged answer's conversation key, text hash and whether it counts toward the
conversation's run of identical answers; for each answer written it returns what the
``repeated_response`` rule reads (the task's status and loop_guard, the run's length). An
agent turn's answer was a statement of its own (``ledger_add_answer``, 150-180 µs of
PostgreSQL CPU on one connection); in a round of four it costs 80-100 µs. The
conversation's row is written after its task's row lock, the order admission takes.

A new name, not a changed signature: ``taskgate_settle_usage_batch`` stays, so gateways of
the release before keep settling while this release's replace them (a later migration
drops it).

Downgrade: ``taskgate_settle_batch`` dropped.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-04
"""
from alembic import op

from migrations import functions

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

#: The functions this migration loads, pinned to their copies' digests (``app.db.sql.digest``).
LOADS = {
    "taskgate_settle_batch": "78d10f7a63ae5e7b",
}


def upgrade() -> None:
    for text in functions.texts(revision, LOADS):
        op.execute(text)


def downgrade() -> None:
    op.execute("DROP FUNCTION taskgate_settle_batch(uuid[], text[], bigint[], bigint[], numeric[], numeric[], bigint[],"
               " text[], text[], text[], boolean[])")
