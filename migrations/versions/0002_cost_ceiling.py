"""Dollar ceiling and allowed models per task.

- ``cost_limit_usd``: hard ceiling in US dollars (NULL = none);
- ``cost_usd``: settled cost of finished requests; ``reserved_usd``: worst-case cost of
  requests in flight (released when they settle);
- ``allowed_models``: JSON list of model globs the task may use (NULL = any).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

USD = sa.Numeric(20, 10)


def upgrade() -> None:
    op.add_column("tasks", sa.Column("cost_limit_usd", USD))
    op.add_column("tasks", sa.Column("cost_usd", USD, nullable=False, server_default=sa.text("0")))
    op.add_column("tasks", sa.Column("reserved_usd", USD, nullable=False, server_default=sa.text("0")))
    op.add_column("tasks", sa.Column("allowed_models", JSONB))


def downgrade() -> None:
    for column in ("allowed_models", "reserved_usd", "cost_usd", "cost_limit_usd"):
        op.drop_column("tasks", column)
