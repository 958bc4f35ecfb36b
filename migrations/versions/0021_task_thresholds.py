"""Warning thresholds of a task (issue 38 item 1, the task's half).

- ``tasks.thresholds``: percents of each of the task's limits (request_limit,
  token_limit, cost_limit_usd; 0 < t <= 100) whose crossing is announced; NULL: the
  default (50, 80, 95); an empty array: none.
- ``task_warnings``: one row per task, limit, limit value and threshold crossed, written
  with ``INSERT ... ON CONFLICT DO NOTHING``: whichever gateway process sees the crossing
  first announces it (webhook ``task.threshold``, a ``task_warning`` event). A task has no
  window: the limit's value is in the key, so raising (or lowering) a limit re-arms its
  thresholds. Deleted with its task.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-04
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tasks", sa.Column("thresholds", ARRAY(sa.Float)))
    op.create_table(
        "task_warnings",
        sa.Column("task_id", sa.Text, sa.ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("limit_name", sa.Text, primary_key=True),
        sa.Column("limit_value", sa.Numeric(20, 10), primary_key=True),
        sa.Column("threshold", sa.Float, primary_key=True),
        sa.Column("crossed_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )


def downgrade() -> None:
    op.drop_table("task_warnings")
    op.drop_column("tasks", "thresholds")
