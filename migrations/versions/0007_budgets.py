"""Fleet budgets (issue 24): ceilings over many tasks, their spend per window, and
budget keys that open a task per agent run.

- ``budgets``: a named ceiling (``request_limit``, ``token_limit``, ``cost_limit_usd``,
  any subset) with an optional ``parent_id`` (nesting, ``depth`` 1..4), a calendar
  ``window`` (NULL lifetime, ``day``, ``week``, ``month``) in ``timezone``;
- ``budget_windows``: the spend of one budget in one window (requests admitted, tokens
  reported, dollars settled and reserved); past windows are kept;
- ``budget_keys``: API keys (hashed) that create a task per run from their ``template``;
- ``tasks.budget_id``: the budget a task draws from (NULL: none);
- ``reservations.budget_ids`` / ``budget_window_starts``: the budget windows a dollar hold
  also reserved in (released with it by settlement or the sweeper, exactly once).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "budgets",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("parent_id", sa.Text, sa.ForeignKey("budgets.id", ondelete="RESTRICT")),
        sa.Column("depth", sa.Integer, nullable=False, server_default=sa.text("1")),
        sa.Column("request_limit", sa.BigInteger),
        sa.Column("token_limit", sa.BigInteger),
        sa.Column("cost_limit_usd", sa.Numeric(20, 10)),
        sa.Column("window", sa.Text),
        sa.Column("timezone", sa.Text, nullable=False, server_default=sa.text("'UTC'")),
        sa.Column("metadata", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.CheckConstraint("depth BETWEEN 1 AND 4", name="ck_budgets_depth"),
        sa.CheckConstraint("\"window\" IS NULL OR \"window\" IN ('day', 'week', 'month')",
                           name="ck_budgets_window"),
    )
    op.create_index("ix_budgets_parent_id", "budgets", ["parent_id"])
    op.create_table(
        "budget_windows",
        sa.Column("budget_id", sa.Text, sa.ForeignKey("budgets.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("window_start", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("window_end", sa.DateTime(timezone=True)),
        sa.Column("admitted_requests", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("input_tokens", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("output_tokens", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("cost_usd", sa.Numeric(20, 10), nullable=False, server_default=sa.text("0")),
        sa.Column("reserved_usd", sa.Numeric(20, 10), nullable=False, server_default=sa.text("0")),
        sa.Column("exhausted_at", sa.DateTime(timezone=True)),
    )
    op.create_table(
        "budget_keys",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("budget_id", sa.Text, sa.ForeignKey("budgets.id", ondelete="CASCADE"), nullable=False),
        sa.Column("key_hash", sa.Text, nullable=False, unique=True),
        sa.Column("template", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("metadata", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("revoked_at", sa.DateTime(timezone=True)),
    )
    op.create_index("ix_budget_keys_budget_id", "budget_keys", ["budget_id"])
    op.add_column("tasks", sa.Column("budget_id", sa.Text, sa.ForeignKey("budgets.id", ondelete="RESTRICT")))
    op.create_index("ix_tasks_budget_id", "tasks", ["budget_id"])
    op.add_column("reservations", sa.Column("budget_ids", ARRAY(sa.Text)))
    op.add_column("reservations", sa.Column("budget_window_starts", ARRAY(sa.DateTime(timezone=True))))


def downgrade() -> None:
    op.drop_column("reservations", "budget_window_starts")
    op.drop_column("reservations", "budget_ids")
    op.drop_index("ix_tasks_budget_id", "tasks")
    op.drop_column("tasks", "budget_id")
    op.drop_table("budget_keys")
    op.drop_table("budget_windows")
    op.drop_table("budgets")
