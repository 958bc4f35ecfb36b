"""``tool_calls.arguments_preview`` (issue 22): with ``TASKGATE_LEDGER_ARGUMENT_PREVIEW=N``,
the first N characters of a call's canonical arguments, secrets masked (NULL: off).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tool_calls", sa.Column("arguments_preview", sa.Text))


def downgrade() -> None:
    op.drop_column("tool_calls", "arguments_preview")
