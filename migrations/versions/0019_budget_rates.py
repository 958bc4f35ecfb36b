"""Per-model limits and rates of a budget (issue 38 item 4).

- ``budgets.model_limits``: JSONB list of ``{"model": glob, "cost_limit_usd"?: "decimal
  string", "token_limit"?: int}``, counted in the budget's current window per glob; NULL:
  none. ``budgets.requests_per_minute`` / ``tokens_per_minute``: rates per fixed UTC minute.
  A budget with any of them is admitted on the locked path (``app.budgets.ledger``), never
  on an escrow lease.
- ``budget_model_windows``: one row per budget, window and glob: requests admitted,
  tokens reported, dollars settled (``app.budgets.model_limits``).
- ``budget_model_holds``: the worst-case dollars of a request in flight under a glob with
  a dollar limit, by its ``reservations`` row: counted only while that row exists (a
  settled or swept hold stops counting with it; no sweep of its own).
- ``budget_rates``: one row per rated budget and minute: requests admitted and tokens
  reported in it (``app.budgets.rates``).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-04
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("budgets", sa.Column("model_limits", JSONB))
    op.add_column("budgets", sa.Column("requests_per_minute", sa.BigInteger))
    op.add_column("budgets", sa.Column("tokens_per_minute", sa.BigInteger))
    op.create_table(
        "budget_model_windows",
        sa.Column("budget_id", sa.Text, sa.ForeignKey("budgets.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("window_start", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("model", sa.Text, primary_key=True),
        sa.Column("admitted_requests", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("input_tokens", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("output_tokens", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("cost_usd", sa.Numeric(20, 10), nullable=False, server_default=sa.text("0")),
    )
    op.create_table(
        "budget_model_holds",
        sa.Column("reservation_id", sa.BigInteger, primary_key=True),
        sa.Column("budget_id", sa.Text, sa.ForeignKey("budgets.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("model", sa.Text, primary_key=True),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("usd", sa.Numeric(20, 10), nullable=False),
    )
    op.create_index("ix_budget_model_holds_window", "budget_model_holds", ["budget_id", "window_start", "model"])
    op.create_table(
        "budget_rates",
        sa.Column("budget_id", sa.Text, sa.ForeignKey("budgets.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("minute_start", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("requests", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("tokens", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    )


def downgrade() -> None:
    op.drop_table("budget_rates")
    op.drop_index("ix_budget_model_holds_window", table_name="budget_model_holds")
    op.drop_table("budget_model_holds")
    op.drop_table("budget_model_windows")
    for column in ("tokens_per_minute", "requests_per_minute", "model_limits"):
        op.drop_column("budgets", column)
