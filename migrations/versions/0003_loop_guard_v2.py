"""Loop guard, second generation: per-conversation counters and ceilings, empty-result
flag and optional raw result hash in the ledger, per-task upstream timeout, refused
request counter.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_TASK_COLUMNS = (
    ("conversation_request_limit", sa.BigInteger),
    ("conversation_tool_call_limit", sa.BigInteger),
    ("conversation_max_duration_s", sa.Float),
    ("upstream_timeout_s", sa.Float),
)


def upgrade() -> None:
    for name, type_ in _TASK_COLUMNS:
        op.add_column("tasks", sa.Column(name, type_))
    op.add_column("tasks", sa.Column("refused_requests", sa.BigInteger, nullable=False,
                                     server_default=sa.text("0")))
    op.add_column("tool_calls", sa.Column("is_empty", sa.Boolean))
    op.add_column("tool_calls", sa.Column("raw_result_hash", sa.Text))
    op.create_table(
        "conversations",
        sa.Column("task_id", sa.Text, sa.ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("conversation_key", sa.Text, primary_key=True),
        sa.Column("requests", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("tool_calls", sa.BigInteger, nullable=False, server_default=sa.text("0")),
        sa.Column("first_request_at", sa.DateTime(timezone=True)),
        sa.Column("response_hash", sa.Text),
        sa.Column("response_streak", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )


def downgrade() -> None:
    op.drop_table("conversations")
    op.drop_column("tool_calls", "raw_result_hash")
    op.drop_column("tool_calls", "is_empty")
    op.drop_column("tasks", "refused_requests")
    for name, _ in reversed(_TASK_COLUMNS):
        op.drop_column("tasks", name)
