"""Reservations as rows (issue 21, item 4): every dollar hold of an admitted request,
with its deadline and the process that owns it, so that holds stranded by a killed
gateway are released (app/admission/reservations.py). ``tasks.reserved_usd`` stays the
sum the admission checks read; a row is deleted in the statement that settles it.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reservations",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("task_id", sa.Text, sa.ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
        sa.Column("amount_usd", sa.Numeric(20, 10), nullable=False),
        sa.Column("deadline_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("owner_host", sa.Text, nullable=False),
        sa.Column("owner_pid", sa.Integer, nullable=False),
        sa.Column("owner_started_at", sa.Float, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    op.create_index("ix_reservations_deadline_at", "reservations", ["deadline_at"])
    op.create_index("ix_reservations_task_id", "reservations", ["task_id"])


def downgrade() -> None:
    op.drop_table("reservations")
