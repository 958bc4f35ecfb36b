"""Escrow leases of fleet budgets (issue 24 §2, no hot row): a task holds a slice of
each budget window's request allowance and spends it under its own row lock.

- ``budget_leases``: one row per task and budget window: ``granted`` requests of the
  window's allowance, ``spent`` of them admitted, the ``request_limit`` in force when
  it was granted (a changed limit makes the lease unspendable), the window's bounds and
  ``expires_at`` (an expired lease is folded back into its window by the sweep);
- ``budget_windows.leased_requests``: the sum of ``granted`` over the window's leases.
  ``admitted_requests + leased_requests <= request_limit`` holds for every window;
- ``taskgate_abort(text)``: raises its message (the budget fast path's abort).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


#: Raises its message (SQLSTATE P0001): a statement that finds it must not go on (the
#: budget fast path when a chain's leases paid only in part) aborts and writes nothing.
_ABORT = """
CREATE OR REPLACE FUNCTION taskgate_abort(message text) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION '%', message;
END $$
"""


def upgrade() -> None:
    op.add_column("budget_windows", sa.Column("leased_requests", sa.BigInteger, nullable=False,
                                              server_default=sa.text("0")))
    op.create_table(
        "budget_leases",
        sa.Column("holder", sa.Text, primary_key=True),
        sa.Column("budget_id", sa.Text, primary_key=True),
        sa.Column("window_start", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("window_end", sa.DateTime(timezone=True)),
        sa.Column("granted", sa.BigInteger, nullable=False),
        sa.Column("spent", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("request_limit", sa.BigInteger),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["budget_id", "window_start"], ["budget_windows.budget_id",
                                                                 "budget_windows.window_start"],
                                ondelete="CASCADE"),
        sa.CheckConstraint("spent >= 0 AND spent <= granted", name="ck_budget_leases_spent"),
    )
    op.create_index("ix_budget_leases_window", "budget_leases", ["budget_id", "window_start"])
    op.create_index("ix_budget_leases_expires_at", "budget_leases", ["expires_at"])
    op.execute(_ABORT)


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS taskgate_abort(text)")
    op.drop_table("budget_leases")
    op.drop_column("budget_windows", "leased_requests")
