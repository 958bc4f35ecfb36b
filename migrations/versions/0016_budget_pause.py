"""A budget's kill switch (issue 38 item 3) and its event log.

- ``budgets.paused_at`` / ``paused_by`` / ``paused_reason``: set by
  ``POST /admin/budgets/{id}/pause``, cleared by ``.../resume``. While set, every
  admission of a task under the budget or any budget nested in it is refused: the escrow
  lease statements pay only for budgets with ``paused_at IS NULL``
  (``app.budgets.escrow``), and the locked path refuses on the chain it reads in its
  transaction (``app.budgets.ledger.chain``). Tasks are not touched.
- ``budget_events``: a budget's durable history (``paused``, ``resumed``, and what later
  items add), oldest first by ``id``; deleted with its budget.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("budgets", sa.Column("paused_at", sa.DateTime(timezone=True)))
    op.add_column("budgets", sa.Column("paused_by", sa.Text))
    op.add_column("budgets", sa.Column("paused_reason", sa.Text))
    op.create_table(
        "budget_events",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("budget_id", sa.Text, sa.ForeignKey("budgets.id", ondelete="CASCADE"), nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("detail", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_index("ix_budget_events_budget_id_id", "budget_events", ["budget_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_budget_events_budget_id_id", table_name="budget_events")
    op.drop_table("budget_events")
    for column in ("paused_reason", "paused_by", "paused_at"):
        op.drop_column("budgets", column)
