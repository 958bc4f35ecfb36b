"""A judged text answer settles in a round with the others in flight (issue 39).

``taskgate_settle_usage_batch`` takes three more arrays, a judged answer's conversation
key, text hash and whether it counts toward the conversation's run of identical answers,
and for each answer written returns what the ``repeated_response`` rule reads: the
task's status and loop_guard and the run's length. An agent turn's answer, one statement
of its own until now (``ledger_add_answer``, ~200 µs of PostgreSQL CPU on a busy host),
settles in the round a plain request's usage does (80-100 µs a settlement there). The
conversation's row is written after its task's row lock, the order admission takes.

A gateway of the release before this one calls the eight-array function: run this
migration with the gateways of this release (as every migration here, before they
start); an older gateway's rounds fail and its settlements go to its backlog.

Downgrade: the eight-array function again (0023's copy).

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-04
"""
import importlib.util
from pathlib import Path

from alembic import op

from migrations import functions

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

#: The functions this migration loads, pinned to their copies' digests (``app.db.sql.digest``).
LOADS = {
    "taskgate_settle_usage_batch": "fc90aa70d13abe93",
}

_ARRAYS = "uuid[], text[], bigint[], bigint[], numeric[], numeric[], bigint[], text[]"


def upgrade() -> None:
    op.execute(f"DROP FUNCTION taskgate_settle_usage_batch({_ARRAYS})")
    for text in functions.texts(revision, LOADS):
        op.execute(text)


def downgrade() -> None:
    spec = importlib.util.spec_from_file_location("migration_0023",
                                                  Path(__file__).with_name("0023_settle_usage_batch.py"))
    assert spec is not None and spec.loader is not None
    previous = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(previous)
    op.execute(f"DROP FUNCTION taskgate_settle_usage_batch({_ARRAYS}, text[], text[], boolean[])")
    op.execute(functions.text(previous.revision, "taskgate_settle_usage_batch",
                              previous.LOADS["taskgate_settle_usage_batch"]))
