"""Warning thresholds of a budget (issue 38 item 1).

- ``budgets.thresholds``: percents of each limit (0 < t <= 100) whose crossing in a
  window is announced; NULL: the default (50, 80, 95); an empty array: none.
- ``budget_warnings``: one row per budget, window, limit and threshold crossed, written
  with ``INSERT ... ON CONFLICT DO NOTHING``: whichever gateway process sees the crossing
  first announces it (webhook, event log), every other one finds the row. Deleted with
  its budget.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("budgets", sa.Column("thresholds", ARRAY(sa.Float)))
    op.create_table(
        "budget_warnings",
        sa.Column("budget_id", sa.Text, sa.ForeignKey("budgets.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("window_start", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("limit_name", sa.Text, primary_key=True),
        sa.Column("threshold", sa.Float, primary_key=True),
        sa.Column("crossed_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )


def downgrade() -> None:
    op.drop_table("budget_warnings")
    op.drop_column("budgets", "thresholds")
